// ops.cuh: RMSNorm, the elementwise kernels, RoPE, the KV cache, attention
// and argmax, each the CPU backend's arithmetic (gguf/cpu).
//
// Positions are read from device memory (an argument slot the backend
// uploads before each step) rather than passed by value, so that a decode
// step's launches have the same parameters every token and replay as one
// CUDA graph.
#pragma once
#include "math.cuh"
#include "matvec.cuh"
#include "quantize.cuh"

// ---- Block reductions (blocks of up to 32 warps) ----

DEV double block_sum_d(double v) {
	SHARED double part[WARP];
	for (int m = 16; m > 0; m >>= 1) {
		v += shfl_xor_d(v, m);
	}
	int w = warp_id(), nw = (blockDim.x + WARP - 1) / WARP;
	if (lane_id() == 0) {
		part[w] = v;
	}
	sync_threads();
	if (w == 0) {
		v = lane_id() < (u32)nw ? part[lane_id()] : 0.0;
		for (int m = 16; m > 0; m >>= 1) {
			v += shfl_xor_d(v, m);
		}
		if (lane_id() == 0) {
			part[0] = v;
		}
	}
	sync_threads();
	v = part[0];
	sync_threads();
	return v;
}

DEV float block_max(float v) {
	SHARED float part[WARP];
	for (int m = 16; m > 0; m >>= 1) {
		v = go_max(v, shfl_xor_f(v, m));
	}
	int w = warp_id(), nw = (blockDim.x + WARP - 1) / WARP;
	if (lane_id() == 0) {
		part[w] = v;
	}
	sync_threads();
	if (w == 0) {
		v = lane_id() < (u32)nw ? part[lane_id()] : bitcast<float>(0xff800000u);
		for (int m = 16; m > 0; m >>= 1) {
			v = go_max(v, shfl_xor_f(v, m));
		}
		if (lane_id() == 0) {
			part[0] = v;
		}
	}
	sync_threads();
	v = part[0];
	sync_threads();
	return v;
}

// ---- RMSNorm ----

// A norm's thread takes elements e, e+256, …: NORM_CHUNK of them at a
// time, every load of a chunk issued before its first store (the stores
// may alias the inputs, so the compiler would not hoist the loads itself:
// an H200 spent 8.8 µs on a 2048-wide add_rms_norm waiting on one load
// after another). Each thread still sums its squares in element order, so
// the result is the loop's bit for bit.
#define NORM_CHUNK 8

// norm_row normalises the n elements at xs into ys as ggml's rms_norm
// then mul: Σx² in float64 (here summed as a tree; the CPU sums in order,
// which can differ in the last bit of a float64 and so, rarely, in the
// float32 mean), scale 1/√(mean+eps) in float32, x·scale·w. ys may be xs.
DEV void norm_row(const float *xs, float *ys, const float *w, int group, float eps) {
	int n = blockDim.x;
	double sum = 0;
	for (int e0 = threadIdx.x; e0 < group; e0 += n * NORM_CHUNK) {
		float v[NORM_CHUNK];
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			v[u] = e0 + u * n < group ? xs[e0 + u * n] : 0.0f;
		}
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			if (e0 + u * n < group) {
				sum += (double)(v[u] * v[u]);
			}
		}
	}
	sum = block_sum_d(sum);
	float mean = (float)(sum / (double)group);
	float scale = 1.0f / __builtin_sqrtf(mean + eps);
	for (int e0 = threadIdx.x; e0 < group; e0 += n * NORM_CHUNK) {
		float v[NORM_CHUNK], wv[NORM_CHUNK];
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			int e = e0 + u * n;
			v[u] = e < group ? xs[e] : 0.0f;
			wv[u] = e < group ? w[e] : 0.0f;
		}
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			if (e0 + u * n < group) {
				ys[e0 + u * n] = (v[u] * scale) * wv[u];
			}
		}
	}
}

