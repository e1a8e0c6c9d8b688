// gptoss.cuh: what gpt-oss needs beyond the other architectures' kernels:
// attention with a per-head sink, the clamped SwiGLU, and MXFP4 weights.
// Each is the CPU backend's arithmetic (gguf/cpu, gguf/quant).
#pragma once
#include "ops.cuh"

// ---- Attention sinks ----

// attend_sinks_* are attend_* (ops.cuh) with sinks[heads], a logit per
// head that joins the softmax's max and, after the scores' exponentials,
// its sum (as e^(sink − max) by the C library's expf, as ggml's
// soft_max with a third source computes it), and weights no value.
// grid = (heads, rows of this launch), block 256.
#define ATT_SINK_PARAMS ATT_PARAMS, const float *sinks
KERNEL BOUNDS(ATT_THREADS) void attend_sinks_f16(ATT_SINK_PARAMS) { attend<true>(ATT_ARGS, sinks); }
KERNEL BOUNDS(ATT_THREADS) void attend_sinks_f32(ATT_SINK_PARAMS) { attend<false>(ATT_ARGS, sinks); }

// ---- The clamped SwiGLU ----

// glu_oai is ggml_swiglu_oai with llama.cpp's α = 1.702 and limit 7: the
// gate capped above at 7, the up clamped to ±7, g·σ(α·g)·(u + 1), each
// product rounded, with the C library's expf. dst may be gate or up.
// grid = ceil(n / 256), block 256.
KERNEL BOUNDS(256) void glu_oai(float *dst, const float *gate, const float *up, int n) {
	i64 i = elem_index();
	if (i >= n) {
		return;
	}
	const float alpha = 1.702f, limit = 7.0f;
	float x = go_min(gate[i], limit);
	float y = go_max(go_min(up[i], limit), -limit);
	float out = x / (1.0f + libm_expf(alpha * -x));
	dst[i] = out * (y + 1.0f);
}

// ---- MXFP4 ----
//
// e (E8M0) | qs[16]: the low nibbles are elements 0-15, the high ones
// 16-31, each an FP4 E2M1 value. As in ggml (and gguf/quant) the values
// are doubled to integers and the scale halved: a block dots with a Q8_0
// activation block as an integer sum times e8m0_half(e)·d. 17-byte blocks
// are byte-aligned, so the quants are read a byte at a time.

CONSTANT const i8 mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// e8m0_half is half the E8M0 scale e, 2^(e−128), as ggml_e8m0_to_fp32_half
// builds it: the two smallest are float32 subnormals.
DEV float e8m0_half(u8 e) { return e < 2 ? bitcast<float>(0x00200000u << e) : bitcast<float>((u32)(e - 1) << 23); }

// mxfp4_word maps the nibbles at bit offset sh of four bytes to their
// values, as four signed bytes.
DEV u32 mxfp4_word(const u8 *q, int sh) {
	u32 w = 0;
	for (int k = 0; k < 4; k++) {
		w |= (u32)(u8)mxfp4_values[(q[k] >> sh) & 0xf] << (8 * k);
	}
	return w;
}

struct MXFP4 {
	enum { QK = 32, BYTES = 17, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		int j = e % 32;
		return (float)mxfp4_values[j < 16 ? b[1 + j] & 0xf : b[1 + j - 16] >> 4] * e8m0_half(b[0]);
	}
	DEV void load(const u8 *b, u32 *w) {
		for (int t = 0; t < 4; t++) {
			w[t] = mxfp4_word(b + 1 + 4 * t, 0);
			w[4 + t] = mxfp4_word(b + 1 + 4 * t, 4);
		}
	}
	// gguf/quant's blocksMXFP4: float32(sumi) · (fp16(dy) · e8m0_half(e)).
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float) { return scaled(dot8(w, a), e8m0_half(b[0]), da); }
};

QTYPE32(mxfp4, MXFP4)
