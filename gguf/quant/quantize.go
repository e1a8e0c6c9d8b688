package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src into dst (exactly RowSize(len(src)) bytes) as ggml
// does when llama-quantize writes a model without an importance matrix:
// the reference quantisers quantize_row_*_ref for the Q and K types and
// Q8_K, quantize_iq4_nl/quantize_iq4_xs for the IQ4 types, round-to-nearest-
// even for F16 and BF16. The output is byte-identical to ggml's.
//
// Floating-point note: every product that is then added is rounded on its
// own (float32(a*b) + c), because ggml's quantisers are compiled without
// fused multiply-add and Go would otherwise fuse on arm64.
func Quantize(t Type, src []float32, dst []byte) error {
	if err := checkRow(t, dst, len(src)); err != nil {
		return err
	}
	if q := simdQuantizers[t]; q != nil && useSIMD {
		q(src, dst)
		return nil
	}
	switch t {
	case F32:
		for i, f := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
		}
	case F16:
		for i, f := range src {
			putLE16(dst[2*i:], FP32ToFP16(f))
		}
	case BF16:
		for i, f := range src {
			putLE16(dst[2*i:], FP32ToBF16(f))
		}
	default:
		f, ok := blockQuantizers[t]
		if !ok {
			return fmt.Errorf("quant: cannot quantise to %s", t)
		}
		qk, size := t.BlockSize(), t.TypeSize()
		for i := range len(src) / qk {
			f(src[qk*i:qk*i+qk], dst[size*i:size*i+size])
		}
	}
	return nil
}

// blockQuantizers quantise one block: x holds BlockSize floats, y TypeSize bytes.
var blockQuantizers = map[Type]func(x []float32, y []byte){
	Q4_0: quantBlockQ4_0, Q4_1: quantBlockQ4_1, Q5_0: quantBlockQ5_0, Q5_1: quantBlockQ5_1,
	Q8_0: quantBlockQ8_0, Q8_1: quantBlockQ8_1, Q2_K: quantBlockQ2_K, Q3_K: quantBlockQ3_K,
	Q4_K: quantBlockQ4_K, Q5_K: quantBlockQ5_K, Q6_K: quantBlockQ6_K, Q8_K: quantBlockQ8_K,
	IQ4_NL: quantBlockIQ4_NL, IQ4_XS: quantBlockIQ4_XS, MXFP4: quantBlockMXFP4,
}

// nearestInt rounds to nearest, ties to even, for |f| < 2^22, by ggml's
// trick of adding 1.5×2^23 and reading the mantissa.
func nearestInt(f float32) int32 {
	v := float32(f) + 12582912 // the conversion stops a caller's product fusing into this add
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// roundAwayInt8 is int8(roundf(f)), C's round to nearest with ties away
// from zero, for |f| < 128.5 (and 0 for NaN, as the conversion gives on
// amd64 and arm64). f + ½ toward f's sign is exact in float64, so
// truncating it rounds f as roundf does; it is several times faster than
// math.Round, and the activation quantiser runs once per token per matrix.
func roundAwayInt8(f float32) int8 {
	h := math.Float64frombits(math.Float64bits(0.5) | math.Float64bits(float64(f))&(1<<63))
	return int8(int32(float64(f) + h))
}

func sqrt32(f float32) float32 { return float32(math.Sqrt(float64(f))) }

// absMax returns the element of largest magnitude (the first, on ties) and
// its magnitude.
func absMax(x []float32) (max, amax float32) {
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, max = a, v
		}
	}
	return max, amax
}

// minMax uses C's comparisons (not Go's min/max, which order -0 before +0)
// so signed zeros come out as ggml's do.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// symScale is the scale of the symmetric 4/5-bit types: d = max/div, with
// max the element of largest magnitude, and its inverse.
func symScale(x []float32, div float32) (d, id float32) {
	max, _ := absMax(x)
	d = max / div
	return d, inverse(d)
}

