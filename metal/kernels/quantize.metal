// quantize.metal: activation rows to the formats quantised weights are
// dotted with (quant.VecDotType): Q8_0, Q8_1 and Q8_K, by ggml's reference
// quantisers (gguf/quant), bit for bit.
//
// The layout is one array per field, so that the matrix kernels load
// aligned words:
//
//   qs   char  [rows][cols]           the quants
//   d    float [rows][cols/B]         the block scales (Q8_0/Q8_1: the fp16
//                                     value ggml stores, widened)
//   ext  Q8_1: float [rows][cols/32]  the fp16 of d·Σq, widened
//        Q8_K: int   [rows][cols/16]  the 16-element sums (bsums)

struct QuantArgs {
	int nblocks;
};

// Q8_0 and Q8_1: one SIMD group per 32-element block, one element per
// lane; eight blocks per 256-thread threadgroup. The block's largest
// magnitude is a simd_max (max is exact in any order), the Q8_1 sum a
// simd_sum of integers (exact too).
static inline void quantize_q8(device const float *x, device char *qs, device float *d, device float *s, int nblocks, bool q81,
			       uint tg, ushort sg, ushort lane) {
	int blk = int(tg) * 8 + sg;
	if (blk >= nblocks) {
		return;
	}
	float v = x[blk * 32 + lane];
	float amax = simd_max(fabs(v));
	float dd = amax / 127.0f;
	float id = dd != 0 ? 1.0f / dd : 0.0f;
	int q = round_away(v * id);
	qs[blk * 32 + lane] = char(q);
	if (q81) {
		int sum = simd_sum(q);
		if (lane == 0) {
			s[blk] = round_half(float(sum) * dd);
		}
	}
	if (lane == 0) {
		d[blk] = round_half(dd);
	}
}

kernel void quantize_q8_0(device const float *x [[buffer(0)]], device char *qs [[buffer(1)]], device float *d [[buffer(2)]],
			  constant QuantArgs &a [[buffer(3)]], uint tg [[threadgroup_position_in_grid]],
			  ushort sg [[simdgroup_index_in_threadgroup]], ushort lane [[thread_index_in_simdgroup]]) {
	quantize_q8(x, qs, d, d, a.nblocks, false, tg, sg, lane);
}

kernel void quantize_q8_1(device const float *x [[buffer(0)]], device char *qs [[buffer(1)]], device float *d [[buffer(2)]],
			  device float *s [[buffer(3)]], constant QuantArgs &a [[buffer(4)]], uint tg [[threadgroup_position_in_grid]],
			  ushort sg [[simdgroup_index_in_threadgroup]], ushort lane [[thread_index_in_simdgroup]]) {
	quantize_q8(x, qs, d, s, a.nblocks, true, tg, sg, lane);
}

// Q8_K: one SIMD group per 256-element block; lane l holds elements
// l + 32k. Four blocks per 128-thread threadgroup.
kernel void quantize_q8_k(device const float *x [[buffer(0)]], device char *qs [[buffer(1)]], device float *d [[buffer(2)]],
			  device int *bsums [[buffer(3)]], constant QuantArgs &a [[buffer(4)]], uint tg [[threadgroup_position_in_grid]],
			  ushort sg [[simdgroup_index_in_threadgroup]], ushort lane [[thread_index_in_simdgroup]]) {
	int blk = int(tg) * 4 + sg;
	if (blk >= a.nblocks) {
		return;
	}
	device const float *xb = x + blk * 256;
	float v[8];
	// The element of largest magnitude, the first on ties (absMax).
	float amax = 0;
	int at = 256;
	for (int k = 0; k < 8; k++) {
		v[k] = xb[lane + 32 * k];
		float m = fabs(v[k]);
		if (m > amax) {
			amax = m;
			at = lane + 32 * k;
		}
	}
	for (ushort m = 16; m > 0; m >>= 1) {
		float oa = simd_shuffle_xor(amax, m);
		int oat = simd_shuffle_xor(at, m);
		if (oa > amax || (oa == amax && oat < at)) {
			amax = oa;
			at = oat;
		}
	}
	device char *qb = qs + blk * 256;
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
	int sums[8];
	for (int k = 0; k < 8; k++) {
		int q = round_even(iscale * v[k]);
		q = q < 127 ? q : 127;
		qb[lane + 32 * k] = char(q);
		sums[k] = q;
	}
	// Element lane + 32k is in 16-group 2k + lane/16: sum over half-groups.
	for (int k = 0; k < 8; k++) {
		for (ushort m = 8; m > 0; m >>= 1) {
			sums[k] += simd_shuffle_xor(sums[k], m);
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
