// matvec.cuh: y = x · wᵀ for quantised and float weights, and embedding
// lookups.
//
// Four weight rows per 128-thread block: a warp per row, or, for 32-element
// types with rows of 128 blocks or more, the block's threads across all
// four (matvec_q32_block). Each row is dotted with R activation rows (R = 1
// for decode; 2 or 4 for a speculative window of that many rows or fewer;
// 8 for prefill and wider windows), so a weight block loaded once serves R
// tokens and a window of two does not pay for eight rows' registers and
// shuffles. A launch covers up to
// three matrices of one type and width that share the activation (Q, K and
// V; gate and up): grid = (Σ ceil(rows_m / 4), ceil(nx / R)), the blocks
// of matrix 0 first.
//
// The float32 arithmetic is the CPU backend's (gguf/quant/dot.go): block
// partials go to eight accumulators by block index mod 8, each added in
// block order, then folded by halving; float types accumulate element i in
// lane i mod 32 and fold the 32 lanes by halving. Here the accumulators are
// lanes: a block's partial is handed to lane (block mod 8) by a shuffle
// (or through shared memory), and the folding is shfl_down by 4, 2, 1 (or
// 16 … 1). So every output is the CPU's value, bit for bit.
#pragma once
#include "types.cuh"

#define MV_ROWS_PER_BLOCK 4

// Mat is the matrix a block works on: its weights, rows and output.
struct Mat {
	const u8 *w;
	float *y;
	int rows, block; // block: this block's index within the matrix
};

DEV Mat pick(const u8 *w0, const u8 *w1, const u8 *w2, int r0, int r1, int r2, float *y0, float *y1, float *y2) {
	int b = blockIdx.x, n0 = (r0 + MV_ROWS_PER_BLOCK - 1) / MV_ROWS_PER_BLOCK, n1 = (r1 + MV_ROWS_PER_BLOCK - 1) / MV_ROWS_PER_BLOCK;
	if (b < n0) {
		return Mat{w0, y0, r0, b};
	}
	if (b < n0 + n1) {
		return Mat{w1, y1, r1, b - n0};
	}
	return Mat{w2, y2, r2, b - n0 - n1};
}

// fold adds lane l+w into lane l for w = n/2 … 1 (the CPU's reduce); lane 0
// holds the result.
DEV float fold(float v, int n) {
	for (int w = n / 2; w >= 1; w /= 2) {
		v += shfl_down_f(v, w);
	}
	return v;
}

// chain adds the partials of the blocks this iteration covered (block i0+g
// in lane g·LPB) to the accumulator of their block index mod 8, held in
// lanes 0 … 7, in block order.
template <int LPB, int R>
DEV void chain(float *acc, const float *part, int i0, int nb) {
	const int BPI = WARP / LPB;
	int k = lane_id() & 7;
	if (BPI >= 8) {
		for (int j = 0; j < BPI / 8; j++) {
			int bi = k + 8 * j;
			UNROLL for (int r = 0; r < R; r++) {
				float v = shfl_idx_f(part[r], bi * LPB);
				if (i0 + bi < nb) {
					acc[r] += v;
				}
			}
		}
	} else {
		int off = k - (i0 & 7);
		bool ok = off >= 0 && off < BPI && i0 + off < nb;
		UNROLL for (int r = 0; r < R; r++) {
			float v = shfl_idx_f(part[r], ok ? off * LPB : 0);
			if (ok) {
				acc[r] += v;
			}
		}
	}
}

template <int R>
DEV void store_rows(float *y, int wrows, int row, int x0, int nx, const float *acc) {
	if (lane_id() == 0) {
		UNROLL for (int r = 0; r < R; r++) {
			if (x0 + r < nx) {
				y[(i64)(x0 + r) * wrows + row] = acc[r];
			}
		}
	}
}

// 32-element types, rows of fewer than 128 blocks: a warp per weight row,
// a lane per block.
template <class T, int R>
DEV void matvec_q32_warp(Mat m, int row_bytes, int cols, const i8 *aq, const float *ad, const float *as, int x0, int nx) {
	const u8 *w = m.w;
	float *y = m.y;
	int wrows = m.rows, row = m.block * MV_ROWS_PER_BLOCK + warp_id();
	if (row >= wrows) {
		return;
	}
	int lane = lane_id(), nb = cols / 32;
	const u8 *wr = w + (i64)row * row_bytes;
	float acc[R];
	UNROLL for (int r = 0; r < R; r++) {
		acc[r] = 0;
	}
	for (int i0 = 0; i0 < nb; i0 += WARP) {
		int i = i0 + lane;
		float part[R];
		UNROLL for (int r = 0; r < R; r++) {
			part[r] = 0;
		}
		if (i < nb) {
			const u8 *b = wr + (i64)i * T::BYTES;
			u32 wq[8];
			T::load(b, wq);
			UNROLL for (int r = 0; r < R; r++) {
				if (x0 + r < nx) {
					i64 xi = (i64)(x0 + r) * nb + i;
					u32 a[8];
					ld128x2(aq + xi * 32, a);
					part[r] = T::partial(b, wq, a, ad[xi], as ? as[xi] : 0.0f);
				}
			}
		}
		chain<1, R>(acc, part, i0, nb);
	}
	UNROLL for (int r = 0; r < R; r++) {
		acc[r] = fold(acc[r], 8);
	}
	store_rows<R>(y, wrows, row, x0, nx, acc);
}

