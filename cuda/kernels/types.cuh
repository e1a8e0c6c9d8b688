// types.cuh: the weight types: ggml's block layouts (gguf/quant), one
// element dequantised (embedding lookups), and one block's partial of a
// row · activation dot product, in the CPU backend's arithmetic.
//
// Quantised types (gguf/quant/dot.go): each block's integer sum is exact,
// turned into one float32 partial by the type's formula, every product
// rounded to float32. A type's LPB lanes share a block: lane s of the group
// does part s of the block (a 32-element sub-block for the K-quants), the
// group sums its integers exactly, and the group's first lane holds the
// partial.
#pragma once
#include "shim.cuh"

// scaled is the partial of a block with one scale each side.
DEV float scaled(i32 sumi, float dx, float dy) { return (float)sumi * (dx * dy); }

// kpartial is one K-quant block's partial: isum·(dx·dy) − summs·(dminx·dy).
DEV float kpartial(i32 isum, i32 summs, float dx, float dminx, float dy) {
	return (float)isum * (dx * dy) - (float)summs * (dminx * dy);
}

DEV i32 dot8(const u32 *w, const u32 *a) {
	i32 s = 0;
	for (int t = 0; t < 8; t++) {
		s = dp4a((i32)w[t], (i32)a[t], s);
	}
	return s;
}

DEV i32 sum_bytes(const u32 *a, int n) {
	i32 s = 0;
	for (int t = 0; t < n; t++) {
		s = dp4a(0x01010101, (i32)a[t], s);
	}
	return s;
}

// spread4 moves bit b of v (b < 4) to bit 4 of byte b.
DEV u32 spread4(u32 v) { return (v & 1) << 4 | (v & 2) << 11 | (v & 4) << 18 | (v & 8) << 25; }

// ---- 32-element types (Q8_0 / Q8_1 activations), one lane per block ----

// load_nibbles splits 16 bytes of packed quants: the low nibbles are
// elements 0-15 (words 0-3), the high ones 16-31 (words 4-7).
DEV void load_nibbles(const u8 *qs, u32 *w) {
	u32 q[4];
	ldw_a2<4>(qs, q);
	for (int t = 0; t < 4; t++) {
		w[t] = q[t] & 0x0f0f0f0fu;
		w[4 + t] = (q[t] >> 4) & 0x0f0f0f0fu;
	}
}

struct Q4_0 {
	enum { QK = 32, BYTES = 18, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		int j = e % 32;
		i32 q = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
		return (float)(q - 8) * ld_half(b);
	}
	// sumi and the partial for one activation row.
	DEV void load(const u8 *b, u32 *w) { load_nibbles(b + 2, w); }
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float) {
		i32 sumi = dot8(w, a) - 8 * sum_bytes(a, 8);
		return scaled(sumi, ld_half(b), da);
	}
};

struct Q4_1 {
	enum { QK = 32, BYTES = 20, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		int j = e % 32;
		i32 q = j < 16 ? (b[4 + j] & 0xf) : (b[4 + j - 16] >> 4);
		return (float)q * ld_half(b) + ld_half(b + 2);
	}
	DEV void load(const u8 *b, u32 *w) { load_nibbles(b + 4, w); }
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float sa) {
		return scaled(dot8(w, a), ld_half(b), da) + ld_half(b + 2) * sa;
	}
};

// Q5_0/Q5_1 fifth bits: bit j of qh for low nibble j, bit j+16 for high.
DEV void load_q5(const u8 *qsp, u32 qh, u32 *w) {
	u32 q[4];
	ldw_a2<4>(qsp, q);
	for (int t = 0; t < 4; t++) {
		w[t] = (q[t] & 0x0f0f0f0fu) | spread4((qh >> (4 * t)) & 0xf);
		w[4 + t] = ((q[t] >> 4) & 0x0f0f0f0fu) | spread4((qh >> (16 + 4 * t)) & 0xf);
	}
}

DEV i32 q5_elem(const u8 *qsp, u32 qh, int j) {
	return j < 16 ? (qsp[j] & 0xf) | ((qh >> j) << 4 & 0x10) : (qsp[j - 16] >> 4) | ((qh >> (j - 16 + 12)) & 0x10);
}

struct Q5_0 {
	enum { QK = 32, BYTES = 22, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		return (float)(q5_elem(b + 6, ld32_a2(b + 2), e % 32) - 16) * ld_half(b);
	}
	DEV void load(const u8 *b, u32 *w) { load_q5(b + 6, ld32_a2(b + 2), w); }
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float) {
		i32 sumi = dot8(w, a) - 16 * sum_bytes(a, 8);
		return scaled(sumi, ld_half(b), da);
	}
};