// asymScale is the scale and offset of Q4_1/Q5_1: d = (hi−lo)/levels.
func asymScale(x []float32, levels float32) (d, id, lo float32) {
	lo, hi := minMax(x)
	d = (hi - lo) / levels
	return d, inverse(d), lo
}

// inverse is 1/d, or 0 for 0 (ggml's `d ? 1/d : 0`).
func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

func quantBlockQ4_0(x []float32, y []byte) {
	d, id := symScale(x, -8)
	putLE16(y, FP32ToFP16(d))
	for j := range 16 {
		x0 := float32(x[j]*id) + 8.5
		x1 := float32(x[16+j]*id) + 8.5
		y[2+j] = min(15, uint8(int8(x0))) | min(15, uint8(int8(x1)))<<4
	}
}

func quantBlockQ4_1(x []float32, y []byte) {
	d, id, lo := asymScale(x, 15)
	putLE16(y, FP32ToFP16(d))
	putLE16(y[2:], FP32ToFP16(lo))
	for j := range 16 {
		x0 := float32((x[j]-lo)*id) + 0.5
		x1 := float32((x[16+j]-lo)*id) + 0.5
		y[4+j] = min(15, uint8(int8(x0))) | min(15, uint8(int8(x1)))<<4
	}
}

// packQ5 stores 32 5-bit levels: low nibbles in qs, fifth bits in qh.
func packQ5(l0, l1 []uint8, qs, qh []byte) {
	var h uint32
	for j := range 16 {
		qs[j] = l0[j]&0xf | (l1[j]&0xf)<<4
		h |= uint32(l0[j]>>4&1)<<j | uint32(l1[j]>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

func quantBlockQ5_0(x []float32, y []byte) {
	d, id := symScale(x, -16)
	putLE16(y, FP32ToFP16(d))
	var l [32]uint8
	for j, v := range x {
		l[j] = min(31, uint8(int8(float32(v*id)+16.5)))
	}
	packQ5(l[:16], l[16:], y[6:22], y[2:6])
}

func quantBlockQ5_1(x []float32, y []byte) {
	d, id, lo := asymScale(x, 31)
	putLE16(y, FP32ToFP16(d))
	putLE16(y[2:], FP32ToFP16(lo))
	var l [32]uint8
	for j, v := range x {
		l[j] = uint8(float32((v-lo)*id) + 0.5)
	}
	packQ5(l[:16], l[16:], y[8:24], y[4:8])
}

// q8Scale is the Q8_0/Q8_1 reference scale: d = amax/127, id = 1/d.
func q8Scale(x []float32) (d, id float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d = amax / 127
	return d, inverse(d)
}

func quantBlockQ8_0(x []float32, y []byte) {
	d, id := q8Scale(x)
	putLE16(y, FP32ToFP16(d))
	for j := range 32 {
		y[2+j] = byte(roundAwayInt8(x[j] * id))
	}
}

func quantBlockQ8_1(x []float32, y []byte) {
	d, id := q8Scale(x)
	putLE16(y, FP32ToFP16(d))
	var sum int32
	for j := range 32 {
		q := roundAwayInt8(x[j] * id)
		y[4+j] = byte(q)
		sum += int32(q)
	}
	putLE16(y[2:], FP32ToFP16(float32(sum)*d))
}

// Q8_K: float32 d | qs[256] | int16 bsums[16].
func quantBlockQ8_K(x []float32, y []byte) {
	max, amax := absMax(x)
	if amax == 0 {
		clear(y)
		return
	}
	iscale := -127 / max
	for j := range QK_K {
		y[4+j] = byte(int8(min(127, nearestInt(iscale*x[j]))))
	}
	for j := range 16 {
		var sum int16
		for _, q := range y[4+16*j : 4+16*j+16] {
			sum += int16(int8(q))
		}
		binary.LittleEndian.PutUint16(y[260+2*j:], uint16(sum))
	}
	binary.LittleEndian.PutUint32(y, math.Float32bits(1/iscale))
}

const groupMaxEps = 1e-15

// makeQxQuants is ggml's make_qx_quants with rmseType 1 (weights x²) and no
// importance weights: the symmetric scale minimising the weighted error,
// searched around nmax/max. L receives levels offset by nmax.
func makeQxQuants(nmax int32, x []float32, L []int8) float32 {
	max, amax := absMax(x)
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	fit := func(iscale float32, store bool) (sumlx, suml2 float32) {
		for i, v := range x {
			l := min(nmax-1, max32(-nmax, nearestInt(iscale*v)))
			if store {
				L[i] = int8(l + nmax)
			}
			w := float32(v * v)
			sumlx += float32(float32(w*v) * float32(l))
			suml2 += float32(float32(w*float32(l)) * float32(l))
		}
		return sumlx, suml2
	}
	iscale := -float32(nmax) / max
	sumlx, suml2 := fit(iscale, true)
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := int32(-9); is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / max
		sumlx, suml2 = fit(iscale, false)
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			fit(iscale, true)
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

func max32(a, b int32) int32 { return max(a, b) }

// cmax is C's `b > a ? b : a`, which skips NaN where Go's max propagates it.
func cmax(a, b float32) float32 {
	if b > a {
		return b
	}
	return a
}

// makeQ3Quants is ggml's make_q3_quants with do_rmse: levels in [-nmax,
// nmax-1] refined one at a time to minimise the x²-weighted error; L
// receives levels offset by nmax.
func makeQ3Quants(nmax int32, x []float32, L []int8) float32 {
	max, amax := absMax(x)
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	iscale := -float32(nmax) / max
	var sumlx, suml2 float32
	for i, v := range x {
		l := min(nmax-1, max32(-nmax, nearestInt(iscale*v)))
		L[i] = int8(l)
		w := float32(v * v)
		sumlx += float32(float32(w*v) * float32(l))
		suml2 += float32(float32(w*float32(l)) * float32(l))
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := float32(v * v)
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			if slx > 0 {
				sl2 := suml2 - float32(float32(w*li)*li)
				newL := min(nmax-1, max32(-nmax, nearestInt(float32(v*sl2)/slx)))
				if newL != int32(L[i]) {
					nl := float32(newL)
					slx += float32(float32(w*v) * nl)
					sl2 += float32(float32(w*nl) * nl)
					if sl2 > 0 && float32(slx*slx)*suml2 > float32(sumlx*sumlx)*sl2 {
						L[i] = int8(newL)
						sumlx, suml2 = slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// makeQkx2Quants is ggml's make_qkx2_quants: an asymmetric scale and min
// for levels in [0, nmax], chosen by a weighted least-squares search over
// nstep+1 candidate scales. It returns the scale and -min.
func makeQkx2Quants(nmax int32, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, negMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L[:n])
		return 0, -lo
	}
	errOf := func(scale, min float32, i int, l uint8) float32 {
		diff := float32(float32(scale*float32(l))+min) - x[i]
		if useMad {
			diff = abs32(diff)
		} else {
			diff = diff * diff
		}
		return float32(weights[i] * diff)
	}
	iscale := float32(nmax) / (hi - lo)
	scale = 1 / iscale
	var bestErr float32
	for i := range n {
		l := nearestInt(iscale * (x[i] - lo))
		L[i] = uint8(min(nmax, max32(0, l)))
		bestErr += errOf(scale, lo, i, L[i])
	}
	if nstep < 1 {
		return scale, -lo
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + float32(nmax)) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := min(nmax, max32(0, nearestInt(iscale*(x[i]-lo))))
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curErr float32
			for i := range n {
				curErr += errOf(thisScale, thisMin, i, Laux[i])
			}
			if curErr < bestErr {
				copy(L[:n], Laux[:n])
				bestErr = curErr
				scale, lo = thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

// Q2_K: scales[16] (4-bit scale | 4-bit min) | qs[64] | d | dmin.
func quantBlockQ2_K(x []float32, y []byte) {
	const q4scale = 15
	var L [QK_K]uint8
	var Laux [16]uint8
	var weights [16]float32
	var scales, mins [16]float32
	var maxScale, maxMin float32
	for j := range 16 {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			weights[l] = abs32(v)
		}
		scales[j], mins[j] = makeQkx2Quants(3, xs, weights[:], L[16*j:16*j+16], Laux[:], -0.5, 0.1, 15, true)
		maxScale, maxMin = cmax(maxScale, scales[j]), cmax(maxMin, mins[j])
	}
	sc := y[0:16]
	if maxScale > 0 {
		iscale := q4scale / maxScale
		for j := range 16 {
			sc[j] = uint8(nearestInt(iscale * scales[j]))
		}
		putLE16(y[80:], FP32ToFP16(maxScale/q4scale))
	} else {
		clear(sc)
		putLE16(y[80:], FP32ToFP16(0))
	}
	if maxMin > 0 {
		iscale := q4scale / maxMin
		for j := range 16 {
			sc[j] |= uint8(nearestInt(iscale*mins[j]) << 4)
		}
		putLE16(y[82:], FP32ToFP16(maxMin/q4scale))
	} else {
		putLE16(y[82:], FP32ToFP16(0))
	}
	dAll, dMin := half(y[80:]), half(y[82:])
	for j := range 16 {
		d := dAll * float32(sc[j]&0xf)
		if d == 0 {
			continue
		}
		dm := float32(dMin * float32(sc[j]>>4))
		for ii := range 16 {
			l := nearestInt((x[16*j+ii] + dm) / d)
			L[16*j+ii] = uint8(min(3, max32(0, l)))
		}
	}
	packQ2(L[:], y[16:80])
}

// packQ2 stores 2-bit levels four to a byte in ggml's interleaving: byte l
// of each 32-byte group holds levels l, l+32, l+64 and l+96 of its 128.
func packQ2(L []uint8, qs []byte) {
	for j := 0; j < QK_K; j += 128 {
		for l := range 32 {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

// Q3_K: hmask[32] | qs[64] | scales[12] | d.
func quantBlockQ3_K(x []float32, y []byte) {
	var L [QK_K]int8
	var scales [16]float32
	for j := range 16 {
		scales[j] = makeQ3Quants(4, x[16*j:16*j+16], L[16*j:16*j+16])
	}
	maxScale, _ := absMax(scales[:])
	sc := y[96:108]
	clear(sc)
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := range 16 {
			l := int8(nearestInt(iscale * scales[j]))
			l = min(31, max(-32, l)) + 32
			if j < 8 {
				sc[j] = byte(l) & 0xf
			} else {
				sc[j-8] |= (byte(l) & 0xf) << 4
			}
			sc[8+j%4] |= (byte(l) >> 4) << (2 * (j / 4))
		}
		putLE16(y[108:], FP32ToFP16(1/iscale))
	} else {
		putLE16(y[108:], FP32ToFP16(0))
	}
	dAll := half(y[108:])
	unpacked := unpackQ3KScales(sc)
	for j := range 16 {
		d := dAll * float32(int32(unpacked[j])-32)
		if d == 0 {
			continue
		}
		for ii := range 16 {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(min(3, max32(-4, l)) + 4)
		}
	}
	hmask := y[0:32]
	clear(hmask)
	m, hm := 0, byte(1)
	var U [QK_K]uint8
	for j := range QK_K {
		u := uint8(L[j])
		if u > 3 {
			hmask[m] |= hm
			u -= 4
		}
		U[j] = u
		if m++; m == QK_K/8 {
			m, hm = 0, hm<<1
		}
	}
	packQ2(U[:], y[32:96])
}

// kQuantScalesMins runs make_qkx2_quants over the eight 32-element
// sub-blocks of a Q4_K/Q5_K super-block with ggml's weights
// (rms(x) + |x|) and packs the 6-bit scales and mins and the two fp16
// super-scales. It returns the dequantised (scale, min) of each sub-block.
func kQuantScalesMins(x []float32, y []byte, nmax int32, rmin, rdelta float32, nstep int, L []uint8) (d, dm [8]float32) {
	var Laux [32]uint8
	var weights [32]float32
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrt32(sumX2 / 32)
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQkx2Quants(nmax, xs, weights[:], L[32*j:32*j+32], Laux[:], rmin, rdelta, nstep, false)
		maxScale, maxMin = cmax(maxScale, scales[j]), cmax(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := y[4:16]
	for j := range 8 {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xf | (lm&0xf)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	putLE16(y[0:], FP32ToFP16(maxScale/63))
	putLE16(y[2:], FP32ToFP16(maxMin/63))
	dAll, dMin := half(y[0:]), half(y[2:])
	for j := range 8 {
		s, m := scaleMinK4(j, sc)
		d[j], dm[j] = dAll*float32(s), float32(dMin*float32(m))
	}
	return d, dm
}

// Q4_K: d | dmin | scales[12] | qs[128].
func quantBlockQ4_K(x []float32, y []byte) {
	var L [QK_K]uint8
	d, dm := kQuantScalesMins(x, y, 15, -1, 0.1, 20, L[:])
	requantK(x, L[:], d, dm, 15)
	qs := y[16:144]
	for j := 0; j < QK_K; j += 64 {
		for l := range 32 {
			qs[j/2+l] = L[j+l] | L[j+l+32]<<4
		}
	}
}

// requantK recomputes the levels against the stored (rounded) scales.
func requantK(x []float32, L []uint8, d, dm [8]float32, nmax int32) {
	for j := range 8 {
		if d[j] == 0 {
			continue
		}
		for ii := range 32 {
			l := nearestInt((x[32*j+ii] + dm[j]) / d[j])
			L[32*j+ii] = uint8(min(nmax, max32(0, l)))
		}
	}
}

// Q5_K: d | dmin | scales[12] | qh[32] | qs[128].
func quantBlockQ5_K(x []float32, y []byte) {
	var L [QK_K]uint8
	d, dm := kQuantScalesMins(x, y, 31, -0.5, 0.1, 15, L[:])
	requantK(x, L[:], d, dm, 31)
	qh, ql := y[16:48], y[48:176]
	clear(qh)
	m1, m2 := byte(1), byte(2)
	for n := 0; n < QK_K; n += 64 {
		for j := range 32 {
			l1, l2 := L[n+j], L[n+j+32]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			ql[n/2+j] = l1 | l2<<4
		}
		m1, m2 = m1<<2, m2<<2
	}
}

// Q6_K: ql[128] | qh[64] | scales[16] (int8) | d.
func quantBlockQ6_K(x []float32, y []byte) {
	var L [QK_K]int8
	var scales [16]float32
	for ib := range 16 {
		scales[ib] = makeQxQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
	}
	maxScale, maxAbs := absMax(scales[:])
	if maxAbs < groupMaxEps {
		clear(y)
		return
	}
	iscale := -128 / maxScale
	putLE16(y[208:], FP32ToFP16(1/iscale))
	sc := y[192:208]
	for ib := range 16 {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	dAll := half(y[208:])
	for j := range 16 {
		d := dAll * float32(int8(sc[j]))
		if d == 0 {
			continue
		}
		for ii := range 16 {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(min(31, max32(-32, l)) + 32)
		}
	}
	for n := range 2 {
		ql := y[64*n : 64*n+64]
		qh := y[128+32*n : 128+32*n+32]
		Ln := L[128*n : 128*n+128]
		for l := range 32 {
			q1, q2, q3, q4 := uint8(Ln[l]), uint8(Ln[l+32]), uint8(Ln[l+64]), uint8(Ln[l+96])
			ql[l] = q1&0xf | (q3&0xf)<<4
			ql[l+32] = q2&0xf | (q4&0xf)<<4
			qh[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
	}
}

// bestIndexIQ4NL is the index of the codebook value nearest x (ggml's
// best_index_int8, ties to the lower index).
func bestIndexIQ4NL(x float32) uint8 {
	v := &kvaluesIQ4NL
	if x <= float32(v[0]) {
		return 0
	}
	if x >= float32(v[15]) {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(v[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(v[mu-1]) < float32(v[mu])-x {
		return uint8(mu - 1)
	}
	return uint8(mu)
}

// iq4Scale is the body of ggml's quantize_row_iq4_nl_impl for one 32-value
// block with weights x² and ntry 7: the scale that best fits the codebook.
func iq4Scale(xb []float32, L []uint8) float32 {
	const ntry = 7
	max, amax := absMax(xb)
	if amax < groupMaxEps {
		return 0
	}
	values := &kvaluesIQ4NL
	fit := func(id float32, store bool) (sumqx, sumq2 float32) {
		for j, x := range xb {
			l := bestIndexIQ4NL(id * x)
			if store {
				L[j] = l
			}
			q := float32(values[l])
			w := float32(x * x)
			sumqx += float32(float32(w*q) * x)
			sumq2 += float32(float32(w*q) * q)
		}
		return sumqx, sumq2
	}
	d := -max / float32(values[0])
	sumqx, sumq2 := fit(1/d, true)
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := -ntry; itry <= ntry; itry++ {
		id := float32(itry+int(values[0])) / max
		sumqx, sumq2 = fit(id, false)
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

func packIQ4(L []uint8, qs []byte) {
	for i := range len(L) / 32 {
		for j := range 16 {
			qs[16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}

// IQ4_NL: d | qs[16].
func quantBlockIQ4_NL(x []float32, y []byte) {
	var L [32]uint8
	d := iq4Scale(x, L[:])
	putLE16(y, FP32ToFP16(d))
	id := inverse(d)
	for j, v := range x {
		L[j] = bestIndexIQ4NL(id * v)
	}
	packIQ4(L[:], y[2:18])
}

// IQ4_XS: d | scales_h (uint16) | scales_l[4] | qs[128].
func quantBlockIQ4_XS(x []float32, y []byte) {
	var L [QK_K]uint8
	var scales [8]float32
	for ib := range 8 {
		scales[ib] = iq4Scale(x[32*ib:32*ib+32], L[32*ib:32*ib+32])
	}
	maxScale, _ := absMax(scales[:])
	d := -maxScale / 32
	putLE16(y, FP32ToFP16(d))
	id := inverse(d)
	var scalesH uint16
	scalesL := y[4:8]
	clear(scalesL)
	for ib := range 8 {
		l := min(31, max32(-32, nearestInt(id*scales[ib])))
		idl := inverse(d * float32(l))
		for j, v := range x[32*ib : 32*ib+32] {
			L[32*ib+j] = bestIndexIQ4NL(idl * v)
		}
		l += 32
		scalesL[ib/2] |= byte(l&0xf) << (4 * (ib % 2))
		scalesH |= uint16(l>>4) << (2 * ib)
	}
	putLE16(y[2:], scalesH)
	packIQ4(L[:], y[8:136])
}

// MXFP4: e | qs[16] (quantize_row_mxfp4_ref). The shared exponent is
// floor(log2 amax) - 2, so amax over the halved scale lies in [8, 16), the
// codebook's top values; each element then takes the nearest codebook value,
// the first on a tie, as ggml's linear search does. (A block whose amax is
// below 2^-125 wraps the byte, as ggml's cast does on amd64 and arm64.)
func quantBlockMXFP4(x []float32, y []byte) {
	var amax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax = a
		}
	}
	var e byte
	if amax > 0 {
		// log2f is correctly rounded in glibc; the float64 log rounded to
		// float32 is the same value, floor included.
		e = byte(int32(math.Floor(float64(float32(math.Log2(float64(amax)))))) - 2 + 127)
	}
	d := e8m0Half(e)
	y[0] = e
	for j := range 16 {
		y[1+j] = bestIndexMXFP4(x[j], d) | bestIndexMXFP4(x[16+j], d)<<4
	}
}

func bestIndexMXFP4(x, d float32) byte {
	best, bestErr := byte(0), float32(math.Abs(float64(float32(float32(kvaluesMXFP4[0])*d)-x)))
	for i := 1; i < 16; i++ {
		if err := float32(math.Abs(float64(float32(float32(kvaluesMXFP4[i])*d) - x))); err < bestErr {
			best, bestErr = byte(i), err
		}
	}
	return best
}