// add_norm_row is xs += as, then norm_row of xs into ys. A row of up to
// 256·NORM_CHUNK elements stays in registers between the sum and the
// scaling. ys may be xs, or as.
DEV void add_norm_row(float *xs, const float *as, float *ys, const float *w, int cols, float eps) {
	int n = blockDim.x;
	double sum = 0;
	float v[NORM_CHUNK];
	for (int e0 = threadIdx.x; e0 < cols; e0 += n * NORM_CHUNK) {
		float av[NORM_CHUNK];
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			int e = e0 + u * n;
			v[u] = e < cols ? xs[e] : 0.0f;
			av[u] = e < cols ? as[e] : 0.0f;
		}
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			int e = e0 + u * n;
			if (e < cols) {
				v[u] = v[u] + av[u];
				xs[e] = v[u];
				sum += (double)(v[u] * v[u]);
			}
		}
	}
	sum = block_sum_d(sum);
	float mean = (float)(sum / (double)cols);
	float scale = 1.0f / __builtin_sqrtf(mean + eps);
	bool held = cols <= n * NORM_CHUNK;
	for (int e0 = threadIdx.x; e0 < cols; e0 += n * NORM_CHUNK) {
		float wv[NORM_CHUNK];
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			int e = e0 + u * n;
			if (!held) {
				v[u] = e < cols ? xs[e] : 0.0f;
			}
			wv[u] = e < cols ? w[e] : 0.0f;
		}
		UNROLL for (int u = 0; u < NORM_CHUNK; u++) {
			if (e0 + u * n < cols) {
				ys[e0 + u * n] = (v[u] * scale) * wv[u];
			}
		}
	}
}

// rms_norm normalises each group-element group of each row (norm_row).
// grid = (cols / group, rows), block 256. y may be x.
KERNEL BOUNDS(256) void rms_norm(const float *x, float *y, const float *w, int cols, int group, float eps) {
	i64 off = (i64)blockIdx.y * cols + (i64)blockIdx.x * group;
	norm_row(x + off, y + off, w, group, eps);
}

// add_rms_norm is add then rms_norm over whole rows: x += a, y =
// norm(x)·w, one launch for the residual add and the next norm. grid = (1,
// rows), block 256. y may be x, or a.
KERNEL BOUNDS(256) void add_rms_norm(float *x, const float *a, float *y, const float *w, int cols, float eps) {
	i64 off = (i64)blockIdx.y * cols;
	add_norm_row(x + off, a + off, y + off, w, cols, eps);
}

// The norms with the quantisation of their output for the next product
// (quantize.cuh's blocks of the row, after a barrier that makes the row's
// stores visible): a 1B model's step launched 33 of these pairs, and a
// launch in a graph costs about as much as either kernel. grid = (1,
// rows), block 256; qs, d and ext as the quantize kernel's of the type.
#define NORM_Q(name, ACT)                                                                                          \
	KERNEL BOUNDS(256) void rms_norm_##name(const float *x, float *y, const float *w, int cols, float eps, i8 *qs, \
						float *d, void *ext) {                                             \
		i64 off = (i64)blockIdx.y * cols;                                                                  \
		norm_row(x + off, y + off, w, cols, eps);                                                          \
		quantize_row<ACT>(y, off, qs, d, ext, cols);                                                       \
	}                                                                                                          \
	KERNEL BOUNDS(256) void add_rms_norm_##name(float *x, const float *a, float *y, const float *w, int cols,     \
						    float eps, i8 *qs, float *d, void *ext) {                      \
		i64 off = (i64)blockIdx.y * cols;                                                                  \
		add_norm_row(x + off, a + off, y + off, w, cols, eps);                                             \
		quantize_row<ACT>(y, off, qs, d, ext, cols);                                                       \
	}
NORM_Q(q8_0, 0)
NORM_Q(q8_1, 1)
NORM_Q(q8_k, 2)