// 32-element types, rows of 128 blocks or more: the block's 128 threads
// share its four weight rows. Thread t takes block column t (then t+128,
// …) of all four, so the activation blocks it loads serve four rows, and a
// row's blocks are spread over 128 threads rather than a warp's 32: a
// 2048-row matrix of 8192 columns took eight dependent passes a warp, now
// two (on an H200, 24.8 µs against 13.5 for eight activation rows). Each
// partial goes to shared memory; then thread k of each (row, activation
// row) octet adds that pass's partials of blocks k, k+8, … to its
// accumulator in block order, so the sum is the CPU's, as before. For
// narrower rows the warp kernel stays faster (fewer threads idle, no
// barrier), and a small model's steps are mostly those.
#define MV_SLOTS 128
template <class T, int R>
DEV void matvec_q32_block(Mat m, int row_bytes, int cols, const i8 *aq, const float *ad, const float *as, int x0, int nx) {
	// Part p of (weight row g, activation row r) is at (g·R + r)·STRIDE +
	// p: a stride of 136 words puts a warp's four octets of chain threads
	// in four different bank ranges.
	const int STRIDE = MV_SLOTS + 8, G = MV_ROWS_PER_BLOCK;
	SHARED float part[G * R * STRIDE];
	const int NCH = (G * R * 8 + MV_SLOTS - 1) / MV_SLOTS; // chains a thread adds
	int nb = cols / 32, t = threadIdx.x;
	int row0 = m.block * G, nrows = m.rows - row0;
	float acc[NCH];
	UNROLL for (int h = 0; h < NCH; h++) {
		acc[h] = 0;
	}
	for (int base = 0; base < nb; base += MV_SLOTS) {
		int i = base + t;
		if (i < nb) {
			const u8 *b[G];
			u32 wq[G][8];
			UNROLL for (int g = 0; g < G; g++) {
				if (g < nrows) {
					b[g] = m.w + (i64)(row0 + g) * row_bytes + (i64)i * T::BYTES;
					T::load(b[g], wq[g]);
				}
			}
			UNROLL for (int r = 0; r < R; r++) {
				if (x0 + r < nx) {
					i64 xi = (i64)(x0 + r) * nb + i;
					u32 a[8];
					ld128x2(aq + xi * 32, a);
					float da = ad[xi], sa = as ? as[xi] : 0.0f;
					UNROLL for (int g = 0; g < G; g++) {
						if (g < nrows) {
							part[(g * R + r) * STRIDE + t] = T::partial(b[g], wq[g], a, da, sa);
						}
					}
				}
			}
		}
		sync_threads();
		UNROLL for (int h = 0; h < NCH; h++) {
			int c = t + MV_SLOTS * h, k = c & 7;
			if (c < G * R * 8) {
				const float *p = part + (c >> 3) * STRIDE;
				for (int j = k; j < MV_SLOTS && base + j < nb; j += 8) {
					acc[h] += p[j];
				}
			}
		}
		sync_threads();
	}
	UNROLL for (int h = 0; h < NCH; h++) {
		int c = t + MV_SLOTS * h, g = c / (8 * R), r = (c >> 3) % R;
		float v = fold(acc[h], 8);
		if ((c & 7) == 0 && c < G * R * 8 && g < nrows && x0 + r < nx) {
			m.y[(i64)(x0 + r) * m.rows + row0 + g] = v;
		}
	}
}

// matvec_q32 picks by row width, which is uniform over the launch.
template <class T, int R>
DEV void matvec_q32(Mat m, int row_bytes, int cols, const i8 *aq, const float *ad, const float *as, int x0, int nx) {
	if (cols / 32 >= MV_SLOTS) {
		matvec_q32_block<T, R>(m, row_bytes, cols, aq, ad, as, x0, nx);
	} else {
		matvec_q32_warp<T, R>(m, row_bytes, cols, aq, ad, as, x0, nx);
	}
}

