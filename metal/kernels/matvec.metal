// matvec.metal: y = x · wᵀ for one activation row (decode) and for float
// weights in batches of eight (prefill), and embedding lookups.
//
// One SIMD group per weight row, four rows per 128-thread threadgroup;
// each group dots its row with R activation rows (R = 1, or 8 for float
// weights in prefill). A dispatch covers up to three matrices of one type
// and width sharing the activation (Q, K and V; gate and up): threadgroups
// (Σ ⌈rows_m / 4⌉, ⌈nx / R⌉), matrix 0's first.
//
// The float32 arithmetic is the CPU backend's (gguf/quant/dot.go): block
// partials go to eight accumulators by block index mod 8, each added in
// block order, then folded by halving; float types accumulate element i in
// lane i mod 32 and fold the 32 lanes by halving. The accumulators are
// lanes: a block's partial is handed to lane (block mod 8) by a shuffle,
// and the folding is simd_shuffle_down by 4, 2, 1 (or 16 … 1). simd_sum is
// not used for floats: its order is the hardware's.

#define MV_ROWS 4

// MVArgs are every matrix kernel's scalar arguments: the three matrices'
// rows (0: absent), the bytes of a weight row, its width and the
// activation rows.
struct MVArgs {
	int rows0, rows1, rows2;
	int row_bytes, cols, nx;
};

// Mat is the matrix a threadgroup works on: its weights, rows, output and
// this threadgroup's index within it.
struct Mat {
	device const uchar *w;
	device float *y;
	int rows, group;
};

static inline Mat pick(device const uchar *w0, device const uchar *w1, device const uchar *w2, device float *y0, device float *y1,
		       device float *y2, constant MVArgs &a, int per, int g) {
	int n0 = (a.rows0 + per - 1) / per, n1 = (a.rows1 + per - 1) / per;
	if (g < n0) {
		return Mat{w0, y0, a.rows0, g};
	}
	if (g < n0 + n1) {
		return Mat{w1, y1, a.rows1, g - n0};
	}
	return Mat{w2, y2, a.rows2, g - n0 - n1};
}

// fold adds lane l+w into lane l for w = n/2 … 1 (the CPU's reduce); lane
// 0 holds the result.
static inline float fold(float v, int n) {
	for (int w = n / 2; w >= 1; w /= 2) {
		v += simd_shuffle_down(v, ushort(w));
	}
	return v;
}

// chain adds the partials of the blocks this step covered (block i0+g in
// lane g·LPB) to the accumulator of their block index mod 8, held in lanes
// 0 … 7, in block order.
template <int LPB, int R>
static inline void chain(thread float *acc, thread const float *part, int i0, int nb, ushort lane) {
	const int BPI = SIMD_WIDTH / LPB;
	int k = lane & 7;
	if (BPI >= 8) {
		for (int j = 0; j < BPI / 8; j++) {
			int bi = k + 8 * j;
			for (int r = 0; r < R; r++) {
				float v = simd_shuffle(part[r], ushort(bi * LPB));
				if (i0 + bi < nb) {
					acc[r] += v;
				}
			}
		}
	} else {
		int off = k - (i0 & 7);
		bool ok = off >= 0 && off < BPI && i0 + off < nb;
		for (int r = 0; r < R; r++) {
			float v = simd_shuffle(part[r], ushort(ok ? off * LPB : 0));
			if (ok) {
				acc[r] += v;
			}
		}
	}
}

template <int R>
static inline void store_rows(device float *y, int wrows, int row, int x0, int nx, thread const float *acc, ushort lane) {
	if (lane == 0) {
		for (int r = 0; r < R; r++) {
			if (x0 + r < nx) {
				y[long(x0 + r) * wrows + row] = acc[r];
			}
		}
	}
}

// 32-element types: one lane per block.
template <typename T>
static inline void matvec_q32(Mat m, constant MVArgs &a, device const char *aq, device const float *ad, device const float *as, int x0,
			      ushort sg, ushort lane) {
	int row = m.group * MV_ROWS + sg;
	if (row >= m.rows) {
		return;
	}
	int nb = a.cols / 32;
	device const uchar *wr = m.w + long(row) * a.row_bytes;
	float acc[1] = {0};
	for (int i0 = 0; i0 < nb; i0 += SIMD_WIDTH) {
		int i = i0 + lane;
		float part[1] = {0};
		if (i < nb && x0 < a.nx) {
			device const uchar *b = wr + long(i) * T::BYTES;
			uint wq[8];
			T::load(b, wq);
			long xi = long(x0) * nb + i;
			part[0] = T::partial(b, T::sumi(wq, (device const uint *)(aq + xi * 32)), ad[xi], T::Q81 ? as[xi] : 0.0f);
		}
		chain<1, 1>(acc, part, i0, nb, lane);
	}
	acc[0] = fold(acc[0], 8);
	store_rows<1>(m.y, m.rows, row, x0, a.nx, acc, lane);
}

