// types.metal: the weight types — ggml's block layouts (gguf/quant), one
// element dequantised (embeddings), and a block's partial of a row ·
// activation dot product in the CPU backend's arithmetic.
//
// Quantised types (gguf/quant/dot.go): each block's integer sum is exact,
// turned into one float32 partial by the type's formula, every product
// rounded to float32. Each type gives that sum two ways: from packed words
// (load, sumi or ints: the mat-vec kernels, a lane per block or per
// 32-element sub-block) and element by element (ival: the simdgroup-matrix
// kernels, which multiply the integer values as floats — exact, every sum
// staying below 2^24).

// scaled is the partial of a block with one scale each side.
static inline float scaled(int sumi, float dx, float dy) { return float(sumi) * (dx * dy); }

// kpartial is one K-quant block's partial: isum·(dx·dy) − summs·(dminx·dy).
static inline float kpartial(int isum, int summs, float dx, float dminx, float dy) {
	return float(isum) * (dx * dy) - float(summs) * (dminx * dy);
}

static inline int dot8(thread const uint *w, device const uint *a) {
	int s = 0;
	for (int t = 0; t < 8; t++) {
		s = dp4a(int(w[t]), int(a[t]), s);
	}
	return s;
}

static inline int sum_bytes(device const uint *a, int n) {
	int s = 0;
	for (int t = 0; t < n; t++) {
		s = dp4a(0x01010101, int(a[t]), s);
	}
	return s;
}

// spread4 moves bit b of v (b < 4) to bit 4 of byte b.
static inline uint spread4(uint v) { return (v & 1) << 4 | (v & 2) << 11 | (v & 4) << 18 | (v & 8) << 25; }

// ---- 32-element types (Q8_0 / Q8_1 activations) ----

// load_nibbles splits 16 bytes of packed quants: the low nibbles are
// elements 0-15 (words 0-3), the high ones 16-31 (words 4-7).
static inline void load_nibbles(device const uchar *qs, thread uint *w) {
	for (int t = 0; t < 4; t++) {
		uint q = ld32_a2(qs + 4 * t);
		w[t] = q & 0x0f0f0f0fu;
		w[4 + t] = (q >> 4) & 0x0f0f0f0fu;
	}
}

static inline int nibble(device const uchar *qs, int j) { return j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4); }

struct Q4_0 {
	enum { QK = 32, BYTES = 18, Q81 = 0 };
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 32) * BYTES;
		return float(nibble(b + 2, e % 32) - 8) * ld_half(b);
	}
	static void load(device const uchar *b, thread uint *w) { load_nibbles(b + 2, w); }
	static int sumi(thread const uint *w, device const uint *a) { return dot8(w, a) - 8 * sum_bytes(a, 8); }
	static int ival(device const uchar *b, int j) { return nibble(b + 2, j) - 8; }
	static float partial(device const uchar *b, int sumi, float da, float) { return scaled(sumi, ld_half(b), da); }
};

struct Q4_1 {
	enum { QK = 32, BYTES = 20, Q81 = 1 };
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 32) * BYTES;
		return float(nibble(b + 4, e % 32)) * ld_half(b) + ld_half(b + 2);
	}
	static void load(device const uchar *b, thread uint *w) { load_nibbles(b + 4, w); }
	static int sumi(thread const uint *w, device const uint *a) { return dot8(w, a); }
	static int ival(device const uchar *b, int j) { return nibble(b + 4, j); }
	static float partial(device const uchar *b, int sumi, float da, float sa) { return scaled(sumi, ld_half(b), da) + ld_half(b + 2) * sa; }
};

// Q5_0/Q5_1 fifth bits: bit j of qh for low nibble j, bit j+16 for high.
static inline void load_q5(device const uchar *qsp, uint qh, thread uint *w) {
	for (int t = 0; t < 4; t++) {
		uint q = ld32_a2(qsp + 4 * t);
		w[t] = (q & 0x0f0f0f0fu) | spread4((qh >> (4 * t)) & 0xf);
		w[4 + t] = ((q >> 4) & 0x0f0f0f0fu) | spread4((qh >> (16 + 4 * t)) & 0xf);
	}
}

