package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// kvaluesIQ4NL is the IQ4_NL / IQ4_XS codebook (ggml-common.h kvalues_iq4nl).
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// kvaluesMXFP4 are the sixteen FP4 E2M1 values, doubled so they are
// integers (ggml-common.h kvalues_mxfp4); the block scale is halved to match.
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half is half the E8M0 scale e, 2^(e-128), as ggml_e8m0_to_fp32_half
// builds it: the two smallest are float32 subnormals.
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// Dequantize decodes len(dst) elements of type t from src, which must hold
// exactly that many. Results are bit-identical to ggml's dequantize_row_*:
// each product and sum is rounded to float32 as ggml's (non-FMA) code does.
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := checkRow(t, src, len(dst)); err != nil {
		return err
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		tab := fp16Table()
		for i := range dst {
			dst[i] = tab[le16(src[2*i:])]
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFP32(le16(src[2*i:]))
		}
	default:
		f, ok := dequantizers[t]
		if !ok {
			return fmt.Errorf("quant: cannot dequantise %s", t)
		}
		f(src, dst)
	}
	return nil
}

// dequantizers decode whole rows of the block types.
var dequantizers = map[Type]func(src []byte, dst []float32){
	Q4_0: dequantQ4_0, Q4_1: dequantQ4_1, Q5_0: dequantQ5_0, Q5_1: dequantQ5_1,
	Q8_0: dequantQ8_0, Q8_1: dequantQ8_1, Q2_K: dequantQ2_K, Q3_K: dequantQ3_K,
	Q4_K: dequantQ4_K, Q5_K: dequantQ5_K, Q6_K: dequantQ6_K, Q8_K: dequantQ8_K,
	IQ4_NL: dequantIQ4_NL, IQ4_XS: dequantIQ4_XS, MXFP4: dequantMXFP4,
}

// checkRow checks that b holds exactly n elements of t.
func checkRow(t Type, b []byte, n int) error {
	size, err := t.RowSize(n)
	if err != nil {
		return err
	}
	if len(b) != size {
		return fmt.Errorf("quant: %d elements of %s take %d bytes, have %d", n, t, size, len(b))
	}
	return nil
}

func dequantQ4_0(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[18]byte)(src[18*i:])
		y := (*[32]float32)(dst[32*i:])
		d := half(b[0:])
		for j := range 16 {
			y[j] = float32(int32(b[2+j]&0xf)-8) * d
			y[j+16] = float32(int32(b[2+j]>>4)-8) * d
		}
	}
}

func dequantQ4_1(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[20]byte)(src[20*i:])
		y := (*[32]float32)(dst[32*i:])
		d, m := half(b[0:]), half(b[2:])
		for j := range 16 {
			y[j] = float32(float32(b[4+j]&0xf)*d) + m
			y[j+16] = float32(float32(b[4+j]>>4)*d) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[22]byte)(src[22*i:])
		y := (*[32]float32)(dst[32*i:])
		d := half(b[0:])
		qh := binary.LittleEndian.Uint32(b[2:])
		for j := range 16 {
			lo, hi := q5Nibbles(b[6+j], qh, j)
			y[j] = float32(lo-16) * d
			y[j+16] = float32(hi-16) * d
		}
	}
}

func dequantQ5_1(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[24]byte)(src[24*i:])
		y := (*[32]float32)(dst[32*i:])
		d, m := half(b[0:]), half(b[2:])
		qh := binary.LittleEndian.Uint32(b[4:])
		for j := range 16 {
			lo, hi := q5Nibbles(b[8+j], qh, j)
			y[j] = float32(float32(lo)*d) + m
			y[j+16] = float32(float32(hi)*d) + m
		}
	}
}

func dequantQ8_0(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[34]byte)(src[34*i:])
		y := (*[32]float32)(dst[32*i:])
		d := half(b[0:])
		for j := range 32 {
			y[j] = float32(int8(b[2+j])) * d
		}
	}
}

func dequantQ8_1(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[36]byte)(src[36*i:])
		y := (*[32]float32)(dst[32*i:])
		d := half(b[0:])
		for j := range 32 {
			y[j] = float32(int8(b[4+j])) * d
		}
	}
}

// Q2_K block: scales[16] | qs[64] | d | dmin.
func dequantQ2_K(src []byte, dst []float32) {
	for i := range len(dst) / QK_K {
		b := (*[84]byte)(src[84*i:])
		y := (*[QK_K]float32)(dst[QK_K*i:])
		d, dmin := half(b[80:]), half(b[82:])
		is, o := 0, 0
		for n := 0; n < QK_K; n += 128 {
			q := b[16+n/4 : 16+n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					sc := b[is]
					is++
					dl, ml := d*float32(sc&0xf), float32(dmin*float32(sc>>4))
					for l := range 16 {
						y[o] = float32(dl*float32((q[16*half+l]>>shift)&3)) - ml
						o++
					}
				}
			}
		}
	}
}

// unpackQ3KScales expands Q3_K's twelve bytes of 6-bit scales to sixteen,
// still offset by 32.
func unpackQ3KScales(s []byte) [16]int8 {
	var out [16]int8
	for j := range 16 {
		var lo byte
		if j < 8 {
			lo = s[j] & 0xf
		} else {
			lo = s[j-8] >> 4
		}
		hi := (s[8+j%4] >> (2 * (j / 4))) & 3
		out[j] = int8(lo | hi<<4)
	}
	return out
}