// ---- Elementwise: grid = ceil(n / 256), block 256 ----

DEV i64 elem_index() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }

KERNEL BOUNDS(256) void add(float *dst, const float *a, int n) {
	i64 i = elem_index();
	if (i < n) {
		dst[i] += a[i];
	}
}

KERNEL BOUNDS(256) void scale(float *x, float s, int n) {
	i64 i = elem_index();
	if (i < n) {
		x[i] *= s;
	}
}

KERNEL BOUNDS(256) void softcap(float *x, float c, int n) {
	i64 i = elem_index();
	if (i < n) {
		x[i] = c * mesh_tanhf(x[i] / c);
	}
}

KERNEL BOUNDS(256) void add_bias(float *x, const float *b, int cols, int n) {
	i64 i = elem_index();
	if (i < n) {
		x[i] += b[i % cols];
	}
}

// glu: dst = f(gate)·up; kind 0 SiLU, 1 GELU (tanh) through ggml's fp16
// table. dst may be gate or up.
DEV float glu_value(float x, float u, int kind) {
	if (kind == 0) {
		return silu(x) * u;
	}
	if (x <= -10.0f) {
		return 0;
	}
	if (x >= 10.0f) {
		return x * u;
	}
	return gelu_table(x) * u;
}

KERNEL BOUNDS(256) void glu(float *dst, const float *gate, const float *up, int n, int kind) {
	i64 i = elem_index();
	if (i < n) {
		dst[i] = glu_value(gate[i], up[i], kind);
	}
}

// glu with the quantisation of its output for the down product (as the
// norms have theirs): after a barrier, a block's 256 elements are eight
// Q8_0 or Q8_1 blocks, a warp each, or one Q8_K block, its first warp's.
// n is a whole number of quantisation blocks.
template <int ACT>
DEV void glu_q(float *dst, const float *gate, const float *up, int n, int kind, i8 *qs, float *d, void *ext) {
	i64 i = elem_index();
	if (i < n) {
		dst[i] = glu_value(gate[i], up[i], kind);
	}
	sync_threads();
	if (ACT == 2) {
		if (warp_id() == 0) {
			quantize_block_q8_k(dst, qs, d, (i32 *)ext, blockIdx.x);
		}
	} else {
		int blk = blockIdx.x * 8 + warp_id();
		if (blk < n / 32) {
			quantize_block_q8<ACT == 1>(dst, qs, d, ACT == 1 ? (float *)ext : nullptr, blk);
		}
	}
}
#define GLU_Q(name, ACT)                                                                                                   \
	KERNEL BOUNDS(256) void glu_##name(float *dst, const float *gate, const float *up, int n, int kind, i8 *qs, float *d, \
					   void *ext) {                                                                        \
		glu_q<ACT>(dst, gate, up, n, kind, qs, d, ext);                                                            \
	}
GLU_Q(q8_0, 0)
GLU_Q(q8_1, 1)
GLU_Q(q8_k, 2)

// ---- RoPE ----

// rope rotates every head of row t (position *pos + t) of x (blockIdx.z 0)
// or x2 (1: one launch does Q and K) by the backend's table of (cos, sin)
// per position and pair, which the host fills with the CPU's arithmetic.
// neox selects the (i, i + dims/2) pairing over adjacent pairs. grid =
// (rows, ceil(pairs / 128), 1 or 2), block 128: a thread a pair (of the
// larger tensor), since a 2-block launch that looped over Q's 1024 pairs
// took 5.8 µs of a 1B model's step on an H200.
KERNEL BOUNDS(128) void rope(float *x, float *x2, const float *table, const i32 *pos, int cols, int cols2, int head_dim, int dims,
			     int neox) {
	if (blockIdx.z == 1) {
		x = x2;
		cols = cols2;
	}
	int t = blockIdx.x, half = dims / 2, heads = cols / head_dim;
	const float *cs = table + (i64)(*pos + t) * dims;
	float *row = x + (i64)t * cols;
	for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < heads * half; idx += blockDim.x * gridDim.y) {
		int h = idx / half, k = idx % half;
		float c = cs[2 * k], s = cs[2 * k + 1];
		int a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
		float *xh = row + h * head_dim;
		float x0 = xh[a], x1 = xh[b];
		xh[a] = x0 * c - x1 * s;
		xh[b] = x0 * s + x1 * c;
	}
}