static inline int q5_elem(device const uchar *qsp, uint qh, int j) {
	return j < 16 ? (qsp[j] & 0xf) | ((qh >> j) << 4 & 0x10) : (qsp[j - 16] >> 4) | ((qh >> (j - 16 + 12)) & 0x10);
}

struct Q5_0 {
	enum { QK = 32, BYTES = 22, Q81 = 0 };
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 32) * BYTES;
		return float(q5_elem(b + 6, ld32_a2(b + 2), e % 32) - 16) * ld_half(b);
	}
	static void load(device const uchar *b, thread uint *w) { load_q5(b + 6, ld32_a2(b + 2), w); }
	static int sumi(thread const uint *w, device const uint *a) { return dot8(w, a) - 16 * sum_bytes(a, 8); }
	static int ival(device const uchar *b, int j) { return q5_elem(b + 6, ld32_a2(b + 2), j) - 16; }
	static float partial(device const uchar *b, int sumi, float da, float) { return scaled(sumi, ld_half(b), da); }
};

struct Q5_1 {
	enum { QK = 32, BYTES = 24, Q81 = 1 };
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 32) * BYTES;
		return float(q5_elem(b + 8, ld32_a2(b + 4), e % 32)) * ld_half(b) + ld_half(b + 2);
	}
	static void load(device const uchar *b, thread uint *w) { load_q5(b + 8, ld32_a2(b + 4), w); }
	static int sumi(thread const uint *w, device const uint *a) { return dot8(w, a); }
	static int ival(device const uchar *b, int j) { return q5_elem(b + 8, ld32_a2(b + 4), j); }
	static float partial(device const uchar *b, int sumi, float da, float sa) { return scaled(sumi, ld_half(b), da) + ld_half(b + 2) * sa; }
};

struct Q8_0 {
	enum { QK = 32, BYTES = 34, Q81 = 0 };
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 32) * BYTES;
		return float(char(b[2 + e % 32])) * ld_half(b);
	}
	static void load(device const uchar *b, thread uint *w) {
		for (int t = 0; t < 8; t++) {
			w[t] = ld32_a2(b + 2 + 4 * t);
		}
	}
	static int sumi(thread const uint *w, device const uint *a) { return dot8(w, a); }
	static int ival(device const uchar *b, int j) { return int(char(b[2 + j])); }
	static float partial(device const uchar *b, int sumi, float da, float) { return scaled(sumi, ld_half(b), da); }
};

// IQ4_NL: d | qs[16], the nibbles indexing a non-linear table.
constant char iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline int iq4_value(int nibble) { return iq4_values[nibble]; }

// iq4_word maps the four nibbles at bit offset sh of each byte of q to
// table values, as four signed bytes.
static inline uint iq4_word(uint q, int sh) {
	uint w = 0;
	for (int k = 0; k < 4; k++) {
		w |= uint(uchar(char(iq4_value((q >> (8 * k + sh)) & 0xf)))) << (8 * k);
	}
	return w;
}

struct IQ4_NL {
	enum { QK = 32, BYTES = 18, Q81 = 0 };
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 32) * BYTES;
		return ld_half(b) * float(iq4_value(nibble(b + 2, e % 32)));
	}
	static void load(device const uchar *b, thread uint *w) {
		for (int t = 0; t < 4; t++) {
			uint q = ld32_a2(b + 2 + 4 * t);
			w[t] = iq4_word(q, 0);
			w[4 + t] = iq4_word(q, 4);
		}
	}
	static int sumi(thread const uint *w, device const uint *a) { return dot8(w, a); }
	static int ival(device const uchar *b, int j) { return iq4_value(nibble(b + 2, j)); }
	static float partial(device const uchar *b, int sumi, float da, float) { return scaled(sumi, ld_half(b), da); }
};

// ---- K-quants (Q8_K activations): 256-element blocks ----
//
// Sub-block s (0 … 7) is elements 32s … 32s+31. The mat-vec kernels give
// each sub-block a lane, which returns its integer contributions to isum
// (Σ scale × Σ q·a) and summs (Σ min × bsum); the matrix kernels compute
// each sub-block's two 16-element sums d1, d2 and combine them in sub.