struct Q5_1 {
	enum { QK = 32, BYTES = 24, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		return (float)q5_elem(b + 8, ld32_a2(b + 4), e % 32) * ld_half(b) + ld_half(b + 2);
	}
	DEV void load(const u8 *b, u32 *w) { load_q5(b + 8, ld32_a2(b + 4), w); }
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float sa) {
		return scaled(dot8(w, a), ld_half(b), da) + ld_half(b + 2) * sa;
	}
};

struct Q8_0 {
	enum { QK = 32, BYTES = 34, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		return (float)(i8)b[2 + e % 32] * ld_half(b);
	}
	DEV void load(const u8 *b, u32 *w) { ldw_a2<8>(b + 2, w); }
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float) { return scaled(dot8(w, a), ld_half(b), da); }
};

// IQ4_NL: d | qs[16], the nibbles indexing a non-linear table.
CONSTANT const i8 iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

DEV i32 iq4_value(int nibble) { return iq4_values[nibble]; }

// iq4_word maps the four nibbles at bit offset sh of each byte of q to
// table values, as four signed bytes.
DEV u32 iq4_word(u32 q, int sh) {
	u32 w = 0;
	for (int k = 0; k < 4; k++) {
		w |= (u32)(u8)(i8)iq4_value((q >> (8 * k + sh)) & 0xf) << (8 * k);
	}
	return w;
}

struct IQ4_NL {
	enum { QK = 32, BYTES = 18, LPB = 1 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 32) * BYTES;
		int j = e % 32;
		return ld_half(b) * (float)iq4_value(j < 16 ? b[2 + j] & 0xf : b[2 + j - 16] >> 4);
	}
	DEV void load(const u8 *b, u32 *w) {
		u32 q[4];
		ldw_a2<4>(b + 2, q);
		for (int t = 0; t < 4; t++) {
			w[t] = iq4_word(q[t], 0);
			w[4 + t] = iq4_word(q[t], 4);
		}
	}
	DEV float partial(const u8 *b, const u32 *w, const u32 *a, float da, float) { return scaled(dot8(w, a), ld_half(b), da); }
};

// ---- K-quants (Q8_K activations): 256-element blocks, 8 lanes each ----
//
// Lane s of a block's group handles elements 32s … 32s+31 and returns its
// integer contributions to isum (Σ scale × Σ q·a) and summs (Σ min × bsum).

DEV void scale_min_k4(int j, const u8 *q, i32 &sc, i32 &m) {
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
template <bool Five>
struct K45 {
	enum { QK = 256, BYTES = Five ? 176 : 144, LPB = 8, QS = Five ? 48 : 16 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 256) * BYTES;
		int j = e % 256, c = j / 64, l = j % 64, s = j / 32;
		i32 sc, mn;
		scale_min_k4(s, b + 4, sc, mn);
		i32 q = l < 32 ? (b[QS + 32 * c + l] & 0xf) : (b[QS + 32 * c + l - 32] >> 4);
		if (Five) {
			q |= ((b[16 + l % 32] >> s) & 1) << 4;
		}
		float d1 = ld_half(b) * (float)sc, m1 = ld_half(b + 2) * (float)mn;
		return d1 * (float)q - m1;
	}
	DEV void load(const u8 *b, int s, u32 *w) {
		const u8 *q = b + QS + 32 * (s / 2);
		for (int t = 0; t < 8; t++) {
			u32 v = ld32(q + 4 * t);
			v = (s & 1) ? (v >> 4) & 0x0f0f0f0fu : v & 0x0f0f0f0fu;
			if (Five) {
				v |= ((ld32(b + 16 + 4 * t) >> s) & 0x01010101u) << 4;
			}
			w[t] = v;
		}
	}
	DEV void ints(const u8 *b, int s, const u32 *w, const u32 *a, const i32 *bsums, i32 &isum, i32 &summs) {
		i32 sc, mn;
		scale_min_k4(s, b + 4, sc, mn);
		isum = sc * dot8(w, a);
		summs = mn * (bsums[2 * s] + bsums[2 * s + 1]);
	}
	DEV float partial(const u8 *b, i32 isum, i32 summs, float dy) { return kpartial(isum, summs, ld_half(b), ld_half(b + 2), dy); }
};
typedef K45<false> Q4_K;
typedef K45<true> Q5_K;

