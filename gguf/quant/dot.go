package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Summation order
//
// Every dot product here fixes its floating-point evaluation order so that a
// SIMD implementation can reproduce the pure-Go result bit for bit:
//
//   - Quantised types: each block (32 elements; 256 for the K-quants and
//     IQ4_XS) yields one exact int32 sum (for K-quants, Σ over sub-blocks of
//     scale × Σ q·a, and Σ bsums × min), turned into one float32 partial by
//     the per-type formula in its function, every product rounded to
//     float32 (no FMA). Partial b is added to accumulator lane b mod 8.
//   - F32, F16, BF16: element i's product, rounded to float32, is added to
//     lane i mod 32. (An F16×F16 product is exact in float32, so there a
//     fused multiply-add gives the same result; a BF16 one can underflow.)
//   - The lanes are then reduced by halving: lane l += lane l+w for
//     w = L/2, L/4, ..., 1; the result is lane 0.
//
// The assembly kernels (dot_simd.go; AVX2 on amd64, NEON on arm64) keep
// this order: their integer sums are exact, they scale and add with the
// same float32 operations into the same lanes, and the Go kernels here do
// any tail and the reduction. So results are the same bits with or without
// them (simd_test.go holds them to it).
//
// ggml sums in other orders (and they differ between its own CPU paths), so
// results agree with llama.cpp to within float32 rounding, not bit for bit.

// dotFunc dots n elements of a weight row with an activation.
type dotFunc func(row, act []byte, n int) float32

var dots = map[Type]dotFunc{
	F32:    dotF32,
	F16:    dotF16,
	BF16:   dotBF16,
	Q4_0:   dotQ4_0,
	Q4_1:   dotQ4_1,
	Q5_0:   dotQ5_0,
	Q5_1:   dotQ5_1,
	Q8_0:   dotQ8_0,
	IQ4_NL: dotIQ4_NL,
	MXFP4:  dotMXFP4,
	Q2_K:   dotQ2_K,
	Q3_K:   dotQ3_K,
	Q4_K:   dotQ4_K,
	Q5_K:   dotQ5_K,
	Q6_K:   dotQ6_K,
	IQ4_XS: dotIQ4_XS,
}

// VecDot returns the dot product of row, a.N elements of weight type t,
// with the activation a. It panics if a is not in t's VecDotType or row is
// not exactly one row: both are programming errors, not data errors.
func VecDot(t Type, row []byte, a *Activation) float32 {
	f, rs := kernel(t, a)
	if len(row) != rs {
		panic(fmt.Sprintf("quant: VecDot: %d-element %s row is %d bytes, got %d", a.N, t, rs, len(row)))
	}
	return f(row, a.Data, a.N)
}

// MatVec computes out[r] = VecDot(t, row r of w, a) for r < len(out); w
// holds len(out) consecutive rows.
func MatVec(t Type, w []byte, a *Activation, out []float32) {
	_, rs := kernel(t, a)
	if len(w) != rs*len(out) {
		panic(fmt.Sprintf("quant: MatVec: %d rows of %d-element %s are %d bytes, got %d", len(out), a.N, t, rs*len(out), len(w)))
	}
	MatVecRows(t, w, rs, a, out)
}

// MatVecRows is MatVec over rows that start stride bytes apart in w (at
// least a row's bytes): row r is w[r·stride:][:row size].
func MatVecRows(t Type, w []byte, stride int, a *Activation, out []float32) {
	f, rs := kernel(t, a)
	if len(out) == 0 {
		return
	}
	if stride < rs || len(w) < (len(out)-1)*stride+rs {
		panic(fmt.Sprintf("quant: MatVecRows: %d rows of %d-element %s, %d bytes apart, in %d bytes", len(out), a.N, t, stride, len(w)))
	}
	if useSIMD && rowsSIMD(t, w, stride, a, out, false) {
		return
	}
	for r := range out {
		out[r] = f(w[r*stride:r*stride+rs], a.Data, a.N)
	}
}

