// common.metal: the helpers every kernel shares — loads of ggml's
// unaligned block fields, half conversions, the CPU's expf and tanhf, and
// sums that stand in for the CPU's float64 ones.
//
// These sources are MSL, compiled at start by Metal (the files are
// concatenated in the order kernels.go lists them) and, for the tests, as
// host C++17 through metal/metalemu's shim. They reproduce the CPU
// backend's float32 arithmetic (gguf/cpu, gguf/quant) operation for
// operation, as the CUDA kernels do, with two differences Metal forces:
//
//   - MSL has no double. The CPU's float64 sums (RMSNorm's Σx², the
//     softmax's Σe) are float-float sums here (a float and its error, about
//     48 bits), which round to the CPU's float32 result except when the
//     exact value lies within about 2^-47 of a rounding boundary.
//   - fma is a float fma, rounded once; the CPU rounds a·b+c to float64 and
//     then to float32. They differ only where that double rounding lands
//     on a tie, which expf's arguments make rare.
//
// Kernels are compiled in safe math mode (no fast math), and with MSL 3.2
// the pragmas below also forbid contracting a·b+c into an fma.
#include <metal_stdlib>
using namespace metal;

#if __METAL_VERSION__ >= 320
#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)
#endif

#define SIMD_WIDTH 32

// ---- Loads of ggml's little-endian block fields, some only 2-byte aligned ----

static inline ushort ld16(device const uchar *p) { return *(device const ushort *)p; }
static inline uint ld32_a2(device const uchar *p) { return uint(ld16(p)) | (uint(ld16(p + 2)) << 16); }
static inline uint ld32(device const uchar *p) { return *(device const uint *)p; }

// IEEE half <-> float: the widening is exact; the narrowing rounds to
// nearest even, as ggml's GGML_FP32_TO_FP16.
static inline float half_to_float(ushort h) { return float(as_type<half>(h)); }
static inline ushort float_to_half(float f) { return as_type<ushort>(half(f)); }
static inline float round_half(float f) { return float(half(f)); }
static inline float ld_half(device const uchar *p) { return half_to_float(ld16(p)); }

static inline float f32_bits(uint u) { return as_type<float>(u); }

#define NEG_INF f32_bits(0xff800000u)
#define POS_INF f32_bits(0x7f800000u)

// go_max is Go's max on float32: NaN if either is NaN, +0 over -0.
static inline float go_max(float a, float b) {
	if (isnan(a) || isnan(b)) {
		return isnan(a) ? a : b;
	}
	if (a == b) {
		return as_type<float>(as_type<uint>(a) & as_type<uint>(b));
	}
	return a > b ? a : b;
}

// dp4a: c + the dot product of a's and b's four signed bytes.
static inline int dp4a(int a, int b, int c) {
	char4 x = as_type<char4>(a), y = as_type<char4>(b);
	return c + int(x.x) * int(y.x) + int(x.y) * int(y.y) + int(x.z) * int(y.z) + int(x.w) * int(y.w);
}

// round_away is C's roundf for |f| < 128.5, wrapped to a signed byte (the
// CPU's roundAwayInt8): f − trunc(f) is exact, so the tie test is too.
static inline int round_away(float f) {
	float t = trunc(f);
	if (fabs(f - t) >= 0.5f) {
		t += f < 0 ? -1.0f : 1.0f;
	}
	return int(char(int(t)));
}

// round_even rounds to the nearest integer, ties to even (ggml's
// nearest_int).
static inline int round_even(float f) { return int(rint(f)); }

// ---- expf, tanhf and the activations (gguf/cpu exp.go, elementwise.go) ----

// mesh_expf is ggml's vectorised expf: range reduction x = n·ln2 + b, a
// degree-5 polynomial in b, a scale by 2^n. The constants are the CPU's,
// given by their bits.
static inline float mesh_expf(float x) {
	const float shift = 12582912.0f; // 0x1.8p23
	float z = fma(x, f32_bits(0x3fb8aa3bu), shift);
	float n = z - shift;
	float b = fma(-n, f32_bits(0x35bfbe8eu), fma(-n, f32_bits(0x3f317200u), x));
	float u = b * b;
	float j = fma(fma(fma(f32_bits(0x3c072010u), b, f32_bits(0x3d2b9f17u)), u, fma(f32_bits(0x3e2aaf33u), b, f32_bits(0x3efffedbu))), u,
		      fma(f32_bits(0x3f7ffff6u), b, 1.0f));
	if (isnan(x)) {
		return x;
	}
	if (n > 130) {
		return POS_INF;
	}
	if (n < -152) {
		return 0;
	}
	if (n >= -126 && n <= 127) {
		return j * as_type<float>(uint(int(n) + 127) << 23);
	}
	// Near overflow or in the subnormals: the CPU scales in float64 and
	// rounds once; two float steps, the first exact, do the same.
	if (n < 0) {
		return (j * as_type<float>(uint(int(n) + 64 + 127) << 23)) * f32_bits(0x1f800000u); // 2^-64
	}
	return (j * f32_bits(0x7f000000u)) * as_type<float>(uint(int(n) - 127 + 127) << 23); // 2^127 · 2^(n-127)
}