static inline void scale_min_k4(int j, device const uchar *q, thread int &sc, thread int &m) {
	if (j < 4) {
		sc = q[j] & 63;
		m = q[j + 4] & 63;
	} else {
		sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

// Q4_K: d | dmin | scales[12] | qs[128]; Q5_K: the same with qh[32] before
// qs.
template <int Five>
struct K45 {
	enum { QK = 256, BYTES = Five ? 176 : 144, QS = Five ? 48 : 16 };
	static int ival(device const uchar *b, int j) {
		int c = j / 64, l = j % 64, s = j / 32;
		int q = l < 32 ? (b[QS + 32 * c + l] & 0xf) : (b[QS + 32 * c + l - 32] >> 4);
		if (Five) {
			q |= ((b[16 + l % 32] >> s) & 1) << 4;
		}
		return q;
	}
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 256) * BYTES;
		int j = e % 256;
		int sc, mn;
		scale_min_k4(j / 32, b + 4, sc, mn);
		float d1 = ld_half(b) * float(sc), m1 = ld_half(b + 2) * float(mn);
		return d1 * float(ival(b, j)) - m1;
	}
	static void load(device const uchar *b, int s, thread uint *w) {
		device const uchar *q = b + QS + 32 * (s / 2);
		for (int t = 0; t < 8; t++) {
			uint v = ld32(q + 4 * t);
			v = (s & 1) ? (v >> 4) & 0x0f0f0f0fu : v & 0x0f0f0f0fu;
			if (Five) {
				v |= ((ld32(b + 16 + 4 * t) >> s) & 0x01010101u) << 4;
			}
			w[t] = v;
		}
	}
	static void ints(device const uchar *b, int s, thread const uint *w, device const uint *a, device const int *bsums, thread int &isum,
			 thread int &summs) {
		int sc, mn;
		scale_min_k4(s, b + 4, sc, mn);
		isum = sc * dot8(w, a);
		summs = mn * (bsums[2 * s] + bsums[2 * s + 1]);
	}
	static void sub(device const uchar *b, int s, int d1, int d2, device const int *bsums, thread int &isum, thread int &summs) {
		int sc, mn;
		scale_min_k4(s, b + 4, sc, mn);
		isum += sc * (d1 + d2);
		summs += mn * (bsums[2 * s] + bsums[2 * s + 1]);
	}
	static float partial(device const uchar *b, int isum, int summs, float dy) { return kpartial(isum, summs, ld_half(b), ld_half(b + 2), dy); }
};
typedef K45<0> Q4_K;
typedef K45<1> Q5_K;

// Q6_K: ql[128] | qh[64] | scales[16] (int8) | d. Sub-block s is quarter
// s%4 of 128-chunk s/4.
struct Q6_K {
	enum { QK = 256, BYTES = 210 };
	static int ival(device const uchar *b, int j) {
		int c = j / 128, qt = (j % 128) / 32, l = j % 32;
		uchar lb = b[64 * c + (qt & 1) * 32 + l];
		return ((qt < 2 ? lb & 0xf : lb >> 4) | ((b[128 + 32 * c + l] >> (2 * qt)) & 3) << 4) - 32;
	}
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 256) * BYTES;
		int j = e % 256, c = j / 128, qt = (j % 128) / 32, l = j % 32;
		float sc = float(char(b[192 + 8 * c + 2 * qt + l / 16]));
		return (ld_half(b + 208) * sc) * float(ival(b, j));
	}
	static void load(device const uchar *b, int s, thread uint *w) {
		int c = s / 4, qt = s % 4;
		device const uchar *ql = b + 64 * c + (qt & 1) * 32, *qh = b + 128 + 32 * c;
		for (int t = 0; t < 8; t++) {
			uint lv = ld32_a2(ql + 4 * t);
			lv = qt < 2 ? lv & 0x0f0f0f0fu : (lv >> 4) & 0x0f0f0f0fu;
			w[t] = lv | ((ld32_a2(qh + 4 * t) >> (2 * qt)) & 0x03030303u) << 4;
		}
	}
	static void ints(device const uchar *b, int s, thread const uint *w, device const uint *a, device const int *, thread int &isum,
			 thread int &summs) {
		int lo = dot8(w, a) - 32 * sum_bytes(a, 8);
		int d1 = 0;
		for (int t = 0; t < 4; t++) {
			d1 = dp4a(int(w[t]), int(a[t]), d1);
		}
		d1 -= 32 * sum_bytes(a, 4);
		int d2 = lo - d1;
		device const char *sc = (device const char *)(b + 192 + 2 * s);
		isum = int(sc[0]) * d1 + int(sc[1]) * d2;
		summs = 0;
	}
	static void sub(device const uchar *b, int s, int d1, int d2, device const int *, thread int &isum, thread int &) {
		device const char *sc = (device const char *)(b + 192 + 2 * s);
		isum += int(sc[0]) * d1 + int(sc[1]) * d2;
	}
	static float partial(device const uchar *b, int isum, int, float dy) { return kpartial(isum, 0, ld_half(b + 208), 0, dy); }
};

