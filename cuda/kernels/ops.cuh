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

// rms_norm normalises each group-element group of each row as ggml's
// rms_norm then mul: Σx² in float64 (here summed as a tree; the CPU sums
// in order, which can differ in the last bit of a float64 and so, rarely,
// in the float32 mean), scale 1/√(mean+eps) in float32, x·scale·w.
// grid = (cols / group, rows), block 256. y may be x.
KERNEL BOUNDS(256) void rms_norm(const float *x, float *y, const float *w, int cols, int group, float eps) {
	i64 off = (i64)blockIdx.y * cols + (i64)blockIdx.x * group;
	const float *xs = x + off;
	float *ys = y + off;
	double sum = 0;
	for (int e = threadIdx.x; e < group; e += blockDim.x) {
		float v = xs[e];
		sum += (double)(v * v);
	}
	sum = block_sum_d(sum);
	float mean = (float)(sum / (double)group);
	float scale = 1.0f / __builtin_sqrtf(mean + eps);
	for (int e = threadIdx.x; e < group; e += blockDim.x) {
		ys[e] = (xs[e] * scale) * w[e];
	}
}

// add_rms_norm is add then rms_norm over whole rows: x += a, y =
// norm(x)·w, one launch for the residual add and the next norm. grid = (1,
// rows), block 256. y may be x, or a.
KERNEL BOUNDS(256) void add_rms_norm(float *x, const float *a, float *y, const float *w, int cols, float eps) {
	i64 off = (i64)blockIdx.y * cols;
	float *xs = x + off;
	const float *as = a + off;
	float *ys = y + off;
	double sum = 0;
	for (int e = threadIdx.x; e < cols; e += blockDim.x) {
		float v = xs[e] + as[e];
		xs[e] = v;
		sum += (double)(v * v);
	}
	sum = block_sum_d(sum);
	float mean = (float)(sum / (double)cols);
	float scale = 1.0f / __builtin_sqrtf(mean + eps);
	for (int e = threadIdx.x; e < cols; e += blockDim.x) {
		ys[e] = (xs[e] * scale) * w[e];
	}
}

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
KERNEL BOUNDS(256) void glu(float *dst, const float *gate, const float *up, int n, int kind) {
	i64 i = elem_index();
	if (i >= n) {
		return;
	}
	float x = gate[i], u = up[i];
	if (kind == 0) {
		dst[i] = silu(x) * u;
	} else if (x <= -10.0f) {
		dst[i] = 0;
	} else if (x >= 10.0f) {
		dst[i] = x * u;
	} else {
		dst[i] = gelu_table(x) * u;
	}
}

// ---- RoPE ----

// rope rotates every head of row t (position *pos + t) of x (blockIdx.z 0)
// or x2 (1: one launch does Q and K) by the backend's table of (cos, sin)
// per position and pair, which the host fills with the CPU's arithmetic.
// neox selects the (i, i + dims/2) pairing over adjacent pairs. grid =
// (rows, 1, 1 or 2), block 128.
KERNEL BOUNDS(128) void rope(float *x, float *x2, const float *table, const i32 *pos, int cols, int cols2, int head_dim, int dims,
			     int neox) {
	if (blockIdx.z == 1) {
		x = x2;
		cols = cols2;
	}
	int t = blockIdx.x, half = dims / 2, heads = cols / head_dim;
	const float *cs = table + (i64)(*pos + t) * dims;
	float *row = x + (i64)t * cols;
	for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
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
template <bool F16>
DEV void attend(const float *q, float *out, const u8 *kc, const u8 *vc, float *scores, const i32 *pos, int heads, int kvheads,
		int dk, int dv, int cap, int window, float scale, float cap_soft, int row0, const float *sinks = nullptr) {
	SHARED float qs[ATT_MAX_HEAD];
	int h = blockIdx.x, r = blockIdx.y, i = row0 + r;
	int p = *pos + i;
	int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	int n = p + 1 - lo;
	int kvh = h / (heads / kvheads);
	const float *qrow = q + ((i64)i * heads + h) * dk;
	for (int e = threadIdx.x; e < dk; e += blockDim.x) {
		qs[e] = F16 ? round_half(qrow[e]) : qrow[e];
	}
	sync_threads();

	float *sc = scores + ((i64)r * heads + h) * cap;
	int w = warp_id(), lane = lane_id();
	float wmax = bitcast<float>(0xff800000u);
	i64 kbase = ((i64)kvh * cap + lo) * dk;
	for (int k = w; k < n; k += ATT_WARPS) {
		float acc = 0;
		for (int e = lane; e < dk; e += WARP) {
			acc += kv_get<F16>(kc, kbase + (i64)k * dk + e) * qs[e];
		}
		float s = shfl_idx_f(fold(acc, WARP), 0);
		if (cap_soft > 0) {
			s = cap_soft * mesh_tanhf(s / cap_soft);
		}
		s = s * scale;
		if (lane == 0) {
			sc[k] = s;
		}
		wmax = go_max(wmax, s);
	}
	float m = block_max(wmax);
	if (sinks) {
		m = go_max(m, sinks[h]); // a sink joins the max (gptoss.cuh)
	}

	double sum = 0;
	for (int k = threadIdx.x; k < n; k += blockDim.x) {
		float e = mesh_expf(sc[k] - m);
		sc[k] = e;
		sum += (double)e;
	}
	sum = block_sum_d(sum);
	if (sinks) {
		sum += (double)libm_expf(sinks[h] - m); // and the sum, last, weighting no value
	}
	float inv = (float)(1.0 / sum);
	for (int k = threadIdx.x; k < n; k += blockDim.x) {
		float v = sc[k] * inv;
		sc[k] = F16 ? round_half(v) : v;
	}
	sync_threads();

	float *o = out + ((i64)i * heads + h) * dv;
	for (int d = w; d < dv; d += ATT_WARPS) {
		i64 vbase = ((i64)kvh * dv + d) * cap + lo;
		float acc = 0;
		for (int j = lane; j < n; j += WARP) {
			acc += kv_get<F16>(vc, vbase + j) * sc[j];
		}
		acc = fold(acc, WARP);
		if (lane == 0) {
			o[d] = acc;
		}
	}
}

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

// argmax writes the index of x's largest element, the lowest on a tie, 0
// when none is above -Inf (NaN never wins): the sampler's greedy choice.
// One block of 1024.
KERNEL BOUNDS(1024) void argmax(const float *x, int n, i32 *out) {
	SHARED float bv[WARP];
	SHARED i32 bi[WARP];
	float best = bitcast<float>(0xff800000u);
	i32 at = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		if (x[i] > best) {
			best = x[i];
			at = i;
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
			*out = at;
		}
	}
}