static inline float copysign32(float mag, float sgn) {
	return as_type<float>((as_type<uint>(mag) & 0x7fffffffu) | (as_type<uint>(sgn) & 0x80000000u));
}

// mesh_tanhf is Cephes' tanhf, as gguf/cpu tanhf.
static inline float mesh_tanhf(float x) {
	float a = fabs(x);
	if (a > 10) {
		return copysign32(1.0f, x);
	}
	if (a >= 0.625f) {
		float t = 1.0f - 2.0f / (mesh_expf(2.0f * a) + 1.0f);
		return copysign32(t, x);
	}
	float z = x * x;
	float p = ((((-5.70498872745e-3f * z) + 2.06390887954e-2f) * z) - 5.37397155531e-2f) * z + 1.33314422036e-1f;
	p = ((p * z) - 3.33332819422e-1f) * z;
	return (p * x) + x;
}

// silu is x·σ(x), as ggml_v_silu.
static inline float silu(float x) { return x / (1.0f + mesh_expf(-x)); }

// gelu_tanh is GELU's tanh approximation, as ggml_gelu_f32.
static inline float gelu_tanh(float x) {
	const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
	float inner = (sqrt_2_over_pi * x) * (1.0f + ((coef_a * x) * x));
	return (0.5f * x) * (1.0f + mesh_tanhf(inner));
}

// gelu_table is ggml_table_gelu_f16's entry for x: GELU of x rounded to a
// half, rounded to a half.
static inline float gelu_table(float x) { return round_half(gelu_tanh(round_half(x))); }

// ---- Float-float sums, for the CPU's float64 ones ----

// ff is hi + lo, |lo| ≤ ulp(hi)/2 after ff_norm.
struct ff {
	float hi, lo;
};

// two_sum: s + e = a + b exactly (Knuth).
static inline ff two_sum(float a, float b) {
	float s = a + b;
	float bb = s - a;
	float e = (a - (s - bb)) + (b - bb);
	return ff{s, e};
}

static inline ff ff_add(ff a, ff b) {
	ff s = two_sum(a.hi, b.hi);
	return two_sum(s.hi, s.lo + (a.lo + b.lo));
}

static inline ff ff_add1(ff a, float b) {
	ff s = two_sum(a.hi, b);
	return two_sum(s.hi, s.lo + a.lo);
}

// ff_div_int is float(a / n), rounded once from a nearly exact quotient.
static inline float ff_div_int(ff a, float n) {
	float q = a.hi / n;
	float r = fma(-q, n, a.hi) + a.lo;
	return q + r / n;
}

// ff_recip is float(1 / a).
static inline float ff_recip(ff a) {
	float q = 1.0f / a.hi;
	float r = fma(-q, a.hi, 1.0f) - q * a.lo;
	return q + q * r;
}

// ff_simd_sum adds a across the SIMD group: every lane gets the sum.
static inline ff ff_simd_sum(ff a) {
	for (ushort m = 16; m > 0; m >>= 1) {
		ff o = ff{simd_shuffle_xor(a.hi, m), simd_shuffle_xor(a.lo, m)};
		a = ff_add(a, o);
	}
	return a;
}

// ff_group_sum adds a across the threadgroup (up to 32 SIMD groups), with
// 64 floats of threadgroup memory; every thread gets the sum.
static inline ff ff_group_sum(ff a, threadgroup float *part, ushort sg, ushort lane, ushort nsg) {
	a = ff_simd_sum(a);
	if (lane == 0) {
		part[2 * sg] = a.hi;
		part[2 * sg + 1] = a.lo;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	ff v = lane < nsg ? ff{part[2 * lane], part[2 * lane + 1]} : ff{0.0f, 0.0f};
	v = ff_simd_sum(v);
	threadgroup_barrier(mem_flags::mem_threadgroup);
	return v;
}

// group_max is go_max across the threadgroup, with 32 floats of
// threadgroup memory; every thread gets it.
static inline float group_max(float v, threadgroup float *part, ushort sg, ushort lane, ushort nsg) {
	for (ushort m = 16; m > 0; m >>= 1) {
		v = go_max(v, simd_shuffle_xor(v, m));
	}
	if (lane == 0) {
		part[sg] = v;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	v = lane < nsg ? part[lane] : NEG_INF;
	for (ushort m = 16; m > 0; m >>= 1) {
		v = go_max(v, simd_shuffle_xor(v, m));
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	return v;
}