// Q2_K: scales[16] (min << 4 | scale) | qs[64] | d | dmin. Sub-block s's
// 2-bit quants are bits 2·(s%4) of the 32 bytes at 16 + 32·(s/4).
struct Q2_K {
	enum { QK = 256, BYTES = 84 };
	static int ival(device const uchar *b, int j) {
		int s = j / 32, k = j % 32;
		return (b[16 + 32 * (s / 4) + k] >> (2 * (s % 4))) & 3;
	}
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 256) * BYTES;
		int j = e % 256;
		uchar sc = b[j / 16];
		float dl = ld_half(b + 80) * float(sc & 0xf), ml = ld_half(b + 82) * float(sc >> 4);
		return dl * float(ival(b, j)) - ml;
	}
	static void load(device const uchar *b, int s, thread uint *w) {
		device const uchar *q = b + 16 + 32 * (s / 4);
		for (int t = 0; t < 8; t++) {
			w[t] = (ld32(q + 4 * t) >> (2 * (s % 4))) & 0x03030303u;
		}
	}
	static void ints(device const uchar *b, int s, thread const uint *w, device const uint *a, device const int *bsums, thread int &isum,
			 thread int &summs) {
		int d1 = 0, d2 = 0;
		for (int t = 0; t < 4; t++) {
			d1 = dp4a(int(w[t]), int(a[t]), d1);
			d2 = dp4a(int(w[4 + t]), int(a[4 + t]), d2);
		}
		isum = 0;
		summs = 0;
		sub(b, s, d1, d2, bsums, isum, summs);
	}
	static void sub(device const uchar *b, int s, int d1, int d2, device const int *bsums, thread int &isum, thread int &summs) {
		uchar s1 = b[2 * s], s2 = b[2 * s + 1];
		isum += (s1 & 0xf) * d1 + (s2 & 0xf) * d2;
		summs += bsums[2 * s] * (s1 >> 4) + bsums[2 * s + 1] * (s2 >> 4);
	}
	static float partial(device const uchar *b, int isum, int summs, float dy) { return kpartial(isum, summs, ld_half(b + 80), ld_half(b + 82), dy); }
};

// Q3_K: hmask[32] | qs[64] | scales[12] (6-bit, offset 32) | d. Sub-block
// s's 2-bit quants are bits 2·(s%4) of the 32 bytes at 32 + 32·(s/4), less
// 4 where bit s of hmask is clear.
static inline int q3k_scale(device const uchar *s, int j) {
	int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
	int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
	return int(char(uchar(lo | hi << 4))) - 32;
}