// Q3_K block: hmask[32] | qs[64] | scales[12] | d.
func dequantQ3_K(src []byte, dst []float32) {
	for i := range len(dst) / QK_K {
		b := (*[110]byte)(src[110*i:])
		y := (*[QK_K]float32)(dst[QK_K*i:])
		dAll := half(b[108:])
		scales := unpackQ3KScales(b[96:108])
		hm := b[0:32]
		is, o := 0, 0
		m := byte(1)
		for n := 0; n < QK_K; n += 128 {
			q := b[32+n/4 : 32+n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					dl := dAll * float32(int32(scales[is])-32)
					is++
					for l := 16 * half; l < 16*half+16; l++ {
						v := int32((q[l] >> shift) & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						y[o] = dl * float32(v)
						o++
					}
				}
				m <<= 1
			}
		}
	}
}

// kScales unpacks the eight 6-bit scales and mins of a Q4_K/Q5_K block.
func kScales(q []byte) (sc, mn [8]uint8) {
	for j := range 8 {
		sc[j], mn[j] = scaleMinK4(j, q)
	}
	return sc, mn
}

// scaleMinK4 extracts the j-th 6-bit scale and min of Q4_K/Q5_K.
func scaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func dequantQ4_K(src []byte, dst []float32) { dequantK45(src, dst, 144, false) }
func dequantQ5_K(src []byte, dst []float32) { dequantK45(src, dst, 176, true) }

// dequantK45 decodes Q4_K (d | dmin | scales[12] | qs[128]) and, with five,
// Q5_K (the same with qh[32] before qs).
func dequantK45(src []byte, dst []float32, size int, five bool) {
	qsOff := 16
	if five {
		qsOff = 48
	}
	for i := range len(dst) / QK_K {
		b := src[size*i : size*i+size]
		y := (*[QK_K]float32)(dst[QK_K*i:])
		d, dmin := half(b[0:]), half(b[2:])
		sc, mn := kScales(b[4:16])
		for j := range 4 {
			d1, m1 := d*float32(sc[2*j]), float32(dmin*float32(mn[2*j]))
			d2, m2 := d*float32(sc[2*j+1]), float32(dmin*float32(mn[2*j+1]))
			q := (*[32]byte)(b[qsOff+32*j:])
			o := (*[64]float32)(y[64*j:])
			for l := range 32 {
				lo, hi := q[l]&0xf, q[l]>>4
				if five {
					lo |= (b[16+l] >> (2 * j) & 1) << 4
					hi |= (b[16+l] >> (2*j + 1) & 1) << 4
				}
				o[l] = float32(d1*float32(lo)) - m1
				o[32+l] = float32(d2*float32(hi)) - m2
			}
		}
	}
}

// Q6_K block: ql[128] | qh[64] | scales[16] (int8) | d.
func dequantQ6_K(src []byte, dst []float32) {
	for i := range len(dst) / QK_K {
		b := (*[210]byte)(src[210*i:])
		y := (*[QK_K]float32)(dst[QK_K*i:])
		d := half(b[208:])
		for n := range 2 {
			ql := b[64*n : 64*n+64]
			qh := b[128+32*n : 128+32*n+32]
			sc := b[192+8*n : 192+8*n+8]
			o := y[128*n : 128*n+128]
			for l := range 32 {
				is := l / 16
				q1 := int32(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				// ggml multiplies left to right: (d * scale) * q.
				o[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				o[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				o[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				o[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
		}
	}
}

// Q8_K block: d (float32) | qs[256] | bsums[16] (int16).
func dequantQ8_K(src []byte, dst []float32) {
	for i := range len(dst) / QK_K {
		b := (*[292]byte)(src[292*i:])
		y := (*[QK_K]float32)(dst[QK_K*i:])
		d := math.Float32frombits(binary.LittleEndian.Uint32(b[0:]))
		for j := range QK_K {
			y[j] = d * float32(int8(b[4+j]))
		}
	}
}

func dequantIQ4_NL(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[18]byte)(src[18*i:])
		y := (*[32]float32)(dst[32*i:])
		d := half(b[0:])
		for j := range 16 {
			y[j] = d * float32(kvaluesIQ4NL[b[2+j]&0xf])
			y[j+16] = d * float32(kvaluesIQ4NL[b[2+j]>>4])
		}
	}
}

// MXFP4: e (E8M0) | qs[16], low nibbles the first 16 elements.
func dequantMXFP4(src []byte, dst []float32) {
	for i := range len(dst) / 32 {
		b := (*[17]byte)(src[17*i:])
		y := (*[32]float32)(dst[32*i:])
		d := e8m0Half(b[0])
		for j := range 16 {
			y[j] = float32(kvaluesMXFP4[b[1+j]&0xf]) * d
			y[j+16] = float32(kvaluesMXFP4[b[1+j]>>4]) * d
		}
	}
}

// iq4xsScale is IQ4_XS's 6-bit scale of sub-block ib, offset by 32.
func iq4xsScale(b *[136]byte, ib int) int32 {
	sh := uint16(b[2]) | uint16(b[3])<<8
	return int32((b[4+ib/2]>>(4*(ib%2)))&0xf|byte(sh>>(2*ib)&3)<<4) - 32
}

// IQ4_XS block: d | scales_h (uint16) | scales_l[4] | qs[128].
func dequantIQ4_XS(src []byte, dst []float32) {
	for i := range len(dst) / QK_K {
		b := (*[136]byte)(src[136*i:])
		y := (*[QK_K]float32)(dst[QK_K*i:])
		d := half(b[0:])
		for ib := range 8 {
			dl := d * float32(iq4xsScale(b, ib))
			qs := b[8+16*ib : 8+16*ib+16]
			o := y[32*ib : 32*ib+32]
			for j := range 16 {
				o[j] = dl * float32(kvaluesIQ4NL[qs[j]&0xf])
				o[j+16] = dl * float32(kvaluesIQ4NL[qs[j]>>4])
			}
		}
	}
}
