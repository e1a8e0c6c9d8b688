// matmul.metal: y = x · wᵀ for quantised weights and several activation
// rows (prefill), with simdgroup matrices.
//
// Each SIMD group computes an 8 × 8 tile: 8 weight rows by 8 activation
// rows; a 128-thread threadgroup has four, 32 weight rows in all.
// Threadgroups (Σ ⌈rows_m / 32⌉, ⌈nx / 8⌉), matrix 0's first, up to three
// matrices sharing the activation as in matvec.metal.
//
// The arithmetic is still the CPU's. Per block (or K-quant sub-block), the
// group writes the weights' integer quants and the activation's int8
// quants to threadgroup memory as floats and multiplies them with
// simdgroup_multiply_accumulate: every product is an integer below 2^14
// and every sum below 2^24, so the float results are the exact integer
// dot products, in any order the hardware adds them. Each lane then takes
// two of the tile's 64 (row, token) sums and turns them into block
// partials with the type's formula, added to eight accumulators by block
// index and folded as gguf/quant does. Float weights take matvec.metal's
// eight-row kernels instead: their float products would be summed in the
// hardware's order.

#define MM_ROWS 32   // weight rows per threadgroup, 8 per SIMD group
#define MM_TOKENS 8  // activation rows per threadgroup
#define MM_SHM 640   // floats of threadgroup memory per SIMD group: W 8×32, A 32×8, C 2 × 8×8

// fold8 is fold(·, 8) on eight accumulators held by one lane.
static inline float fold8(thread const float *a) {
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// tile_sums multiplies the 8×32 weight tile W by the 32×8 activation tile
// A into C: with split, the first 16 columns' sums into C[0 … 63] and the
// last 16's into C[64 … 127]; without, all 32 into C[0 … 63].
static inline void tile_sums(threadgroup float *W, threadgroup float *A, threadgroup float *C, bool split) {
	simdgroup_barrier(mem_flags::mem_threadgroup);
	simdgroup_float8x8 c0 = make_filled_simdgroup_matrix<float, 8>(0.0f);
	simdgroup_float8x8 c1 = make_filled_simdgroup_matrix<float, 8>(0.0f);
	for (int k = 0; k < 4; k++) {
		simdgroup_float8x8 wm, am;
		simdgroup_load(wm, W + 8 * k, 32);
		simdgroup_load(am, A + 64 * k, 8);
		if (split && k >= 2) {
			simdgroup_multiply_accumulate(c1, wm, am, c1);
		} else {
			simdgroup_multiply_accumulate(c0, wm, am, c0);
		}
	}
	simdgroup_store(c0, C, 8);
	if (split) {
		simdgroup_store(c1, C + 64, 8);
	}
	simdgroup_barrier(mem_flags::mem_threadgroup);
}

// 32-element types: one tile product per block.
template <typename T>
static inline void matmul_q32(Mat m, constant MVArgs &a, device const char *aq, device const float *ad, device const float *as, int x0,
			      threadgroup float *shm, ushort sg, ushort lane) {
	int r0 = m.group * MM_ROWS + sg * 8;
	if (r0 >= m.rows) {
		return;
	}
	threadgroup float *W = shm + sg * MM_SHM, *A = W + 256, *C = A + 256;
	int nb = a.cols / 32;
	// Loading: lane l fills weight row l/4 and activation row l/4,
	// elements 8·(l%4) … +7.
	int lr = lane / 4, le = (lane % 4) * 8;
	bool wok = r0 + lr < m.rows, aok = x0 + lr < a.nx;
	device const uchar *wl = m.w + long(r0 + (wok ? lr : 0)) * a.row_bytes;
	device const char *al = aq + long(x0 + (aok ? lr : 0)) * a.cols;
	// Output: lane l takes tile entries l and l+32 (row e/8, token e%8).
	float acc[2][8] = {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}};
	for (int i = 0; i < nb; i++) {
		device const uchar *wb = wl + long(i) * T::BYTES;
		for (int e = 0; e < 8; e++) {
			W[lr * 32 + le + e] = wok ? float(T::ival(wb, le + e)) : 0.0f;
			A[(le + e) * 8 + lr] = aok ? float(al[i * 32 + le + e]) : 0.0f;
		}
		tile_sums(W, A, C, false);
		for (int h = 0; h < 2; h++) {
			int idx = lane + 32 * h, r = idx / 8, t = idx % 8;
			if (r0 + r < m.rows && x0 + t < a.nx) {
				long xi = long(x0 + t) * nb + i;
				device const uchar *b = m.w + long(r0 + r) * a.row_bytes + long(i) * T::BYTES;
				acc[h][i & 7] += T::partial(b, int(C[idx]), ad[xi], T::Q81 ? as[xi] : 0.0f);
			}
		}
	}
	for (int h = 0; h < 2; h++) {
		int idx = lane + 32 * h, r = idx / 8, t = idx % 8;
		if (r0 + r < m.rows && x0 + t < a.nx) {
			m.y[long(x0 + t) * m.rows + r0 + r] = fold8(acc[h]);
		}
	}
}