// K-quants: eight lanes per block, four blocks per warp step.
template <class T, int R>
DEV void matvec_k(Mat m, int row_bytes, int cols, const i8 *aq, const float *ad, const i32 *bsums, int x0, int nx) {
	const u8 *w = m.w;
	float *y = m.y;
	int wrows = m.rows, row = m.block * MV_ROWS_PER_BLOCK + warp_id();
	if (row >= wrows) {
		return;
	}
	const int LPB = T::LPB, BPI = WARP / LPB;
	int lane = lane_id(), nb = cols / 256;
	int g = lane / LPB, s = lane % LPB;
	const u8 *wr = w + (i64)row * row_bytes;
	float acc[R];
	UNROLL for (int r = 0; r < R; r++) {
		acc[r] = 0;
	}
	for (int i0 = 0; i0 < nb; i0 += BPI) {
		int i = i0 + g;
		i32 isum[R], summs[R];
		UNROLL for (int r = 0; r < R; r++) {
			isum[r] = summs[r] = 0;
		}
		const u8 *b = wr + (i64)i * T::BYTES;
		if (i < nb) {
			u32 wq[8];
			T::load(b, s, wq);
			UNROLL for (int r = 0; r < R; r++) {
				if (x0 + r < nx) {
					i64 xi = (i64)(x0 + r) * nb + i;
					u32 a[8];
					ld128x2(aq + xi * 256 + 32 * s, a);
					T::ints(b, s, wq, a, bsums + xi * 16, isum[r], summs[r]);
				}
			}
		}
		float part[R];
		UNROLL for (int r = 0; r < R; r++) {
			for (int m = 1; m < LPB; m <<= 1) {
				isum[r] += shfl_xor_i(isum[r], m);
				summs[r] += shfl_xor_i(summs[r], m);
			}
			part[r] = 0;
			if (i < nb && x0 + r < nx) {
				part[r] = T::partial(b, isum[r], summs[r], ad[(i64)(x0 + r) * nb + i]);
			}
		}
		chain<LPB, R>(acc, part, i0, nb);
	}
	UNROLL for (int r = 0; r < R; r++) {
		acc[r] = fold(acc[r], 8);
	}
	store_rows<R>(y, wrows, row, x0, nx, acc);
}

// Float types: element e of the row in lane e mod 32, the activation
// rounded to the weight's type as the CPU converts it.
template <class T, int R>
DEV void matvec_f(Mat m, int row_bytes, int cols, const float *x, int x0, int nx) {
	const u8 *w = m.w;
	float *y = m.y;
	int wrows = m.rows, row = m.block * MV_ROWS_PER_BLOCK + warp_id();
	if (row >= wrows) {
		return;
	}
	int lane = lane_id();
	const u8 *wr = w + (i64)row * row_bytes;
	float acc[R];
	UNROLL for (int r = 0; r < R; r++) {
		acc[r] = 0;
	}
	for (int e = lane; e < cols; e += WARP) {
		float wv = T::elem(wr, e);
		UNROLL for (int r = 0; r < R; r++) {
			if (x0 + r < nx) {
				acc[r] += wv * T::act(x[(i64)(x0 + r) * cols + e]);
			}
		}
	}
	UNROLL for (int r = 0; r < R; r++) {
		acc[r] = fold(acc[r], WARP);
	}
	store_rows<R>(y, wrows, row, x0, nx, acc);
}

// One signature for every matrix kernel: up to three matrices (weights,
// rows; a matrix of 0 rows is absent), their row bytes and width, the
// float activations (float types), the quantised ones (quants, scales,
// extra), the outputs and the batch.
#define MV_PARAMS                                                                                                  \
	const u8 *w0, const u8 *w1, const u8 *w2, int r0, int r1, int r2, int row_bytes, int cols, const float *x, \
		const i8 *aq, const float *ad, const void *ax, float *y0, float *y1, float *y2, int nx
#define MV_PICK pick(w0, w1, w2, r0, r1, r2, y0, y1, y2)

#define MV_Q32(name, T, R)                                                                       \
	KERNEL BOUNDS(128) void mv_##name##_##R(MV_PARAMS) {                                     \
		matvec_q32<T, R>(MV_PICK, row_bytes, cols, aq, ad, (const float *)ax, blockIdx.y * R, nx); \
	}
#define MV_K(name, T, R)                                                                     \
	KERNEL BOUNDS(128) void mv_##name##_##R(MV_PARAMS) {                                 \
		matvec_k<T, R>(MV_PICK, row_bytes, cols, aq, ad, (const i32 *)ax, blockIdx.y * R, nx); \
	}
#define MV_F(name, T, R)                                             \
	KERNEL BOUNDS(128) void mv_##name##_##R(MV_PARAMS) {         \
		matvec_f<T, R>(MV_PICK, row_bytes, cols, x, blockIdx.y * R, nx); \
	}