// ---- KV cache ----
//
// Per layer, keys by head then position (head h's key at position p is
// the dk elements at (h·cap + p)·dk) and values transposed (element d of
// head h at position p is at (h·dv + d)·cap + p), as the CPU keeps them, so
// each score and each output element is one contiguous dot product.

template <bool F16>
DEV void kv_put(u8 *c, i64 idx, float v) {
	if (F16) {
		((u16 *)c)[idx] = float_to_half(v);
	} else {
		((float *)c)[idx] = v;
	}
}

template <bool F16>
DEV float kv_get(const u8 *c, i64 idx) {
	return F16 ? half_to_float(((const u16 *)c)[idx]) : ((const float *)c)[idx];
}

// store_kv writes row t of k and v as position *pos + t. grid =
// (ceil(max(kd, vd) / 256), rows, 2: keys, values), block 256.
template <bool F16>
DEV void store_kv(const float *k, const float *v, u8 *kc, u8 *vc, const i32 *pos, int kvheads, int dk, int dv, int cap) {
	int e = blockIdx.x * 256 + threadIdx.x, t = blockIdx.y;
	i64 p = *pos + t;
	if (blockIdx.z == 0) {
		int kd = kvheads * dk;
		if (e < kd) {
			kv_put<F16>(kc, ((i64)(e / dk) * cap + p) * dk + e % dk, k[(i64)t * kd + e]);
		}
	} else {
		int vd = kvheads * dv;
		if (e < vd) {
			kv_put<F16>(vc, (i64)e * cap + p, v[(i64)t * vd + e]);
		}
	}
}

#define KV_PARAMS const float *k, const float *v, u8 *kc, u8 *vc, const i32 *pos, int kvheads, int dk, int dv, int cap
KERNEL BOUNDS(256) void store_kv_f16(KV_PARAMS) { store_kv<true>(k, v, kc, vc, pos, kvheads, dk, dv, cap); }
KERNEL BOUNDS(256) void store_kv_f32(KV_PARAMS) { store_kv<false>(k, v, kc, vc, pos, kvheads, dk, dv, cap); }

// ---- Attention ----

#define ATT_THREADS 256
#define ATT_WARPS (ATT_THREADS / WARP)
#define ATT_MAX_HEAD 256

// attend computes head blockIdx.x of query row row0 + blockIdx.y as the CPU
// does (llama.cpp without flash attention): the query rounded to the
// cache's type; each score a dot product with a key (warp w takes keys w,
// w+8, …; lane l its elements l, l+32, …); softcap, scale, max; e^(s−max)
// with the sum in float64 (a tree here, sixteen running sums on the CPU); the weights
// scaled by 1/sum and rounded to the cache's type; each output element a
// dot product of the weights with a row of transposed values. The scores
// live in global scratch, cap floats per (row, head) of the launch.
// grid = (heads, rows of this launch), block 256.
//
// Over a long context one block per (row, head) leaves most of the device
// idle while it walks the keys twice, so there it runs as three launches
// (attend_scores, attend_softmax, attend_values: ATT_CHUNK keys, and one
// output element a warp, per block), each of them the same arithmetic on
// the same values in the same order: only which block does what moves,
// and the max, the one reduction that crosses blocks, is exact in any
// order.

// AttRow is the (row, head) a block attends: its query row i, the first
// key lo (a sliding window's start) and the keys n, and the KV head.
struct AttRow {
	int h, r, i, lo, n, kvh;
};