// K-quants: one tile product per 32-element sub-block, its two halves'
// sums apart (Q2_K, Q3_K and Q6_K scale each 16 elements).
template <typename T>
static inline void matmul_k(Mat m, constant MVArgs &a, device const char *aq, device const float *ad, device const int *bsums, int x0,
			    threadgroup float *shm, ushort sg, ushort lane) {
	int r0 = m.group * MM_ROWS + sg * 8;
	if (r0 >= m.rows) {
		return;
	}
	threadgroup float *W = shm + sg * MM_SHM, *A = W + 256, *C = A + 256;
	int nb = a.cols / 256;
	int lr = lane / 4, le = (lane % 4) * 8;
	bool wok = r0 + lr < m.rows, aok = x0 + lr < a.nx;
	device const uchar *wl = m.w + long(r0 + (wok ? lr : 0)) * a.row_bytes;
	device const char *al = aq + long(x0 + (aok ? lr : 0)) * a.cols;
	float acc[2][8] = {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}};
	for (int i = 0; i < nb; i++) {
		device const uchar *wb = wl + long(i) * T::BYTES;
		int isum[2] = {0, 0}, summs[2] = {0, 0};
		for (int s = 0; s < 8; s++) {
			for (int e = 0; e < 8; e++) {
				W[lr * 32 + le + e] = wok ? float(T::ival(wb, 32 * s + le + e)) : 0.0f;
				A[(le + e) * 8 + lr] = aok ? float(al[i * 256 + 32 * s + le + e]) : 0.0f;
			}
			tile_sums(W, A, C, true);
			for (int h = 0; h < 2; h++) {
				int idx = lane + 32 * h, r = idx / 8, t = idx % 8;
				if (r0 + r < m.rows && x0 + t < a.nx) {
					long xi = long(x0 + t) * nb + i;
					device const uchar *b = m.w + long(r0 + r) * a.row_bytes + long(i) * T::BYTES;
					T::sub(b, s, int(C[idx]), int(C[64 + idx]), bsums + xi * 16, isum[h], summs[h]);
				}
			}
		}
		for (int h = 0; h < 2; h++) {
			int idx = lane + 32 * h, r = idx / 8, t = idx % 8;
			if (r0 + r < m.rows && x0 + t < a.nx) {
				long xi = long(x0 + t) * nb + i;
				device const uchar *b = m.w + long(r0 + r) * a.row_bytes + long(i) * T::BYTES;
				acc[h][i & 7] += T::partial(b, isum[h], summs[h], ad[xi]);
			}
		}
	}
	for (int h = 0; h < 2; h++) {
		int idx = lane + 32 * h, r = idx / 8, t = idx % 8;
		if (r0 + r < m.rows && x0 + t < a.nx) {
			m.y[long(x0 + t) * m.rows + r0 + r] = fold8(acc[h]);
		}
	}
}

#define MM_SHARED threadgroup float *shm [[threadgroup(0)]]
#define MM_Q8_0 MV_Q8_0, MM_SHARED
#define MM_Q8_1 MV_Q8_1, MM_SHARED
#define MM_Q8_K MV_Q8_K, MM_SHARED
#define MM_PICK MV_PICK(MM_ROWS), a, aq, ad

kernel void mm_q4_0(MM_Q8_0) { matmul_q32<Q4_0>(MM_PICK, ad, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q4_1(MM_Q8_1) { matmul_q32<Q4_1>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q5_0(MM_Q8_0) { matmul_q32<Q5_0>(MM_PICK, ad, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q5_1(MM_Q8_1) { matmul_q32<Q5_1>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q8_0(MM_Q8_0) { matmul_q32<Q8_0>(MM_PICK, ad, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_iq4_nl(MM_Q8_0) { matmul_q32<IQ4_NL>(MM_PICK, ad, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q2_k(MM_Q8_K) { matmul_k<Q2_K>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q3_k(MM_Q8_K) { matmul_k<Q3_K>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q4_k(MM_Q8_K) { matmul_k<Q4_K>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q5_k(MM_Q8_K) { matmul_k<Q5_K>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_q6_k(MM_Q8_K) { matmul_k<Q6_K>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
kernel void mm_iq4_xs(MM_Q8_K) { matmul_k<IQ4_XS>(MM_PICK, ax, int(tg.y) * MM_TOKENS, shm, sg, lane); }
