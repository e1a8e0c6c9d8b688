// refusals.metal: kernels for the stand-in's own tests — one that is
// right, and one for each mistake the stand-in must refuse as a GPU would
// fault on it or leave it undefined. Not part of the backend.
#include <metal_stdlib>
using namespace metal;

struct Args {
	int n;
	float s;
};

#define IDS                                                                                                           \
	uint3 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]], ushort sg [[simdgroup_index_in_threadgroup]], \
		ushort lane [[thread_index_in_simdgroup]]

// good: out[i] = (i's lane sum over the SIMD group via simd_sum) · s + a
// threadgroup-shared value, and a simdgroup matrix product of iota tiles.
kernel void good(device float *out [[buffer(0)]], constant Args &a [[buffer(1)]], threadgroup float *shm [[threadgroup(0)]], IDS) {
	uint i = tg.x * 64 + tid;
	if (tid == 0) {
		shm[0] = float(tg.x);
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	int s = simd_sum(int(lane));
	float v = float(s) * a.s + shm[0] + float(simd_shuffle_xor(lane, 1));
	if (int(i) < a.n) {
		out[i] = v;
	}
	// An 8×8 product of A[i][j] = i + 2j (row-major) with itself, written
	// by group 0.
	threadgroup float *m = shm + 16 + 64 * sg;
	m[lane] = float(lane / 8 + 2 * (lane % 8));
	m[32 + lane] = float((lane + 32) / 8 + 2 * (lane % 8));
	simdgroup_barrier(mem_flags::mem_threadgroup);
	simdgroup_float8x8 x, c = make_filled_simdgroup_matrix<float, 8>(0.0f);
	simdgroup_load(x, m, 8);
	simdgroup_multiply_accumulate(c, x, x, c);
	simdgroup_store(c, m, 8);
	simdgroup_barrier(mem_flags::mem_threadgroup);
	if (tg.x == 0 && sg == 0) {
		out[a.n + lane] = m[lane];
		out[a.n + 32 + lane] = m[32 + lane];
	}
}

// barrier_after_return: the second SIMD group returns, the first waits at
// a barrier.
kernel void barrier_after_return(device float *out [[buffer(0)]], IDS) {
	if (sg == 1) {
		return;
	}
	threadgroup_barrier(mem_flags::mem_threadgroup);
	out[tid] = 1;
}

// unreachable_barrier: only thread 0 reaches the barrier.
kernel void unreachable_barrier(device float *out [[buffer(0)]], IDS) {
	if (tid == 0) {
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
	out[tid] = 1;
}

// divergent_collective: half the lanes sum, the other half take a max.
kernel void divergent_collective(device float *out [[buffer(0)]], IDS) {
	float v = lane < 16 ? simd_sum(float(lane)) : simd_max(float(lane));
	out[tid] = v;
}

// collective_after_return: lane 3 returns before its group's shuffle.
kernel void collective_after_return(device float *out [[buffer(0)]], IDS) {
	if (lane == 3) {
		return;
	}
	out[tid] = simd_shuffle_down(float(lane), 1);
}

// divergent_matrix_load: each lane loads from its own address.
kernel void divergent_matrix_load(device float *out [[buffer(0)]], threadgroup float *shm [[threadgroup(0)]], IDS) {
	simdgroup_float8x8 x;
	simdgroup_load(x, shm + lane, 8);
	simdgroup_store(x, shm, 8);
	out[tid] = shm[0];
}

// read_past: reads one float past the end of its buffer (of n floats).
kernel void read_past(device const float *in [[buffer(0)]], device float *out [[buffer(1)]], constant Args &a [[buffer(2)]], IDS) {
	if (tid == 0) {
		out[0] = in[a.n];
	}
}