// Q6_K: ql[128] | qh[64] | scales[16] (int8) | d. Lane s does quarter s%4
// of 128-chunk s/4.
struct Q6_K {
	enum { QK = 256, BYTES = 210, LPB = 8 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 256) * BYTES;
		int j = e % 256, c = j / 128, qt = (j % 128) / 32, l = j % 32;
		u8 lb = b[64 * c + (qt & 1) * 32 + l];
		i32 q = ((qt < 2 ? lb & 0xf : lb >> 4) | ((b[128 + 32 * c + l] >> (2 * qt)) & 3) << 4) - 32;
		float sc = (float)(i8)b[192 + 8 * c + 2 * qt + l / 16];
		return (ld_half(b + 208) * sc) * (float)q;
	}
	DEV void load(const u8 *b, int s, u32 *w) {
		int c = s / 4, qt = s % 4;
		u32 ql[8], qh[8];
		ldw_a2<8>(b + 64 * c + (qt & 1) * 32, ql);
		ldw_a2<8>(b + 128 + 32 * c, qh);
		for (int t = 0; t < 8; t++) {
			u32 lv = qt < 2 ? ql[t] & 0x0f0f0f0fu : (ql[t] >> 4) & 0x0f0f0f0fu;
			w[t] = lv | ((qh[t] >> (2 * qt)) & 0x03030303u) << 4;
		}
	}
	DEV void ints(const u8 *b, int s, const u32 *w, const u32 *a, const i32 *, i32 &isum, i32 &summs) {
		int c = s / 4, qt = s % 4;
		i32 lo = dot8(w, a) - 32 * sum_bytes(a, 8);
		i32 d1 = 0;
		for (int t = 0; t < 4; t++) {
			d1 = dp4a((i32)w[t], (i32)a[t], d1);
		}
		d1 -= 32 * sum_bytes(a, 4);
		i32 d2 = lo - d1;
		const i8 *sc = (const i8 *)(b + 192 + 8 * c + 2 * qt);
		isum = (i32)sc[0] * d1 + (i32)sc[1] * d2;
		summs = 0;
	}
	DEV float partial(const u8 *b, i32 isum, i32, float dy) { return kpartial(isum, 0, ld_half(b + 208), 0, dy); }
};

// Q2_K: scales[16] (min << 4 | scale) | qs[64] | d | dmin. Sixteen
// 16-element sub-blocks; lane s does sub-blocks 2s and 2s+1, whose 2-bit
// quants are bits 2·(s%4) of the 32 bytes at 16 + 32·(s/4).
struct Q2_K {
	enum { QK = 256, BYTES = 84, LPB = 8 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 256) * BYTES;
		int j = e % 256, c = j / 128, r = j % 128, sh = r / 32, half = (r % 32) / 16, l = r % 16;
		u8 sc = b[8 * c + 2 * sh + half];
		float dl = ld_half(b + 80) * (float)(sc & 0xf), ml = ld_half(b + 82) * (float)(sc >> 4);
		return dl * (float)((b[16 + 32 * c + 16 * half + l] >> (2 * sh)) & 3) - ml;
	}
	DEV void load(const u8 *b, int s, u32 *w) {
		const u8 *q = b + 16 + 32 * (s / 4);
		for (int t = 0; t < 8; t++) {
			w[t] = (ld32(q + 4 * t) >> (2 * (s % 4))) & 0x03030303u;
		}
	}
	DEV void ints(const u8 *b, int s, const u32 *w, const u32 *a, const i32 *bsums, i32 &isum, i32 &summs) {
		i32 d1 = 0, d2 = 0;
		for (int t = 0; t < 4; t++) {
			d1 = dp4a((i32)w[t], (i32)a[t], d1);
			d2 = dp4a((i32)w[4 + t], (i32)a[4 + t], d2);
		}
		u8 s1 = b[2 * s], s2 = b[2 * s + 1];
		isum = (s1 & 0xf) * d1 + (s2 & 0xf) * d2;
		summs = bsums[2 * s] * (s1 >> 4) + bsums[2 * s + 1] * (s2 >> 4);
	}
	DEV float partial(const u8 *b, i32 isum, i32 summs, float dy) { return kpartial(isum, summs, ld_half(b + 80), ld_half(b + 82), dy); }
};

// Q3_K: hmask[32] | qs[64] | scales[12] (6-bit, offset 32) | d. Lane s
// does sub-blocks 2s and 2s+1: 2-bit quants at bits 2·(s%4) of the 32
// bytes at 32 + 32·(s/4), less 4 where bit s of hmask is clear.
DEV i32 q3k_scale(const u8 *s, int j) {
	i32 lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
	i32 hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
	return (i32)(i8)(u8)(lo | hi << 4) - 32;
}