DEV AttRow att_row(const i32 *pos, int heads, int kvheads, int window, int row0) {
	AttRow a;
	a.h = blockIdx.x;
	a.r = blockIdx.y;
	a.i = row0 + a.r;
	int p = *pos + a.i;
	a.lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	a.n = p + 1 - a.lo;
	a.kvh = a.h / (heads / kvheads);
	return a;
}

// att_query loads the row's query, rounded to the cache's type, into qs.
template <bool F16>
DEV void att_query(float *qs, const float *q, AttRow a, int heads, int dk) {
	const float *qrow = q + ((i64)a.i * heads + a.h) * dk;
	for (int e = threadIdx.x; e < dk; e += blockDim.x) {
		qs[e] = F16 ? round_half(qrow[e]) : qrow[e];
	}
	sync_threads();
}

// att_scores writes the scores of keys [k0, k1) into sc and returns the
// largest this thread's warp saw (-Inf if none).
template <bool F16>
DEV float att_scores(const float *qs, const u8 *kc, float *sc, AttRow a, int dk, int cap, float scale, float cap_soft, int k0, int k1) {
	int w = warp_id(), lane = lane_id();
	float wmax = bitcast<float>(0xff800000u);
	i64 kbase = ((i64)a.kvh * cap + a.lo) * dk;
	// Two keys a warp at a time (k and k + ATT_WARPS), their folds
	// interleaved: one key's fold is five dependent shuffles.
	for (int k = k0 + w; k < k1; k += 2 * ATT_WARPS) {
		int k2 = k + ATT_WARPS;
		bool two = k2 < k1;
		float acc[2] = {0, 0};
		for (int e = lane; e < dk; e += WARP) {
			float q = qs[e];
			float x = kv_get<F16>(kc, kbase + (i64)k * dk + e), y = two ? kv_get<F16>(kc, kbase + (i64)k2 * dk + e) : 0.0f;
			acc[0] += x * q;
			acc[1] += y * q;
		}
		acc[0] = fold(acc[0], WARP);
		acc[1] = fold(acc[1], WARP);
		UNROLL for (int u = 0; u < 2; u++) {
			float s = shfl_idx_f(acc[u], 0);
			if (cap_soft > 0) {
				s = cap_soft * mesh_tanhf(s / cap_soft);
			}
			s = s * scale;
			if (u == 0 || two) {
				if (lane == 0) {
					sc[u == 0 ? k : k2] = s;
				}
				wmax = go_max(wmax, s); // in any order: go_max is commutative and associative
			}
		}
	}
	return wmax;
}

// att_softmax turns the n scores in sc into the weights, given their max
// m (a sink's included): e^(s−m), their float64 sum (and a sink's, last),
// each scaled by 1/sum and rounded to the cache's type.
template <bool F16>
DEV void att_softmax(float *sc, int n, float m, const float *sinks, int h) {
	double sum = 0;
	for (int k = threadIdx.x; k < n; k += blockDim.x) {
		float e = mesh_expf(sc[k] - m);
		sc[k] = e;
		sum += (double)e;
	}
	sum = block_sum_d(sum);
	if (sinks) {
		sum += (double)libm_expf(sinks[h] - m); // weighting no value
	}
	float inv = (float)(1.0 / sum);
	for (int k = threadIdx.x; k < n; k += blockDim.x) {
		float v = sc[k] * inv;
		sc[k] = F16 ? round_half(v) : v;
	}
	sync_threads();
}