// kernelInfo is what VecDot and MatVec need to know of a weight type,
// kept in an array by type id (not maps): the CPU backend calls MatVec
// once per tile of a few rows.
type kernelInfo struct {
	pure, asm      dotFunc
	act            Type
	wBlock, wBytes int // the weight type's elements and bytes per block
	aBlock, aBytes int // the activation type's
}

var kernels = func() (k [64]kernelInfo) {
	for t, f := range dots {
		at, _ := VecDotType(t)
		k[t] = kernelInfo{pure: f, asm: simdDots[t], act: at,
			wBlock: t.BlockSize(), wBytes: t.TypeSize(), aBlock: at.BlockSize(), aBytes: at.TypeSize()}
	}
	return k
}()

// kernel checks a against weight type t and returns the kernel to run and
// the bytes of one row of t.
func kernel(t Type, a *Activation) (dotFunc, int) {
	var k kernelInfo
	if int(t) < len(kernels) {
		k = kernels[t]
	}
	if k.pure == nil || a.Type != k.act {
		panic(fmt.Sprintf("quant: no dot product of %s with a %s activation", t, a.Type))
	}
	if a.N < 0 || a.N%k.aBlock != 0 || a.N%k.wBlock != 0 || len(a.Data) != a.N/k.aBlock*k.aBytes {
		panic(fmt.Sprintf("quant: %d-element %s activation for %s weights is %d bytes", a.N, a.Type, t, len(a.Data)))
	}
	if useSIMD && k.asm != nil {
		return k.asm, a.N / k.wBlock * k.wBytes
	}
	return k.pure, a.N / k.wBlock * k.wBytes
}

// reduce folds accumulator lanes by halving: lane l += lane l+w for w =
// len/2, len/4, ..., 1 (len(acc) is 8 or 32); the result is lane 0.
// Unrolled for the two lengths: it runs once per row.
func reduce(acc []float32) float32 {
	if len(acc) == 32 {
		a := (*[32]float32)(acc)
		for l := range 16 {
			a[l] += a[l+16]
		}
		for l := range 8 {
			a[l] += a[l+8]
		}
	}
	a := (*[8]float32)(acc)
	a0, a1, a2, a3 := a[0]+a[4], a[1]+a[5], a[2]+a[6], a[3]+a[7]
	a0, a1 = a0+a2, a1+a3
	return a0 + a1
}

// The float kernels are split in two: elemsX adds the products of elements
// [from, to) to their lanes, and dotX runs it over the row and reduces. A
// SIMD kernel does the leading multiple of its width and hands the rest to
// the same elemsX, so tails and reduction are shared by construction.

func dotF32(row, act []byte, n int) float32 {
	var acc [32]float32
	elemsF32(&acc, row, act, 0, n)
	return reduce(acc[:])
}

func elemsF32(acc *[32]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x := math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(act[4*i:]))
		acc[i&31] += float32(x * y)
	}
}

func dotF16(row, act []byte, n int) float32 {
	var acc [32]float32
	elemsF16(&acc, row, act, 0, n)
	return reduce(acc[:])
}

func elemsF16(acc *[32]float32, row, act []byte, from, to int) {
	tab := fp16Table()
	row, act = row[:2*to], act[:2*to]
	for i := from; i < to; i++ {
		x, y := tab[le16(row[2*i:])], tab[le16(act[2*i:])]
		acc[i&31] += float32(x * y)
	}
}

func dotBF16(row, act []byte, n int) float32 {
	var acc [32]float32
	elemsBF16(&acc, row, act, 0, n)
	return reduce(acc[:])
}

func elemsBF16(acc *[32]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		acc[i&31] += float32(BF16ToFP32(le16(row[2*i:])) * BF16ToFP32(le16(act[2*i:])))
	}
}

// i8 reads byte j of b as a signed int32.
func i8(b []byte, j int) int32 { return int32(int8(b[j])) }

// scaled is the partial of a block with one scale each side: sumi × (dx·dy),
// the scales fp16 at x[0:2] and y[0:2].
func scaled(sumi int32, x, y []byte) float32 {
	return float32(float32(sumi) * float32(half(x)*half(y)))
}

