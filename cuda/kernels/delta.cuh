// delta.cuh: Qwen3.5's gated delta net (gguf/model hybrid.go, the CPU
// backend's gguf/cpu delta.go): the short convolution and the gated
// delta-rule scan, over a step's sequences at once, each sequence's state
// read from Prev and written to Next (the same memory when in place).
//
// The sequences' table (rows and state addresses) is in the step's
// argument area, so a decode step's launches are the same every token
// even as the model alternates a sequence's two states, and replay as one
// CUDA graph.
//
// Arithmetic is the CPU's operation for operation: the host evaluates
// e^x and log in float64 and rounds to float32, so these do too, with
// math.cuh's libm_expf and, for softplus's log(1 + e^x), mesh_exp and
// mesh_log here (libdevice is not linked); Σ of squares in float64 in
// element order, by one thread.
#pragma once
#include "math.cuh"

// DELTA_MAX_DIM bounds the scan's head size (a thread per state row).
#define DELTA_MAX_DIM 256
// CONV_MAX_KERNEL bounds the convolution's width (a thread's window).
#define CONV_MAX_KERNEL 64

// delta_seq is one sequence of the step (48 bytes, cuda/delta.go writes
// it): its rows as two spans, then its states.
struct delta_seq {
	i32 row0, n0, row1, n1;
	u64 prev_conv, next_conv, prev_ssm, next_ssm;
};

