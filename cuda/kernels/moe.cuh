// moe.cuh: a mixture of experts' routing, its experts' biases and its
// weighted sum (the gathered products are matvec.cuh's mvx_*), as
// gguf/backend's Route and the CPU backend's MoE compute them, so a step
// routes on the device and reads nothing back. Expert indices are kept as
// floats (exact below 2^24).
#pragma once
#include "ops.cuh"

// The gatings (backend.Gating).
#define GATE_SOFTMAX 0
#define GATE_SOFTMAX_NORM 1
#define GATE_SOFTMAX_CHOSEN 2
#define GATE_SIGMOID_NORM 3

// moe_sigmoid is backend.Sigmoid: 1/(1 + expf(−x)).
DEV float moe_sigmoid(float x) { return 1.0f / (1.0f + libm_expf(-x)); }

// moe_val is the score pick compares for expert i: the logit, its
// probability exp(l − mx)·inv, or with a selection bias its sigmoid plus
// the bias (recomputed: the same bits each time).
DEV float moe_val(const float *lg, int i, bool prob, float mx, float inv, const float *bias) {
	if (bias) {
		return moe_sigmoid(lg[i]) + bias[i];
	}
	return prob ? libm_expf(lg[i] - mx) * inv : lg[i];
}

// moe_pick sets sel and w to the k best scores, best first, the lower
// index first among equals (backend's pick, comparison for comparison).
DEV void moe_pick(const float *lg, int experts, int k, bool prob, float mx, float inv, const float *bias, float *sel, float *w) {
	for (int j = 0; j < k; j++) {
		int best = -1;
		float bv = 0;
		for (int i = 0; i < experts; i++) {
			float v = moe_val(lg, i, prob, mx, inv, bias);
			bool taken = false;
			for (int t = 0; t < j; t++) {
				taken = taken || (int)sel[t] == i;
			}
			if ((best >= 0 && v <= bv) || taken) {
				continue;
			}
			best = i;
			bv = v;
		}
		sel[j] = (float)best;
		w[j] = bv;
	}
}

// moe_weights_norm divides a row's k weights by their sum (float64,
// clamped as ggml clamps it).
DEV void moe_weights_norm(float *wt, int k) {
	double ws = 0;
	for (int j = 0; j < k; j++) {
		ws += (double)wt[j];
	}
	float d = go_max((float)ws, 6.103515625e-5f);
	for (int j = 0; j < k; j++) {
		wt[j] = wt[j] / d;
	}
}

// moe_route picks each row's k experts from its router logits (n ×
// experts) into sel and w (n × k): a thread per row, serial as the host
// is; bias is GATE_SIGMOID_NORM's selection bias (one per expert), null
// for the others. grid = ceil(n / 64), block 64.
KERNEL BOUNDS(64) void moe_route(const float *logits, const float *bias, float *sel, float *w, int n, int experts, int k, int gating) {
	i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= n) {
		return;
	}
	const float *lg = logits + r * experts;
	float *s = sel + r * k, *wt = w + r * k;
	if (gating == GATE_SIGMOID_NORM) {
		moe_pick(lg, experts, k, false, 0, 0, bias, s, wt);
		for (int j = 0; j < k; j++) {
			wt[j] = moe_sigmoid(lg[(int)s[j]]);
		}
		moe_weights_norm(wt, k);
		return;
	}
	if (gating == GATE_SOFTMAX_CHOSEN) {
		moe_pick(lg, experts, k, false, 0, 0, nullptr, s, wt);
		float mx = wt[0];
		double sum = 0;
		for (int j = 0; j < k; j++) {
			wt[j] = libm_expf(wt[j] - mx);
			sum += (double)wt[j];
		}
		float inv = (float)(1.0 / sum);
		for (int j = 0; j < k; j++) {
			wt[j] = wt[j] * inv;
		}
		return;
	}
	float mx = bitcast<float>(0xff800000u);
	for (int i = 0; i < experts; i++) {
		mx = go_max(mx, lg[i]);
	}
	double sum = 0;
	for (int i = 0; i < experts; i++) {
		sum += (double)libm_expf(lg[i] - mx);
	}
	float inv = (float)(1.0 / sum);
	moe_pick(lg, experts, k, true, mx, inv, nullptr, s, wt);
	if (gating == GATE_SOFTMAX_NORM) {
		moe_weights_norm(wt, k);
	}
}

// moe_bias adds to each pair's row of x (pairs × cols) the bias of the
// expert it chose (biases: a device address per expert).
// grid = ceil(pairs·cols / 256), block 256.
KERNEL BOUNDS(256) void moe_bias(float *x, const u64 *biases, const float *sel, int n, int cols) {
	i64 i = elem_index();
	if (i >= n) {
		return;
	}
	const float *b = (const float *)biases[(int)sel[i / cols]];
	x[i] = x[i] + b[i % cols];
}

// moe_sum sets each row of dst (n elements, rows cols wide) to the sum,
// best first, of its k pairs' rows of y, each times the expert's scale
// (when scale is not null) and then its weight, each product rounded.
// grid = ceil(n / 256), block 256.
KERNEL BOUNDS(256) void moe_sum(float *dst, const float *y, const float *sel, const float *w, const float *scale, int n, int cols, int k) {
	i64 i = elem_index();
	if (i >= n) {
		return;
	}
	i64 r = i / cols, c = i % cols;
	float acc = 0;
	for (int j = 0; j < k; j++) {
		i64 p = r * k + j;
		float v = y[p * cols + c];
		if (scale) {
			v = v * scale[(int)sel[p]];
		}
		float t = v * w[p];
		acc = j == 0 ? t : acc + t;
	}
	dst[i] = acc;
}