// scaledMin adds the Q4_1/Q5_1 min term: sumi × (dx·dy) + mx·sy, where the
// Q8_1 activation stores sy = dy·Σqy at y[2:4].
func scaledMin(sumi int32, x, y []byte) float32 {
	return scaled(sumi, x, y) + float32(half(x[2:])*half(y[2:]))
}

func dotQ4_0(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksQ4_0(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

func blocksQ4_0(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[18]byte)(row[18*i:]), (*[34]byte)(act[34*i:])
		var sumi int32
		for j := range 16 {
			sumi += (int32(x[2+j]&0xf)-8)*i8(y[:], 2+j) + (int32(x[2+j]>>4)-8)*i8(y[:], 18+j)
		}
		acc[i&7] += scaled(sumi, x[:], y[:])
	}
}

func dotQ4_1(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksQ4_1(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

func blocksQ4_1(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[20]byte)(row[20*i:]), (*[36]byte)(act[36*i:])
		var sumi int32
		for j := range 16 {
			sumi += int32(x[4+j]&0xf)*i8(y[:], 4+j) + int32(x[4+j]>>4)*i8(y[:], 20+j)
		}
		acc[i&7] += scaledMin(sumi, x[:], y[:])
	}
}

// q5Nibbles returns the j-th low and high 5-bit quants of a Q5_0/Q5_1 block
// with 4-bit parts qs and fifth bits qh.
func q5Nibbles(qs byte, qh uint32, j int) (lo, hi int32) {
	return int32(qs&0xf | byte(qh>>j<<4)&0x10), int32(qs>>4 | byte(qh>>(j+12))&0x10)
}

func dotQ5_0(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksQ5_0(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

func blocksQ5_0(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[22]byte)(row[22*i:]), (*[34]byte)(act[34*i:])
		qh := binary.LittleEndian.Uint32(x[2:])
		var sumi int32
		for j := range 16 {
			lo, hi := q5Nibbles(x[6+j], qh, j)
			sumi += (lo-16)*i8(y[:], 2+j) + (hi-16)*i8(y[:], 18+j)
		}
		acc[i&7] += scaled(sumi, x[:], y[:])
	}
}

func dotQ5_1(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksQ5_1(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

func blocksQ5_1(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[24]byte)(row[24*i:]), (*[36]byte)(act[36*i:])
		qh := binary.LittleEndian.Uint32(x[4:])
		var sumi int32
		for j := range 16 {
			lo, hi := q5Nibbles(x[8+j], qh, j)
			sumi += lo*i8(y[:], 4+j) + hi*i8(y[:], 20+j)
		}
		acc[i&7] += scaledMin(sumi, x[:], y[:])
	}
}

func dotQ8_0(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksQ8_0(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

func blocksQ8_0(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[34]byte)(row[34*i:]), (*[34]byte)(act[34*i:])
		var sumi int32
		for j := 2; j < 34; j++ {
			sumi += i8(x[:], j) * i8(y[:], j)
		}
		acc[i&7] += scaled(sumi, x[:], y[:])
	}
}

func dotIQ4_NL(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksIQ4_NL(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

func blocksIQ4_NL(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[18]byte)(row[18*i:]), (*[34]byte)(act[34*i:])
		var sumi int32
		for j := range 16 {
			sumi += int32(kvaluesIQ4NL[x[2+j]&0xf])*i8(y[:], 2+j) + int32(kvaluesIQ4NL[x[2+j]>>4])*i8(y[:], 18+j)
		}
		acc[i&7] += scaled(sumi, x[:], y[:])
	}
}

func dotMXFP4(row, act []byte, n int) float32 {
	var acc [8]float32
	blocksMXFP4(&acc, row, act, 0, n/32)
	return reduce(acc[:])
}

