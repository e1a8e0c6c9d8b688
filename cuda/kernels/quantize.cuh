// quantize.cuh: activation rows to the formats quantised weights are
// dotted with (quant.VecDotType): Q8_0, Q8_1 and Q8_K, by ggml's reference
// quantisers (gguf/quant quantBlockQ8_0, Q8_1, Q8_K), bit for bit.
//
// The device layout is not ggml's interleaved blocks but one array per
// field, so that the matrix kernels load aligned words:
//
//   qs   int8 [rows][cols]           the quants
//   d    float [rows][cols/B]        the block scales (Q8_0/Q8_1: the fp16
//                                    value ggml stores, widened)
//   x    Q8_1: float [rows][cols/32] the fp16 of d·Σq, widened
//        Q8_K: int32 [rows][cols/16] the 16-element sums (bsums)
#pragma once
#include "shim.cuh"

// roundf for |f| < 128.5: C's round to nearest, ties away from zero (the
// CPU's roundAwayInt8). f ± ½ is exact in float64.
DEV i32 round_away(float f) {
	double h = f < 0 ? -0.5 : 0.5;
	return (i32)(i8)(i32)((double)f + h);
}

// Q8_0 and Q8_1: one warp per 32-element block, one element per lane.
template <bool Q81>
DEV void quantize_block_q8(const float *x, i8 *qs, float *d, float *s, int blk) {
	int lane = lane_id();
	float v = x[blk * 32 + lane];
	float amax = __builtin_fabsf(v);
	for (int m = 16; m > 0; m >>= 1) {
		float o = shfl_xor_f(amax, m);
		amax = o > amax ? o : amax;
	}
	float dd = amax / 127.0f;
	float id = dd != 0 ? 1.0f / dd : 0.0f;
	i32 q = round_away(v * id);
	qs[blk * 32 + lane] = (i8)q;
	if (Q81) {
		i32 sum = q;
		for (int m = 16; m > 0; m >>= 1) {
			sum += shfl_xor_i(sum, m);
		}
		if (lane == 0) {
			s[blk] = round_half((float)sum * dd);
		}
	}
	if (lane == 0) {
		d[blk] = round_half(dd);
	}
}

// grid.x = ceil(blocks / 8), block 256.
KERNEL BOUNDS(256) void quantize_q8_0(const float *x, i8 *qs, float *d, int nblocks) {
	int blk = blockIdx.x * 8 + warp_id();
	if (blk < nblocks) {
		quantize_block_q8<false>(x, qs, d, nullptr, blk);
	}
}

KERNEL BOUNDS(256) void quantize_q8_1(const float *x, i8 *qs, float *d, float *s, int nblocks) {
	int blk = blockIdx.x * 8 + warp_id();
	if (blk < nblocks) {
		quantize_block_q8<true>(x, qs, d, s, blk);
	}
}

// Q8_K: one warp per 256-element block; lane l holds elements l + 32k.
DEV void quantize_block_q8_k(const float *x, i8 *qs, float *d, i32 *bsums, int blk) {
	int lane = lane_id();
	const float *xb = x + blk * 256;
	float v[8];
	// The element of largest magnitude, the first on ties (absMax).
	float amax = 0;
	int at = 256;
	for (int k = 0; k < 8; k++) {
		v[k] = xb[lane + 32 * k];
		float a = __builtin_fabsf(v[k]);
		if (a > amax) {
			amax = a;
			at = lane + 32 * k;
		}
	}
	for (int m = 16; m > 0; m >>= 1) {
		float oa = shfl_xor_f(amax, m);
		int oat = shfl_xor_i(at, m);
		if (oa > amax || (oa == amax && oat < at)) {
			amax = oa;
			at = oat;
		}
	}
	i8 *qb = qs + blk * 256;
	if (amax == 0) {
		for (int k = 0; k < 8; k++) {
			qb[lane + 32 * k] = 0;
		}
		if (lane < 16) {
			bsums[blk * 16 + lane] = 0;
		}
		if (lane == 0) {
			d[blk] = 0;
		}
		return;
	}
	float mx = xb[at];
	float iscale = -127.0f / mx;
	i32 sums[8];
	for (int k = 0; k < 8; k++) {
		i32 q = round_even(iscale * v[k]);
		q = q < 127 ? q : 127;
		qb[lane + 32 * k] = (i8)q;
		sums[k] = q;
	}
	// Element lane + 32k is in 16-group 2k + lane/16: sum over half-warps.
	for (int k = 0; k < 8; k++) {
		for (int m = 8; m > 0; m >>= 1) {
			sums[k] += shfl_xor_i(sums[k], m);
		}
	}
	if ((lane & 15) == 0) {
		for (int k = 0; k < 8; k++) {
			bsums[blk * 16 + 2 * k + lane / 16] = sums[k];
		}
	}
	if (lane == 0) {
		d[blk] = 1.0f / iscale;
	}
}

// grid.x = ceil(blocks / 4), block 128.
KERNEL BOUNDS(128) void quantize_q8_k(const float *x, i8 *qs, float *d, i32 *bsums, int nblocks) {
	int blk = blockIdx.x * 4 + warp_id();
	if (blk < nblocks) {
		quantize_block_q8_k(x, qs, d, bsums, blk);
	}
}

// quantize_row quantises the row of cols elements at x (element off of
// its tensor) to activation type ACT (0 Q8_0, 1 Q8_1, 2 Q8_K), a warp a
// block, after a barrier: a norm kernel's output, which its block's
// threads have just stored, for the product after it.
template <int ACT>
DEV void quantize_row(const float *x, i64 off, i8 *qs, float *d, void *ext, int cols) {
	sync_threads();
	const int B = ACT == 2 ? 256 : 32;
	for (int blk = warp_id(); blk < cols / B; blk += blockDim.x / WARP) {
		if (ACT == 2) {
			quantize_block_q8_k(x + off, qs + off, d + off / 256, (i32 *)ext + off / 16, blk);
		} else {
			quantize_block_q8<ACT == 1>(x + off, qs + off, d + off / 32, ACT == 1 ? (float *)ext + off / 32 : nullptr, blk);
		}
	}
}