// ---- Gathered products (a mixture of experts) ----
//
// mvx_* multiply each (row, rank) pair p of a step by the expert the
// router chose for it, read from device memory: y row p = x row p / xdiv
// (xdiv = k: every rank of a row shares its input; 1: a row per pair) ·
// experts[sel[p]]ᵀ. The arithmetic is the matrix kernels' with one
// activation row (mv_*_1), so a pair's output is MatMul's bits.
// grid = (ceil(rows / 4), pairs), block 128.
#define MVX_PARAMS                                                                                            \
	const u64 *experts, int rows, int row_bytes, int cols, const float *x, const i8 *aq, const float *ad, \
		const void *ax, float *y, const float *sel, int xdiv

// mvx_mat is pair p's matrix and output, and the activation row it reads.
DEV Mat mvx_mat(const u64 *experts, int rows, float *y, const float *sel, int xdiv, i64 &xrow) {
	int p = blockIdx.y;
	xrow = p / xdiv;
	return Mat{(const u8 *)experts[(int)sel[p]], y + (i64)p * rows, rows, (int)blockIdx.x};
}

#define MVX_Q32(name, T)                                                                                       \
	KERNEL BOUNDS(128) void mvx_##name(MVX_PARAMS) {                                                       \
		i64 xr;                                                                                        \
		Mat m = mvx_mat(experts, rows, y, sel, xdiv, xr);                                              \
		i64 nb = cols / 32;                                                                            \
		const float *as = (const float *)ax;                                                           \
		matvec_q32<T, 1>(m, row_bytes, cols, aq + xr * cols, ad + xr * nb, as ? as + xr * nb : 0, 0, 1); \
	}
#define MVX_K(name, T)                                                                                              \
	KERNEL BOUNDS(128) void mvx_##name(MVX_PARAMS) {                                                            \
		i64 xr;                                                                                             \
		Mat m = mvx_mat(experts, rows, y, sel, xdiv, xr);                                                   \
		matvec_k<T, 1>(m, row_bytes, cols, aq + xr * cols, ad + xr * (cols / 256), (const i32 *)ax + xr * (cols / 16), 0, 1); \
	}
#define MVX_F(name, T)                                                        \
	KERNEL BOUNDS(128) void mvx_##name(MVX_PARAMS) {                      \
		i64 xr;                                                       \
		Mat m = mvx_mat(experts, rows, y, sel, xdiv, xr);             \
		matvec_f<T, 1>(m, row_bytes, cols, x + xr * cols, 0, 1);      \
	}

// Embedding rows: dst row i = row ids[i] of the table, dequantised.
// grid = (ceil(cols / 256), n), block 256.
template <class T>
DEV void embed(const u8 *table, int row_bytes, int cols, const i32 *ids, float *dst) {
	int e = blockIdx.x * 256 + threadIdx.x, i = blockIdx.y;
	if (e < cols) {
		dst[(i64)i * cols + e] = T::elem(table + (i64)ids[i] * row_bytes, e);
	}
}
#define EMBED(name, T)                                                                                    \
	KERNEL BOUNDS(256) void embed_##name(const u8 *table, int row_bytes, int cols, const i32 *ids, float *dst) { \
		embed<T>(table, row_bytes, cols, ids, dst);                                                  \
	}

#define QTYPE32(name, T) MV_Q32(name, T, 1) MV_Q32(name, T, 2) MV_Q32(name, T, 4) MV_Q32(name, T, 8) EMBED(name, T) MVX_Q32(name, T)
#define QTYPEK(name, T) MV_K(name, T, 1) MV_K(name, T, 2) MV_K(name, T, 4) MV_K(name, T, 8) EMBED(name, T) MVX_K(name, T)
#define FTYPE(name, T) MV_F(name, T, 1) MV_F(name, T, 2) MV_F(name, T, 4) MV_F(name, T, 8) EMBED(name, T) MVX_F(name, T)

QTYPE32(q4_0, Q4_0)
QTYPE32(q4_1, Q4_1)
QTYPE32(q5_0, Q5_0)
QTYPE32(q5_1, Q5_1)
QTYPE32(q8_0, Q8_0)
QTYPE32(iq4_nl, IQ4_NL)
QTYPEK(q2_k, Q2_K)
QTYPEK(q3_k, Q3_K)
QTYPEK(q4_k, Q4_K)
QTYPEK(q5_k, Q5_K)
QTYPEK(q6_k, Q6_K)
QTYPEK(iq4_xs, IQ4_XS)
FTYPE(f32, F32)
FTYPE(f16, F16)
FTYPE(bf16, BF16)