// blocksMXFP4 scales each block's integer sum by fp16(dy)·e8m0Half(e), the
// product ggml_vec_dot_mxfp4_q8_0 forms.
func blocksMXFP4(acc *[8]float32, row, act []byte, from, to int) {
	for i := from; i < to; i++ {
		x, y := (*[17]byte)(row[17*i:]), (*[34]byte)(act[34*i:])
		var sumi int32
		for j := range 16 {
			sumi += int32(kvaluesMXFP4[x[1+j]&0xf])*i8(y[:], 2+j) + int32(kvaluesMXFP4[x[1+j]>>4])*i8(y[:], 18+j)
		}
		acc[i&7] += float32(float32(sumi) * float32(half(y[:])*e8m0Half(x[0])))
	}
}

// q8K splits a Q8_K block into its scale and quants.
func q8K(b *[292]byte) (d float32, qs []byte) {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[0:])), b[4:260]
}

// bsum is the j-th 16-element sum of a Q8_K block.
func bsum(b *[292]byte, j int) int32 { return int32(int16(binary.LittleEndian.Uint16(b[260+2*j:]))) }

// kPartial is the float32 partial of one K-quant block: isum × (dx·dy) −
// summs × (dminx·dy).
func kPartial(isum, summs int32, dx, dminx, dy float32) float32 {
	return float32(float32(isum)*float32(dx*dy)) - float32(float32(summs)*float32(dminx*dy))
}

// Q2_K·Q8_K.
func dotQ2_K(row, act []byte, n int) float32 {
	var acc [8]float32
	for i := range n / QK_K {
		x := (*[84]byte)(row[84*i:])
		y := (*[292]byte)(act[292*i:])
		dy, q8 := q8K(y)
		var summs, isum int32
		for j := range 16 {
			summs += bsum(y, j) * int32(x[j]>>4)
		}
		// Sub-block s (16 values) takes bits 2·((s/2)%4) of bytes
		// 32·(s/8) + 16·(s%2) ... +16 of qs, and activations 16s ... 16s+16.
		for s := range 16 {
			q := (*[16]byte)(x[16+32*(s/8)+16*(s%2):])
			a := (*[16]byte)(q8[16*s:])
			shift := uint(2 * ((s / 2) % 4))
			var sum int32
			for l := range 16 {
				sum += int32(int8(a[l])) * int32((q[l]>>(shift&7))&3)
			}
			isum += int32(x[s]&0xf) * sum
		}
		acc[i&7] += kPartial(isum, summs, half(x[80:]), half(x[82:]), dy)
	}
	return reduce(acc[:])
}

// Q3_K·Q8_K.
func dotQ3_K(row, act []byte, n int) float32 {
	var acc [8]float32
	for i := range n / QK_K {
		x := (*[110]byte)(row[110*i:])
		dy, q8 := q8K((*[292]byte)(act[292*i:]))
		scales := unpackQ3KScales(x[96:108])
		var isum int32
		// Sub-block s as in Q2_K; its high bits are bit s/2 of hmask.
		for s := range 16 {
			off := 16 * (s % 2)
			q := (*[16]byte)(x[32+32*(s/8)+off:])
			hm := (*[16]byte)(x[off:])
			a := (*[16]byte)(q8[16*s:])
			shift, hbit := uint(2*((s/2)%4)), uint(s/2)
			var sum int32
			for l := range 16 {
				// Subtract 4 where the high bit is clear.
				v := int32((q[l]>>(shift&7))&3) - int32((^hm[l]>>(hbit&7))&1)<<2
				sum += int32(int8(a[l])) * v
			}
			isum += (int32(scales[s]) - 32) * sum
		}
		acc[i&7] += kPartial(isum, 0, half(x[108:]), 0, dy)
	}
	return reduce(acc[:])
}

func dotQ4_K(row, act []byte, n int) float32 { return dotK45(row, act, n, 144, false) }
func dotQ5_K(row, act []byte, n int) float32 { return dotK45(row, act, n, 176, true) }