// K-quants: eight lanes per block, four blocks per step.
template <typename T>
static inline void matvec_k(Mat m, constant MVArgs &a, device const char *aq, device const float *ad, device const int *bsums, int x0,
			    ushort sg, ushort lane) {
	int row = m.group * MV_ROWS + sg;
	if (row >= m.rows) {
		return;
	}
	const int LPB = 8, BPI = SIMD_WIDTH / LPB;
	int nb = a.cols / 256;
	int g = lane / LPB, s = lane % LPB;
	device const uchar *wr = m.w + long(row) * a.row_bytes;
	float acc[1] = {0};
	for (int i0 = 0; i0 < nb; i0 += BPI) {
		int i = i0 + g;
		int isum = 0, summs = 0;
		device const uchar *b = wr + long(i) * T::BYTES;
		bool live = i < nb && x0 < a.nx;
		long xi = long(x0) * nb + i;
		if (live) {
			uint wq[8];
			T::load(b, s, wq);
			T::ints(b, s, wq, (device const uint *)(aq + xi * 256 + 32 * s), bsums + xi * 16, isum, summs);
		}
		for (ushort k = 1; k < LPB; k <<= 1) {
			isum += simd_shuffle_xor(isum, k);
			summs += simd_shuffle_xor(summs, k);
		}
		float part[1] = {0};
		if (live) {
			part[0] = T::partial(b, isum, summs, ad[xi]);
		}
		chain<LPB, 1>(acc, part, i0, nb, lane);
	}
	acc[0] = fold(acc[0], 8);
	store_rows<1>(m.y, m.rows, row, x0, a.nx, acc, lane);
}

// Float types: element e of the row in lane e mod 32, the activation
// rounded to the weight's type as the CPU converts it.
template <typename T, int R>
static inline void matvec_f(Mat m, constant MVArgs &a, device const float *x, int x0, ushort sg, ushort lane) {
	int row = m.group * MV_ROWS + sg;
	if (row >= m.rows) {
		return;
	}
	device const uchar *wr = m.w + long(row) * a.row_bytes;
	float acc[R];
	for (int r = 0; r < R; r++) {
		acc[r] = 0;
	}
	for (int e = lane; e < a.cols; e += SIMD_WIDTH) {
		float wv = T::elem(wr, e);
		for (int r = 0; r < R; r++) {
			if (x0 + r < a.nx) {
				acc[r] += wv * T::act(x[long(x0 + r) * a.cols + e]);
			}
		}
	}
	for (int r = 0; r < R; r++) {
		acc[r] = fold(acc[r], SIMD_WIDTH);
	}
	store_rows<R>(m.y, m.rows, row, x0, a.nx, acc, lane);
}

// Every matrix kernel binds the three matrices' weights at 0-2, their
// outputs at 3-5, MVArgs at 6 and the activation from 7: float32 rows
// (float weights), or the quantised rows' quants, scales and extra field.
#define MV_COMMON                                                                                                                 \
	device const uchar *w0 [[buffer(0)]], device const uchar *w1 [[buffer(1)]], device const uchar *w2 [[buffer(2)]],          \
		device float *y0 [[buffer(3)]], device float *y1 [[buffer(4)]], device float *y2 [[buffer(5)]],                    \
		constant MVArgs &a [[buffer(6)]], uint3 tg [[threadgroup_position_in_grid]], ushort sg [[simdgroup_index_in_threadgroup]], \
		ushort lane [[thread_index_in_simdgroup]]
#define MV_F32ACT MV_COMMON, device const float *x [[buffer(7)]]
#define MV_Q8_0 MV_COMMON, device const char *aq [[buffer(7)]], device const float *ad [[buffer(8)]]
#define MV_Q8_1 MV_COMMON, device const char *aq [[buffer(7)]], device const float *ad [[buffer(8)]], device const float *ax [[buffer(9)]]
#define MV_Q8_K MV_COMMON, device const char *aq [[buffer(7)]], device const float *ad [[buffer(8)]], device const int *ax [[buffer(9)]]
#define MV_PICK(per) pick(w0, w1, w2, y0, y1, y2, a, per, int(tg.x))