// att_value is output element d: the weights' dot product with that row
// of transposed values, lane l taking keys l, l+32, …, as the CPU's
// lanes do. A warp's lanes all call it.
template <bool F16>
DEV void att_value(const u8 *vc, const float *sc, float *o, AttRow a, int dv, int cap, int d) {
	int lane = lane_id(), n = a.n;
	i64 vbase = ((i64)a.kvh * dv + d) * cap + a.lo;
	float acc = 0;
	// Four loads before their adds, which stay in order.
	for (int j0 = lane; j0 < n; j0 += 4 * WARP) {
		float v[4], s[4];
		UNROLL for (int u = 0; u < 4; u++) {
			int j = j0 + u * WARP;
			v[u] = j < n ? kv_get<F16>(vc, vbase + j) : 0.0f;
			s[u] = j < n ? sc[j] : 0.0f;
		}
		UNROLL for (int u = 0; u < 4; u++) {
			if (j0 + u * WARP < n) {
				acc += v[u] * s[u];
			}
		}
	}
	acc = fold(acc, WARP);
	if (lane == 0) {
		o[d] = acc;
	}
}

template <bool F16>
DEV void attend(const float *q, float *out, const u8 *kc, const u8 *vc, float *scores, const i32 *pos, int heads, int kvheads,
		int dk, int dv, int cap, int window, float scale, float cap_soft, int row0, const float *sinks = nullptr) {
	SHARED float qs[ATT_MAX_HEAD];
	AttRow a = att_row(pos, heads, kvheads, window, row0);
	att_query<F16>(qs, q, a, heads, dk);
	float *sc = scores + ((i64)a.r * heads + a.h) * cap;
	float m = block_max(att_scores<F16>(qs, kc, sc, a, dk, cap, scale, cap_soft, 0, a.n));
	if (sinks) {
		m = go_max(m, sinks[a.h]); // a sink joins the max (gptoss.cuh)
	}
	att_softmax<F16>(sc, a.n, m, sinks, a.h);
	float *o = out + ((i64)a.i * heads + a.h) * dv;
	for (int d = warp_id(); d < dv; d += ATT_WARPS) {
		att_value<F16>(vc, sc, o, a, dv, cap, d);
	}
}

// ---- Attention over a long context, in three launches ----

#define ATT_CHUNK 128

// attend_scores: keys [c·ATT_CHUNK, (c+1)·ATT_CHUNK) of the row's, c =
// blockIdx.z, scored into the scratch, and their max into cmax[(r·heads +
// h)·gridDim.z + c]. A chunk past the row's keys does nothing (the rows
// of a window attend to different counts).
// grid = (heads, rows of this launch, chunks), block 256.
template <bool F16>
DEV void attend_scores(const float *q, const u8 *kc, float *scores, const i32 *pos, int heads, int kvheads, int dk, int cap,
		       int window, float scale, float cap_soft, int row0, float *cmax) {
	SHARED float qs[ATT_MAX_HEAD];
	AttRow a = att_row(pos, heads, kvheads, window, row0);
	int k0 = blockIdx.z * ATT_CHUNK;
	if (k0 >= a.n) {
		return; // uniform across the block: before any barrier
	}
	att_query<F16>(qs, q, a, heads, dk);
	float *sc = scores + ((i64)a.r * heads + a.h) * cap;
	float m = block_max(att_scores<F16>(qs, kc, sc, a, dk, cap, scale, cap_soft, k0, k0 + ATT_CHUNK < a.n ? k0 + ATT_CHUNK : a.n));
	if (threadIdx.x == 0) {
		cmax[((i64)a.r * heads + a.h) * gridDim.z + blockIdx.z] = m;
	}
}

// attend_softmax: the max of the row's chunks (and a sink), then
// att_softmax. chunks is attend_scores' grid z.
// grid = (heads, rows of this launch), block 256.
template <bool F16>
DEV void attend_softmax(float *scores, const i32 *pos, int heads, int kvheads, int cap, int window, int row0, const float *cmax,
			int chunks, const float *sinks) {
	AttRow a = att_row(pos, heads, kvheads, window, row0);
	const float *cm = cmax + ((i64)a.r * heads + a.h) * chunks;
	float m = bitcast<float>(0xff800000u);
	for (int c = threadIdx.x; c * ATT_CHUNK < a.n; c += blockDim.x) {
		m = go_max(m, cm[c]);
	}
	m = block_max(m);
	if (sinks) {
		m = go_max(m, sinks[a.h]);
	}
	att_softmax<F16>(scores + ((i64)a.r * heads + a.h) * cap, a.n, m, sinks, a.h);
}