struct Q3_K {
	enum { QK = 256, BYTES = 110, LPB = 8 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 256) * BYTES;
		int j = e % 256, c = j / 128, r = j % 128, sh = r / 32, half = (r % 32) / 16, l = r % 16;
		float dl = ld_half(b + 108) * (float)q3k_scale(b + 96, 8 * c + 2 * sh + half);
		i32 v = (b[32 + 32 * c + 16 * half + l] >> (2 * sh)) & 3;
		if (!((b[16 * half + l] >> (4 * c + sh)) & 1)) {
			v -= 4;
		}
		return dl * (float)v;
	}
	DEV void load(const u8 *b, int s, u32 *w) {
		u32 q[8], hm[8];
		ldw_a2<8>(b + 32 + 32 * (s / 4), q);
		ldw_a2<8>(b, hm);
		for (int t = 0; t < 8; t++) {
			u32 v = (q[t] >> (2 * (s % 4))) & 0x03030303u;
			u32 h = (hm[t] >> s) & 0x01010101u;
			w[t] = v | h << 2; // the quant + 4 where the bit is set
		}
	}
	DEV void ints(const u8 *b, int s, const u32 *w, const u32 *a, const i32 *, i32 &isum, i32 &summs) {
		i32 d1 = 0, d2 = 0;
		for (int t = 0; t < 4; t++) {
			d1 = dp4a((i32)w[t], (i32)a[t], d1);
			d2 = dp4a((i32)w[4 + t], (i32)a[4 + t], d2);
		}
		d1 -= 4 * sum_bytes(a, 4);
		d2 -= 4 * sum_bytes(a + 4, 4);
		isum = q3k_scale(b + 96, 2 * s) * d1 + q3k_scale(b + 96, 2 * s + 1) * d2;
		summs = 0;
	}
	DEV float partial(const u8 *b, i32 isum, i32, float dy) { return kpartial(isum, 0, ld_half(b + 108), 0, dy); }
};

// IQ4_XS: d | scales_h (u16) | scales_l[4] | qs[128]. Lane s does
// sub-block s: 16 bytes of nibbles, low ones first.
DEV i32 iq4xs_scale(const u8 *b, int ib) {
	u32 sh = ld16(b + 2);
	return (i32)(((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | ((sh >> (2 * ib)) & 3) << 4) - 32;
}

struct IQ4_XS {
	enum { QK = 256, BYTES = 136, LPB = 8 };
	DEV float elem(const u8 *row, int e) {
		const u8 *b = row + (e / 256) * BYTES;
		int j = e % 256, ib = j / 32, k = j % 32;
		float dl = ld_half(b) * (float)iq4xs_scale(b, ib);
		u8 q = b[8 + 16 * ib + k % 16];
		return dl * (float)iq4_value(k < 16 ? q & 0xf : q >> 4);
	}
	DEV void load(const u8 *b, int s, u32 *w) {
		for (int t = 0; t < 4; t++) {
			u32 q = ld32(b + 8 + 16 * s + 4 * t);
			w[t] = iq4_word(q, 0);
			w[4 + t] = iq4_word(q, 4);
		}
	}
	DEV void ints(const u8 *b, int s, const u32 *w, const u32 *a, const i32 *, i32 &isum, i32 &summs) {
		isum = iq4xs_scale(b, s) * dot8(w, a);
		summs = 0;
	}
	DEV float partial(const u8 *b, i32 isum, i32, float dy) { return kpartial(isum, 0, ld_half(b), 0, dy); }
};

// ---- Float types: lane l accumulates elements l + 32k ----

struct F32 {
	enum { QK = 1, BYTES = 4 };
	DEV float elem(const u8 *row, int e) { return ((const float *)row)[e]; }
	DEV float act(float x) { return x; }
};

struct F16 {
	enum { QK = 1, BYTES = 2 };
	DEV float elem(const u8 *row, int e) { return half_to_float(((const u16 *)row)[e]); }
	DEV float act(float x) { return round_half(x); }
};

DEV u16 float_to_bf16(float f) {
	u32 u = bitcast<u32>(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (u16)((u >> 16) | 64);
	}
	return (u16)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

struct BF16 {
	enum { QK = 1, BYTES = 2 };
	DEV float elem(const u8 *row, int e) { return bitcast<float>((u32)((const u16 *)row)[e] << 16); }
	DEV float act(float x) { return bitcast<float>((u32)float_to_bf16(x) << 16); }
};