kernel void mv_q4_0(MV_Q8_0) { matvec_q32<Q4_0>(MV_PICK(MV_ROWS), a, aq, ad, ad, int(tg.y), sg, lane); }
kernel void mv_q4_1(MV_Q8_1) { matvec_q32<Q4_1>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_q5_0(MV_Q8_0) { matvec_q32<Q5_0>(MV_PICK(MV_ROWS), a, aq, ad, ad, int(tg.y), sg, lane); }
kernel void mv_q5_1(MV_Q8_1) { matvec_q32<Q5_1>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_q8_0(MV_Q8_0) { matvec_q32<Q8_0>(MV_PICK(MV_ROWS), a, aq, ad, ad, int(tg.y), sg, lane); }
kernel void mv_iq4_nl(MV_Q8_0) { matvec_q32<IQ4_NL>(MV_PICK(MV_ROWS), a, aq, ad, ad, int(tg.y), sg, lane); }
kernel void mv_q2_k(MV_Q8_K) { matvec_k<Q2_K>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_q3_k(MV_Q8_K) { matvec_k<Q3_K>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_q4_k(MV_Q8_K) { matvec_k<Q4_K>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_q5_k(MV_Q8_K) { matvec_k<Q5_K>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_q6_k(MV_Q8_K) { matvec_k<Q6_K>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_iq4_xs(MV_Q8_K) { matvec_k<IQ4_XS>(MV_PICK(MV_ROWS), a, aq, ad, ax, int(tg.y), sg, lane); }
kernel void mv_f32(MV_F32ACT) { matvec_f<F32, 1>(MV_PICK(MV_ROWS), a, x, int(tg.y), sg, lane); }
kernel void mv_f16(MV_F32ACT) { matvec_f<F16, 1>(MV_PICK(MV_ROWS), a, x, int(tg.y), sg, lane); }
kernel void mv_bf16(MV_F32ACT) { matvec_f<BF16, 1>(MV_PICK(MV_ROWS), a, x, int(tg.y), sg, lane); }
kernel void mv8_f32(MV_F32ACT) { matvec_f<F32, 8>(MV_PICK(MV_ROWS), a, x, int(tg.y) * 8, sg, lane); }
kernel void mv8_f16(MV_F32ACT) { matvec_f<F16, 8>(MV_PICK(MV_ROWS), a, x, int(tg.y) * 8, sg, lane); }
kernel void mv8_bf16(MV_F32ACT) { matvec_f<BF16, 8>(MV_PICK(MV_ROWS), a, x, int(tg.y) * 8, sg, lane); }

// ---- Embedding rows: dst row i = row ids[i] of the table, dequantised ----
//
// Threadgroups (⌈cols / 256⌉, n) of 256. The ids come by setBytes, at
// most 1024 a dispatch.

struct EmbedArgs {
	int row_bytes, cols;
};

template <typename T>
static inline void embed(device const uchar *table, constant int *ids, device float *dst, constant EmbedArgs &a, uint3 tg, uint tid) {
	int e = int(tg.x) * 256 + int(tid), i = int(tg.y);
	if (e < a.cols) {
		dst[long(i) * a.cols + e] = T::elem(table + long(ids[i]) * a.row_bytes, e);
	}
}

#define EMBED_PARAMS                                                                                                             \
	device const uchar *table [[buffer(0)]], constant int *ids [[buffer(1)]], device float *dst [[buffer(2)]],            \
		constant EmbedArgs &a [[buffer(3)]], uint3 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]]

kernel void embed_q4_0(EMBED_PARAMS) { embed<Q4_0>(table, ids, dst, a, tg, tid); }
kernel void embed_q4_1(EMBED_PARAMS) { embed<Q4_1>(table, ids, dst, a, tg, tid); }
kernel void embed_q5_0(EMBED_PARAMS) { embed<Q5_0>(table, ids, dst, a, tg, tid); }
kernel void embed_q5_1(EMBED_PARAMS) { embed<Q5_1>(table, ids, dst, a, tg, tid); }
kernel void embed_q8_0(EMBED_PARAMS) { embed<Q8_0>(table, ids, dst, a, tg, tid); }
kernel void embed_iq4_nl(EMBED_PARAMS) { embed<IQ4_NL>(table, ids, dst, a, tg, tid); }
kernel void embed_q2_k(EMBED_PARAMS) { embed<Q2_K>(table, ids, dst, a, tg, tid); }
kernel void embed_q3_k(EMBED_PARAMS) { embed<Q3_K>(table, ids, dst, a, tg, tid); }
kernel void embed_q4_k(EMBED_PARAMS) { embed<Q4_K>(table, ids, dst, a, tg, tid); }
kernel void embed_q5_k(EMBED_PARAMS) { embed<Q5_K>(table, ids, dst, a, tg, tid); }
kernel void embed_q6_k(EMBED_PARAMS) { embed<Q6_K>(table, ids, dst, a, tg, tid); }
kernel void embed_iq4_xs(EMBED_PARAMS) { embed<IQ4_XS>(table, ids, dst, a, tg, tid); }
kernel void embed_f32(EMBED_PARAMS) { embed<F32>(table, ids, dst, a, tg, tid); }
kernel void embed_f16(EMBED_PARAMS) { embed<F16>(table, ids, dst, a, tg, tid); }
kernel void embed_bf16(EMBED_PARAMS) { embed<BF16>(table, ids, dst, a, tg, tid); }