// attend_values: output elements blockIdx.z·8 + w of the row's, warp w
// each, from the weights attend_softmax left.
// grid = (heads, rows of this launch, ceil(dv / 8)), block 256.
template <bool F16>
DEV void attend_values(float *out, const u8 *vc, const float *scores, const i32 *pos, int heads, int kvheads, int dv, int cap,
		       int window, int row0) {
	AttRow a = att_row(pos, heads, kvheads, window, row0);
	int d = blockIdx.z * ATT_WARPS + warp_id();
	if (d < dv) {
		att_value<F16>(vc, scores + ((i64)a.r * heads + a.h) * cap, out + ((i64)a.i * heads + a.h) * dv, a, dv, cap, d);
	}
}

#define ATT_SCORES_PARAMS                                                                                              \
	const float *q, const u8 *kc, float *scores, const i32 *pos, int heads, int kvheads, int dk, int cap, int window, \
		float scale, float cap_soft, int row0, float *cmax
#define ATT_SCORES_ARGS q, kc, scores, pos, heads, kvheads, dk, cap, window, scale, cap_soft, row0, cmax
KERNEL BOUNDS(ATT_THREADS) void attend_scores_f16(ATT_SCORES_PARAMS) { attend_scores<true>(ATT_SCORES_ARGS); }
KERNEL BOUNDS(ATT_THREADS) void attend_scores_f32(ATT_SCORES_PARAMS) { attend_scores<false>(ATT_SCORES_ARGS); }

#define ATT_SOFTMAX_PARAMS                                                                                                \
	float *scores, const i32 *pos, int heads, int kvheads, int cap, int window, int row0, const float *cmax, int chunks, \
		const float *sinks
#define ATT_SOFTMAX_ARGS scores, pos, heads, kvheads, cap, window, row0, cmax, chunks, sinks
KERNEL BOUNDS(ATT_THREADS) void attend_softmax_f16(ATT_SOFTMAX_PARAMS) { attend_softmax<true>(ATT_SOFTMAX_ARGS); }
KERNEL BOUNDS(ATT_THREADS) void attend_softmax_f32(ATT_SOFTMAX_PARAMS) { attend_softmax<false>(ATT_SOFTMAX_ARGS); }

#define ATT_VALUES_PARAMS \
	float *out, const u8 *vc, const float *scores, const i32 *pos, int heads, int kvheads, int dv, int cap, int window, int row0
#define ATT_VALUES_ARGS out, vc, scores, pos, heads, kvheads, dv, cap, window, row0
KERNEL BOUNDS(ATT_THREADS) void attend_values_f16(ATT_VALUES_PARAMS) { attend_values<true>(ATT_VALUES_ARGS); }
KERNEL BOUNDS(ATT_THREADS) void attend_values_f32(ATT_VALUES_PARAMS) { attend_values<false>(ATT_VALUES_ARGS); }

#define ATT_PARAMS                                                                                                      \
	const float *q, float *out, const u8 *kc, const u8 *vc, float *scores, const i32 *pos, int heads, int kvheads, int dk, \
		int dv, int cap, int window, float scale, float cap_soft, int row0
#define ATT_ARGS q, out, kc, vc, scores, pos, heads, kvheads, dk, dv, cap, window, scale, cap_soft, row0
KERNEL BOUNDS(ATT_THREADS) void attend_f16(ATT_PARAMS) { attend<true>(ATT_ARGS); }
KERNEL BOUNDS(ATT_THREADS) void attend_f32(ATT_PARAMS) { attend<false>(ATT_ARGS); }