// mesh_exp is e^x in float64 to about an ulp (Go's math.Exp within one),
// for softplus, which takes the log of 1 + e^x before any rounding:
// x = n·ln2 + r, |r| ≤ 0.35, e^r by its Taylor series to r¹³.
DEV double mesh_exp(double x) {
	if (x != x) {
		return x;
	}
	if (x > 709.782712893384) {
		return bitcast<double>(0x7ff0000000000000ull);
	}
	if (x < -745.1332191019412) {
		return 0;
	}
	const double shift = 0x1.8p52;
	double n = (x * 1.4426950408889634 + shift) - shift;
	// ln2's high half has 32 significant bits: n·hi is exact.
	double r = (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
	double p = 1.0 / 6227020800.0;
	p = p * r + 1.0 / 479001600.0;
	p = p * r + 1.0 / 39916800.0;
	p = p * r + 1.0 / 3628800.0;
	p = p * r + 1.0 / 362880.0;
	p = p * r + 1.0 / 40320.0;
	p = p * r + 1.0 / 5040.0;
	p = p * r + 1.0 / 720.0;
	p = p * r + 1.0 / 120.0;
	p = p * r + 1.0 / 24.0;
	p = p * r + 1.0 / 6.0;
	p = p * r + 0.5;
	p = p * r + 1.0;
	p = p * r + 1.0;
	// 2ⁿ in two halves, each a normal double, so a subnormal result is
	// rounded once.
	i64 k = (i64)n, k1 = k / 2, k2 = k - k1;
	return p * bitcast<double>((u64)(k1 + 1023) << 52) * bitcast<double>((u64)(k2 + 1023) << 52);
}

// mesh_log is ln x for a positive normal x in float64 to about an ulp:
// x = 2ᵉ·m, m in [√½, √2), ln m = 2·atanh((m−1)/(m+1)) by its series.
DEV double mesh_log(double x) {
	u64 bits = bitcast<u64>(x);
	i64 e = (i64)((bits >> 52) & 0x7ff) - 1023;
	double m = bitcast<double>((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
	if (m > 1.4142135623730951) {
		m *= 0.5;
		e++;
	}
	double s = (m - 1) / (m + 1), s2 = s * s;
	double p = 1.0 / 23;
	p = p * s2 + 1.0 / 21;
	p = p * s2 + 1.0 / 19;
	p = p * s2 + 1.0 / 17;
	p = p * s2 + 1.0 / 15;
	p = p * s2 + 1.0 / 13;
	p = p * s2 + 1.0 / 11;
	p = p * s2 + 1.0 / 9;
	p = p * s2 + 1.0 / 7;
	p = p * s2 + 1.0 / 5;
	p = p * s2 + 1.0 / 3;
	p = p * s2 + 1.0;
	double de = (double)e;
	return de * 6.93147180369123816490e-01 + (de * 1.90821492927058770002e-10 + 2 * s * p);
}

// The host's activations, with e^x in float64.
DEV float d_silu(float x) { return x / (1.0f + libm_expf(-x)); }
DEV float d_sigmoid(float x) { return 1.0f / (1.0f + libm_expf(-x)); }
DEV float d_softplus(float x) { return x > 20.0f ? x : (float)mesh_log(1.0 + mesh_exp((double)x)); }

// short_conv replaces each sequence's rows of x (n × ch) by silu of their
// causal convolution with w (ch × k, a channel's taps oldest first) over
// the sequence's previous k−1 inputs (prev_conv, (k−1) × ch) and leaves its
// last k−1 inputs in next_conv. A thread per channel, its window in
// registers; grid = (⌈ch/256⌉, sequences), block 256.
KERNEL BOUNDS(256) void short_conv(float *x, const float *w, const delta_seq *seqs, int ch, int k) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= ch) {
		return;
	}
	const delta_seq s = seqs[blockIdx.y];
	const float *prev = (const float *)s.prev_conv;
	float *next = (float *)s.next_conv;
	const float *wt = w + (i64)i * k;
	float win[CONV_MAX_KERNEL];
	for (int r = 0; r < k - 1; r++) {
		win[r] = prev[(i64)r * ch + i];
	}
	for (int sp = 0; sp < 2; sp++) {
		int row = sp == 0 ? s.row0 : s.row1, n = sp == 0 ? s.n0 : s.n1;
		for (int r = row; r < row + n; r++) {
			float *xr = x + (i64)r * ch + i;
			win[k - 1] = *xr;
			float sum = 0;
			for (int t = 0; t < k; t++) {
				sum += win[t] * wt[t];
			}
			*xr = d_silu(sum);
			for (int t = 0; t < k - 1; t++) {
				win[t] = win[t + 1];
			}
		}
	}
	for (int r = 0; r < k - 1; r++) {
		next[(i64)r * ch + i] = win[r];
	}
}

// l2_scale is 1/max(‖v‖, eps) as ggml_l2_norm (Σ in float64, in order).
DEV float l2_scale(const float *v, int n, float eps) {
	double s = 0;
	for (int i = 0; i < n; i++) {
		s += (double)(v[i] * v[i]);
	}
	return 1.0f / go_max((float)__builtin_sqrt(s), eps);
}

// delta_lanes_clear and delta_lanes_fold keep a dot product's 32 lanes
// (registers, the loops being unrolled) and fold them by halving: lane l
// += lane l+w for w = 16, 8, 4, 2, 1.
DEV void delta_lanes_clear(float *lanes) {
#pragma unroll
	for (int l = 0; l < 32; l++) {
		lanes[l] = 0;
	}
}

DEV float delta_lanes_fold(float *lanes) {
#pragma unroll
	for (int l = 0; l < 16; l++) {
		lanes[l] += lanes[l + 16];
	}
#pragma unroll
	for (int l = 0; l < 8; l++) {
		lanes[l] += lanes[l + 8];
	}
#pragma unroll
	for (int l = 0; l < 4; l++) {
		lanes[l] += lanes[l + 4];
	}
	lanes[0] += lanes[2];
	lanes[1] += lanes[3];
	return lanes[0] + lanes[1];
}

// delta_scan runs the gated delta rule of value head blockIdx.x over
// sequence blockIdx.y's rows of the convolved x (n × (2·kh+nh)·S: queries,
// keys, values), from prev_ssm into next_ssm, and writes the gated RMSNorm
// of its output into y (n × nh·S) with the gates z. A thread per state
// row j (value component); the state of head h is stored transposed,
// element (j, i) at h·S² + i·S + j, so a warp's loads are coalesced.
// grid = (nh, sequences), block = S rounded up to a warp.
KERNEL BOUNDS(DELTA_MAX_DIM) void delta_scan(float *y, const float *x, const float *z, const float *beta,
		const float *alpha, const float *dt_bias, const float *a, const float *norm, const delta_seq *seqs,
		int kh, int nh, int S, float eps) {
	SHARED float sq[DELTA_MAX_DIM], sk[DELTA_MAX_DIM], so[DELTA_MAX_DIM];
	SHARED float sc[2];
	int h = blockIdx.x, j = threadIdx.x, g0 = h % kh;
	const delta_seq s = seqs[blockIdx.y];
	i64 hs = (i64)h * S * S;
	const float *src = (const float *)s.prev_ssm + hs;
	float *dst = (float *)s.next_ssm + hs;
	i64 ch = (i64)(2 * kh + nh) * S, inner = (i64)nh * S;
	float scale = 1.0f / (float)__builtin_sqrt((double)S);
	for (int sp = 0; sp < 2; sp++) {
		int row = sp == 0 ? s.row0 : s.row1, n = sp == 0 ? s.n0 : s.n1;
		for (int r = row; r < row + n; r++) {
			const float *xr = x + (i64)r * ch;
			if (j < S) {
				sq[j] = xr[g0 * S + j];
				sk[j] = xr[(i64)kh * S + g0 * S + j];
			}
			sync_threads();
			if (j == 0) {
				sc[0] = l2_scale(sq, S, eps);
				sc[1] = l2_scale(sk, S, eps);
			}
			sync_threads();
			if (j < S) {
				sq[j] *= sc[0];
				sk[j] *= sc[1];
			}
			sync_threads();
			float g = d_softplus(alpha[(i64)r * nh + h] + dt_bias[h]) * a[h];
			float b = d_sigmoid(beta[(i64)r * nh + h]);
			float decay = libm_expf(g);
			if (j < S) {
				// Row j of the state: decay it, take its product with
				// k, then add k·δ_j and take its product with q. Each
				// product goes to lane i mod 32 and the lanes fold by
				// halving, the CPU's order (gguf/deltanet/kernel.go).
				float lanes[32];
				delta_lanes_clear(lanes);
				for (int i0 = 0; i0 < S; i0 += 32) {
#pragma unroll
					for (int l = 0; l < 32; l++) {
						int i = i0 + l;
						if (i < S) {
							float m = src[(i64)i * S + j] * decay;
							dst[(i64)i * S + j] = m;
							lanes[l] += m * sk[i];
						}
					}
				}
				float dj = (xr[(i64)2 * kh * S + (i64)h * S + j] - delta_lanes_fold(lanes)) * b;
				delta_lanes_clear(lanes);
				for (int i0 = 0; i0 < S; i0 += 32) {
#pragma unroll
					for (int l = 0; l < 32; l++) {
						int i = i0 + l;
						if (i < S) {
							float m = dst[(i64)i * S + j] + sk[i] * dj;
							dst[(i64)i * S + j] = m;
							lanes[l] += m * sq[i];
						}
					}
				}
				so[j] = delta_lanes_fold(lanes) * scale;
			}
			src = dst;
			sync_threads();
			if (j == 0) {
				double ss = 0;
				for (int i = 0; i < S; i++) {
					ss += (double)(so[i] * so[i]);
				}
				sc[0] = 1.0f / (float)__builtin_sqrt((double)((float)(ss / (double)S) + eps));
			}
			sync_threads();
			if (j < S) {
				float zv = z[(i64)r * inner + (i64)h * S + j];
				y[(i64)r * inner + (i64)h * S + j] = so[j] * sc[0] * norm[j] * d_silu(zv);
			}
			sync_threads();
		}
	}
}

// sigmoid_mul sets x *= σ(g) elementwise over n elements of rows cols
// wide, g as wide (gcols = cols) or a gate per row (gcols = 1): Qwen3.5's
// attention output gate and shared-expert gate. grid = ⌈n/256⌉, block 256.
KERNEL BOUNDS(256) void sigmoid_mul(float *x, const float *g, int n, int cols, int gcols) {
	i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n) {
		return;
	}
	i64 r = i / cols, c = gcols == 1 ? 0 : i % cols;
	x[i] = x[i] * d_sigmoid(g[r * gcols + c]);
}
