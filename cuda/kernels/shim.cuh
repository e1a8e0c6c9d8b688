// shim.cuh: the few CUDA builtins the kernels use, without the CUDA SDK.
//
// The kernels are compiled by Debian's clang-14 with -nocudainc -nocudalib
// (no cuda_runtime.h, no libdevice), so nothing CUDA's headers normally
// declare exists: this header declares what the kernels need, each as the
// clang builtin or the one PTX instruction it stands for. The same sources
// also compile as host C++ with MESH_EMU defined, against the CPU emulator
// in cuda/cudaemu, which runs every thread of a block as a fiber; the
// MESH_EMU half of each definition is its software twin.
//
// Floating point: the kernels are built with -ffp-contract=off, so clang
// emits add.rn/mul.rn (which ptxas may not fuse) and the host build rounds
// every operation the same way. Where a kernel wants a fused multiply-add it
// says so with __builtin_fma. No fast-math anywhere: the kernels reproduce
// the CPU backend's float32 arithmetic operation for operation.
#pragma once

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

struct dim3s {
	u32 x, y, z;
};

#define WARP 32
#define FULL_MASK 0xffffffffu

template <class To, class From>
static inline __attribute__((always_inline))
#if defined(__CUDA_ARCH__)
__attribute__((device))
#endif
To bitcast(From v) {
	return __builtin_bit_cast(To, v);
}

#if defined(__CUDA_ARCH__)

// Device compilation (clang -x cuda --cuda-device-only).
#define KERNEL extern "C" __attribute__((global))
#define DEV static __attribute__((device)) __attribute__((always_inline)) inline
#define SHARED __attribute__((shared))
#define BOUNDS(n) __attribute__((launch_bounds(n)))
#define UNROLL _Pragma("unroll")
#define CONSTANT static __attribute__((constant))

#define threadIdx (dim3s{(u32)__nvvm_read_ptx_sreg_tid_x(), (u32)__nvvm_read_ptx_sreg_tid_y(), (u32)__nvvm_read_ptx_sreg_tid_z()})
#define blockIdx (dim3s{(u32)__nvvm_read_ptx_sreg_ctaid_x(), (u32)__nvvm_read_ptx_sreg_ctaid_y(), (u32)__nvvm_read_ptx_sreg_ctaid_z()})
#define blockDim (dim3s{(u32)__nvvm_read_ptx_sreg_ntid_x(), (u32)__nvvm_read_ptx_sreg_ntid_y(), (u32)__nvvm_read_ptx_sreg_ntid_z()})
#define gridDim (dim3s{(u32)__nvvm_read_ptx_sreg_nctaid_x(), (u32)__nvvm_read_ptx_sreg_nctaid_y(), (u32)__nvvm_read_ptx_sreg_nctaid_z()})

// bar.sync 0: every thread of the block.
DEV void sync_threads() { __syncthreads(); }

// ld128x2 loads 32 bytes at p, 16-byte aligned (a quantised activation
// block), as two 128-bit loads.
typedef u32 u32x4 __attribute__((ext_vector_type(4)));
DEV void ld128x2(const void *p, u32 *w) {
	u32x4 a = ((const u32x4 *)p)[0], b = ((const u32x4 *)p)[1];
	w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
	w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

// Warp shuffles over the full warp (every kernel keeps whole warps
// converged where it shuffles).
DEV u32 shfl_xor(u32 v, int m) { return (u32)__nvvm_shfl_sync_bfly_i32(FULL_MASK, (int)v, m, 31); }
DEV u32 shfl_down(u32 v, int d) { return (u32)__nvvm_shfl_sync_down_i32(FULL_MASK, (int)v, d, 31); }
DEV u32 shfl_idx(u32 v, int src) { return (u32)__nvvm_shfl_sync_idx_i32(FULL_MASK, (int)v, src, 31); }

// dp4a: c + the dot product of a's and b's four signed bytes (sm_61+).
DEV i32 dp4a(i32 a, i32 b, i32 c) {
	i32 r;
	asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
	return r;
}

// IEEE half <-> float: cvt.f32.f16 is exact, cvt.rn.f16.f32 rounds to
// nearest even (ggml's GGML_FP32_TO_FP16 does the same).
DEV float half_to_float(u16 h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}
DEV u16 float_to_half(float f) {
	u16 h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// Round to the nearest integer, ties to even (ggml's nearest_int).
DEV i32 round_even(float f) {
	i32 r;
	asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r) : "f"(f));
	return r;
}

#elif defined(MESH_EMU)

// Host compilation for the CPU emulator (cuda/cudaemu).
#define KERNEL extern "C"
#define DEV static inline
#define SHARED static
#define BOUNDS(n)
#define UNROLL
#define CONSTANT static

extern "C" {
extern dim3s emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
void emu_syncthreads(void);
u32 emu_shfl(u32 v, int mode, int arg);
}
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim

DEV void sync_threads() { emu_syncthreads(); }
DEV void ld128x2(const void *p, u32 *w) {
	for (int t = 0; t < 8; t++) {
		w[t] = ((const u32 *)p)[t];
	}
}
DEV u32 shfl_xor(u32 v, int m) { return emu_shfl(v, 0, m); }
DEV u32 shfl_down(u32 v, int d) { return emu_shfl(v, 1, d); }
DEV u32 shfl_idx(u32 v, int src) { return emu_shfl(v, 2, src); }

DEV i32 dp4a(i32 a, i32 b, i32 c) {
	for (int i = 0; i < 4; i++) {
		c += (i32)(i8)(a >> (8 * i)) * (i32)(i8)(b >> (8 * i));
	}
	return c;
}

DEV float half_to_float(u16 h) {
	u32 sign = (u32)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	if (exp == 0x1f) {
		return bitcast<float>(sign | 0x7f800000u | (mant ? (mant | 0x200) << 13 : 0));
	}
	if (exp == 0) {
		return bitcast<float>(sign | bitcast<u32>((float)mant * (1.0f / (1 << 24))));
	}
	return bitcast<float>(sign | (exp + 112) << 23 | mant << 13);
}

// ggml's GGML_FP32_TO_FP16: round to nearest even through the float adder.
DEV u16 float_to_half(float f) {
	const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
	float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
	u32 w = bitcast<u32>(f), shl1 = w + w, sign = w & 0x80000000u, bias = shl1 & 0xff000000u;
	if (bias < 0x71000000u) {
		bias = 0x71000000u;
	}
	base = bitcast<float>((bias >> 1) + 0x07800000u) + base;
	u32 bits = bitcast<u32>(base);
	u32 nonsign = ((bits >> 13) & 0x00007c00u) + (bits & 0x00000fffu);
	if (shl1 > 0xff000000u) {
		nonsign = 0x7e00;
	}
	return (u16)((sign >> 16) | nonsign);
}

DEV i32 round_even(float f) { return (i32)__builtin_nearbyintf(f); }

#else
#error "shim.cuh: compile with clang -x cuda --cuda-device-only, or as host C++ with MESH_EMU"
#endif

// ---- Helpers both builds share ----

DEV float shfl_xor_f(float v, int m) { return bitcast<float>(shfl_xor(bitcast<u32>(v), m)); }
DEV float shfl_down_f(float v, int d) { return bitcast<float>(shfl_down(bitcast<u32>(v), d)); }
DEV float shfl_idx_f(float v, int s) { return bitcast<float>(shfl_idx(bitcast<u32>(v), s)); }
DEV i32 shfl_xor_i(i32 v, int m) { return (i32)shfl_xor((u32)v, m); }
DEV double shfl_xor_d(double v, int m) {
	u64 b = bitcast<u64>(v);
	u32 lo = shfl_xor((u32)b, m), hi = shfl_xor((u32)(b >> 32), m);
	return bitcast<double>((u64)hi << 32 | lo);
}

DEV u32 lane_id() { return threadIdx.x & (WARP - 1); }
DEV u32 warp_id() { return threadIdx.x / WARP; }

// Loads of the little-endian fields of ggml's blocks, which are only 2-byte
// aligned in some types (Q4_0, Q8_0, Q6_K rows of 18, 34 and 210 bytes).
DEV u16 ld16(const u8 *p) { return *(const u16 *)p; }
DEV u32 ld32_a2(const u8 *p) { return (u32)ld16(p) | (u32)ld16(p + 2) << 16; }
DEV u32 ld32(const u8 *p) { return *(const u32 *)p; }

// ldw_a2 loads N little-endian words from p, 2-byte aligned, by aligned
// 32-bit loads: N of them, and one more where p is not 4-byte aligned,
// whose words are shifted into place. A lane's block of 34 or 18 bytes
// took 2N 16-bit loads, and a matrix kernel is bound by its load
// instructions, not by bytes. The extra word ends within 2 bytes of the
// last one wanted, so it never touches another page.
template <int N>
DEV void ldw_a2(const u8 *p, u32 *w) {
	int off = (int)((u64)p & 2);
	const u32 *q = (const u32 *)(p - off); // from p, so that it stays a global load
	int sh = off * 8;
	u32 lo = q[0];
	UNROLL for (int t = 0; t < N; t++) {
		u32 hi = t + 1 < N || sh ? q[t + 1] : 0;
		w[t] = (u32)(((u64)hi << 32 | lo) >> sh);
		lo = hi;
	}
}
DEV float ld_half(const u8 *p) { return half_to_float(ld16(p)); }
DEV float round_half(float f) { return half_to_float(float_to_half(f)); }

// Go's max on float32: NaN if either is NaN, +0 over -0.
DEV float go_max(float a, float b) {
	if (a != a || b != b) {
		return a != a ? a : b;
	}
	if (a == b) {
		return bitcast<float>(bitcast<u32>(a) & bitcast<u32>(b));
	}
	return a > b ? a : b;
}