// ---- Argmax ----

// argmax_warp leaves every lane with the warp's best (value, index): the
// larger value, the lower index between equals (NaN never wins).
DEV void argmax_warp(float &best, i32 &at) {
	for (int m = 16; m > 0; m >>= 1) {
		float ov = shfl_xor_f(best, m);
		i32 oi = shfl_xor_i(at, m);
		if (ov > best || (ov == best && oi < at)) {
			best = ov;
			at = oi;
		}
	}
}

// argmax_row is row x's (n elements) largest element and its index, the
// lowest on a tie, -Inf and 0 when none is above -Inf (NaN never wins):
// the sampler's greedy choice, left with every thread of the block.
DEV void argmax_row(const float *x, int n, float &best_out, i32 &at_out) {
	SHARED float bv[WARP];
	SHARED i32 bi[WARP];
	float best = bitcast<float>(0xff800000u);
	i32 at = 0;
	// Four loads, then their comparisons in element order (the lowest
	// index wins a tie).
	for (int i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
		float v[4];
		UNROLL for (int u = 0; u < 4; u++) {
			int i = i0 + u * blockDim.x;
			v[u] = i < n ? x[i] : bitcast<float>(0xff800000u);
		}
		UNROLL for (int u = 0; u < 4; u++) {
			if (v[u] > best) {
				best = v[u];
				at = i0 + u * blockDim.x;
			}
		}
	}
	argmax_warp(best, at);
	if (lane_id() == 0) {
		bv[warp_id()] = best;
		bi[warp_id()] = at;
	}
	sync_threads();
	if (warp_id() == 0) {
		int nw = (blockDim.x + WARP - 1) / WARP;
		best = lane_id() < (u32)nw ? bv[lane_id()] : bitcast<float>(0xff800000u);
		at = lane_id() < (u32)nw ? bi[lane_id()] : 0;
		argmax_warp(best, at);
		if (lane_id() == 0) {
			bv[0] = best;
			bi[0] = at;
		}
	}
	sync_threads();
	best_out = bv[0];
	at_out = bi[0];
	sync_threads();
}

// argmax writes argmax_row of each row. grid = rows, block 1024.
KERNEL BOUNDS(1024) void argmax(const float *x, int n, i32 *out) {
	float best;
	i32 at;
	argmax_row(x + (i64)blockIdx.x * n, n, best, at);
	if (threadIdx.x == 0) {
		out[blockIdx.x] = at;
	}
}

// top_prob writes each row's argmax and its softmax probability, 1 /
// Σ e^(x−max), the top's own term 1 and terms more than 16 below the top
// left out (each under e^-16 of it), as the host's spec.topProb sums them
// but exactly where it reads a table: a greedy draft's pick and
// confidence, for 8 bytes back a row instead of the row. The sum is in
// float64, per thread then as a tree. grid = rows, block 1024; ids and
// probs each a value per row.
KERNEL BOUNDS(1024) void top_prob(const float *x, int n, i32 *ids, float *probs) {
	x += (i64)blockIdx.x * n;
	float best;
	i32 at;
	argmax_row(x, n, best, at);
	double sum = 0;
	for (int i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
		float v[4];
		UNROLL for (int u = 0; u < 4; u++) {
			int i = i0 + u * blockDim.x;
			v[u] = i < n ? x[i] : 0.0f;
		}
		UNROLL for (int u = 0; u < 4; u++) {
			int i = i0 + u * blockDim.x;
			float d = best - v[u];
			if (i < n && i != at && d < 16.0f) {
				sum += (double)mesh_expf(-d);
			}
		}
	}
	sum = block_sum_d(sum);
	if (threadIdx.x == 0) {
		ids[blockIdx.x] = at;
		probs[blockIdx.x] = (float)(1.0 / (sum + 1.0));
	}
}