// dotK45 is Q4_K·Q8_K and, with five, Q5_K·Q8_K: the same scales and mins
// (blocks d | dmin | scales[12] | [qh[32]] | qs[128]).
func dotK45(row, act []byte, n, size int, five bool) float32 {
	var acc [8]float32
	qsOff := 16
	if five {
		qsOff = 48
	}
	for i := range n / QK_K {
		x := row[size*i : size*i+size]
		y := (*[292]byte)(act[292*i:])
		dy, q8 := q8K(y)
		sc, mn := kScales(x[4:16])
		var summs, isum int32
		for j := range 8 {
			summs += (bsum(y, 2*j) + bsum(y, 2*j+1)) * int32(mn[j])
		}
		for j := range 4 {
			q := (*[32]byte)(x[qsOff+32*j:])
			a := (*[64]byte)(q8[64*j:])
			var lo, hi int32
			if five {
				lo, hi = nibbleDot5(q, (*[32]byte)(x[16:48]), uint(2*j), a)
			} else {
				lo, hi = nibbleDot4(q, a)
			}
			isum += int32(sc[2*j])*lo + int32(sc[2*j+1])*hi
		}
		acc[i&7] += kPartial(isum, summs, half(x[0:]), half(x[2:]), dy)
	}
	return reduce(acc[:])
}

// nibbleDot4 dots the low nibbles of q with a[:32] and the high with a[32:].
func nibbleDot4(q *[32]byte, a *[64]byte) (lo, hi int32) {
	for l := range 32 {
		lo += int32(q[l]&0xf) * i8(a[:], l)
		hi += int32(q[l]>>4) * i8(a[:], 32+l)
	}
	return lo, hi
}

// nibbleDot5 is nibbleDot4 with fifth bits: bit b of qh[l] for the low
// nibble, bit b+1 for the high.
func nibbleDot5(q, qh *[32]byte, b uint, a *[64]byte) (lo, hi int32) {
	b &= 7
	for l := range 32 {
		vl := int32(q[l]&0xf) | int32((qh[l]>>b)&1)<<4
		vh := int32(q[l]>>4) | int32((qh[l]>>((b+1)&7))&1)<<4
		lo += vl * i8(a[:], l)
		hi += vh * i8(a[:], 32+l)
	}
	return lo, hi
}

// Q6_K·Q8_K.
func dotQ6_K(row, act []byte, n int) float32 {
	var acc [8]float32
	for i := range n / QK_K {
		x := (*[210]byte)(row[210*i:])
		dy, q8 := q8K((*[292]byte)(act[292*i:]))
		var isum int32
		for c := range 2 {
			ql := x[64*c : 64*c+64]
			qh := x[128+32*c : 128+32*c+32]
			sc := x[192+8*c : 192+8*c+8]
			a := q8[128*c : 128*c+128]
			// Sub-block s (16 elements) of this 128-chunk has scale sc[s].
			var sub [8]int32
			for l := range 32 {
				q1 := int32(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				s := l / 16
				sub[s] += q1 * i8(a, l)
				sub[s+2] += q2 * i8(a, l+32)
				sub[s+4] += q3 * i8(a, l+64)
				sub[s+6] += q4 * i8(a, l+96)
			}
			for s := range 8 {
				isum += int32(int8(sc[s])) * sub[s]
			}
		}
		acc[i&7] += kPartial(isum, 0, half(x[208:]), 0, dy)
	}
	return reduce(acc[:])
}

// IQ4_XS·Q8_K.
func dotIQ4_XS(row, act []byte, n int) float32 {
	var acc [8]float32
	for i := range n / QK_K {
		x := (*[136]byte)(row[136*i:])
		dy, q8 := q8K((*[292]byte)(act[292*i:]))
		var isum int32
		for ib := range 8 {
			qs := x[8+16*ib : 8+16*ib+16]
			a := q8[32*ib : 32*ib+32]
			var s int32
			for j := range 16 {
				s += int32(kvaluesIQ4NL[qs[j]&0xf])*i8(a, j) + int32(kvaluesIQ4NL[qs[j]>>4])*i8(a, 16+j)
			}
			isum += iq4xsScale(x, ib) * s
		}
		acc[i&7] += kPartial(isum, 0, half(x[0:]), 0, dy)
	}
	return reduce(acc[:])
}