struct Q3_K {
	enum { QK = 256, BYTES = 110 };
	static int ival(device const uchar *b, int j) {
		int s = j / 32, k = j % 32;
		int v = (b[32 + 32 * (s / 4) + k] >> (2 * (s % 4))) & 3;
		return ((b[k] >> s) & 1) ? v : v - 4;
	}
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 256) * BYTES;
		int j = e % 256;
		return (ld_half(b + 108) * float(q3k_scale(b + 96, j / 16))) * float(ival(b, j));
	}
	static void load(device const uchar *b, int s, thread uint *w) {
		device const uchar *q = b + 32 + 32 * (s / 4);
		for (int t = 0; t < 8; t++) {
			uint v = (ld32_a2(q + 4 * t) >> (2 * (s % 4))) & 0x03030303u;
			uint h = (ld32_a2(b + 4 * t) >> s) & 0x01010101u;
			w[t] = v | h << 2; // the quant + 4 where the bit is set
		}
	}
	static void ints(device const uchar *b, int s, thread const uint *w, device const uint *a, device const int *bsums, thread int &isum,
			 thread int &summs) {
		int d1 = 0, d2 = 0;
		for (int t = 0; t < 4; t++) {
			d1 = dp4a(int(w[t]), int(a[t]), d1);
			d2 = dp4a(int(w[4 + t]), int(a[4 + t]), d2);
		}
		d1 -= 4 * sum_bytes(a, 4);
		d2 -= 4 * sum_bytes(a + 4, 4);
		isum = 0;
		summs = 0;
		sub(b, s, d1, d2, bsums, isum, summs);
	}
	static void sub(device const uchar *b, int s, int d1, int d2, device const int *, thread int &isum, thread int &) {
		isum += q3k_scale(b + 96, 2 * s) * d1 + q3k_scale(b + 96, 2 * s + 1) * d2;
	}
	static float partial(device const uchar *b, int isum, int, float dy) { return kpartial(isum, 0, ld_half(b + 108), 0, dy); }
};

// IQ4_XS: d | scales_h (u16) | scales_l[4] | qs[128]. Sub-block s is 16
// bytes of nibbles, low ones first.
static inline int iq4xs_scale(device const uchar *b, int ib) {
	uint sh = ld16(b + 2);
	return int(((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | ((sh >> (2 * ib)) & 3) << 4) - 32;
}

struct IQ4_XS {
	enum { QK = 256, BYTES = 136 };
	static int ival(device const uchar *b, int j) {
		int s = j / 32, k = j % 32;
		uchar q = b[8 + 16 * s + k % 16];
		return iq4_value(k < 16 ? q & 0xf : q >> 4);
	}
	static float elem(device const uchar *row, int e) {
		device const uchar *b = row + (e / 256) * BYTES;
		int j = e % 256;
		return (ld_half(b) * float(iq4xs_scale(b, j / 32))) * float(ival(b, j));
	}
	static void load(device const uchar *b, int s, thread uint *w) {
		for (int t = 0; t < 4; t++) {
			uint q = ld32(b + 8 + 16 * s + 4 * t);
			w[t] = iq4_word(q, 0);
			w[4 + t] = iq4_word(q, 4);
		}
	}
	static void ints(device const uchar *b, int s, thread const uint *w, device const uint *a, device const int *, thread int &isum,
			 thread int &summs) {
		isum = iq4xs_scale(b, s) * dot8(w, a);
		summs = 0;
	}
	static void sub(device const uchar *b, int s, int d1, int d2, device const int *, thread int &isum, thread int &) {
		isum += iq4xs_scale(b, s) * (d1 + d2);
	}
	static float partial(device const uchar *b, int isum, int, float dy) { return kpartial(isum, 0, ld_half(b), 0, dy); }
};

// ---- Float types: lane l accumulates elements l + 32k ----

struct F32 {
	static float elem(device const uchar *row, int e) { return ((device const float *)row)[e]; }
	static float act(float x) { return x; }
};

struct F16 {
	static float elem(device const uchar *row, int e) { return half_to_float(((device const ushort *)row)[e]); }
	static float act(float x) { return round_half(x); }
};

static inline ushort float_to_bf16(float f) {
	uint u = as_type<uint>(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return ushort((u >> 16) | 64);
	}
	return ushort((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

struct BF16 {
	static float elem(device const uchar *row, int e) { return as_type<float>(uint(((device const ushort *)row)[e]) << 16); }
	static float act(float x) { return as_type<float>(uint(float_to_bf16(x)) << 16); }
};
