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
// e^x and log in float64 by gguf/detmath and rounds to float32, so these
// do too, with math.cuh's det_exp and, for softplus's log(1 + e^x),
// det_log here (libdevice is not linked); Σ of squares in float64 in
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

// det_log is ln x in float64 as gguf/detmath.Log computes it (fdlibm's
// e_log.c, every product rounded on its own), for softplus.
DEV double det_log(double x) {
	const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10, l1 = 6.666666666666735130e-01,
		     l2 = 3.999999999940941908e-01, l3 = 2.857142874366239149e-01, l4 = 2.222219843214978396e-01,
		     l5 = 1.818357216161805012e-01, l6 = 1.531383769920937332e-01, l7 = 1.479819860511658591e-01;
	if (x != x || x == bitcast<double>(0x7ff0000000000000ull)) {
		return x;
	}
	if (x < 0) {
		return bitcast<double>(0x7ff8000000000001ull);
	}
	if (x == 0) {
		return bitcast<double>(0xfff0000000000000ull);
	}
	// Frexp: x = f1·2^ki with f1 in [1/2, 1), subnormals normalised first.
	i64 ki = 0;
	if (x < 0x1p-1022) {
		x *= 0x1p52;
		ki = -52;
	}
	u64 bits = bitcast<u64>(x);
	ki += (i64)((bits >> 52) & 0x7ff) - 1022;
	double f1 = bitcast<double>((bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull);
	if (f1 < 0x1.6a09e667f3bcdp-1) { // √2/2
		f1 *= 2;
		ki--;
	}
	double f = f1 - 1, k = (double)ki;
	double s = f / (2 + f), s2 = s * s, s4 = s2 * s2;
	double t1 = s2 * (l1 + s4 * (l3 + s4 * (l5 + s4 * l7)));
	double t2 = s4 * (l2 + s4 * (l4 + s4 * l6));
	double R = t1 + t2, hfsq = 0.5 * f * f;
	return k * ln2_hi - ((hfsq - (s * (hfsq + R) + k * ln2_lo)) - f);
}

// The host's activations, with e^x in float64.
DEV float d_silu(float x) { return x / (1.0f + libm_expf(-x)); }
DEV float d_sigmoid(float x) { return 1.0f / (1.0f + libm_expf(-x)); }
DEV float d_softplus(float x) { return x > 20.0f ? x : (float)det_log(1.0 + det_exp((double)x)); }

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

// gated_conv is LFM2's gated short convolution: each sequence's rows of y
// (n × ch) become c ⊙ conv(b ⊙ x), b, c and x the three chunks of bcx's
// rows (n × 3·ch), conv the causal convolution with w (ch × k, a channel's
// taps oldest first) over the sequence's previous k−1 products
// (prev_conv) without an activation, each tap a fused multiply-add (the
// CPU's detmath.FMA32); its last k−1 products go to next_conv. A thread per channel, its window in registers; grid =
// (⌈ch/256⌉, sequences), block 256.
KERNEL BOUNDS(256) void gated_conv(float *y, const float *bcx, const float *w, const delta_seq *seqs, int ch, int k) {
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
			const float *in = bcx + (i64)r * 3 * ch;
			win[k - 1] = in[i] * in[2 * ch + i];
			float sum = 0;
			for (int t = 0; t < k; t++) {
				sum = __builtin_fmaf(win[t], wt[t], sum);
			}
			y[(i64)r * ch + i] = in[ch + i] * sum;
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
