//go:build (amd64 || arm64) && !purego

package quant

// Assembly kernels and the Go that joins them to the pure-Go ones. Each
// assembly kernel adds its partials into the same accumulator lanes, in
// the same order and with the same float32 operations, as the Go kernel
// would; the Go kernel then does any tail and the reduction. So results
// are bit-identical by construction, and simd_test.go checks it.

// q8_0x8 adds the partials of 8·groups Q8_0·Q8_0 blocks to acc.
//
//go:noescape
func q8_0x8(acc *[8]float32, x, y *byte, groups int)

func dotQ8_0SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		q8_0x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksQ8_0(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// q4_0x8 adds the partials of 8·groups Q4_0·Q8_0 blocks to acc.
//
//go:noescape
func q4_0x8(acc *[8]float32, x, y *byte, groups int)

func dotQ4_0SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		q4_0x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksQ4_0(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// q4_1x8 adds the partials of 8·groups Q4_1·Q8_1 blocks to acc.
//
//go:noescape
func q4_1x8(acc *[8]float32, x, y *byte, groups int)

func dotQ4_1SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		q4_1x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksQ4_1(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// q5_0x8 adds the partials of 8·groups Q5_0·Q8_0 blocks to acc.
//
//go:noescape
func q5_0x8(acc *[8]float32, x, y *byte, groups int)

func dotQ5_0SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		q5_0x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksQ5_0(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// q5_1x8 adds the partials of 8·groups Q5_1·Q8_1 blocks to acc.
//
//go:noescape
func q5_1x8(acc *[8]float32, x, y *byte, groups int)

func dotQ5_1SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		q5_1x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksQ5_1(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// iq4nlx8 adds the partials of 8·groups IQ4_NL·Q8_0 blocks to acc.
//
//go:noescape
func iq4nlx8(acc *[8]float32, x, y *byte, groups int)

func dotIQ4_NLSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		iq4nlx8(&acc, &row[0], &act[0], nb/8)
	}
	blocksIQ4_NL(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// mxfp4x8 adds the partials of 8·groups MXFP4·Q8_0 blocks to acc.
//
//go:noescape
func mxfp4x8(acc *[8]float32, x, y *byte, groups int)

func dotMXFP4SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		mxfp4x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksMXFP4(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// q2Kdot adds the partial of each of the Q2_K·Q8_K blocks to acc.
//
//go:noescape
func q2Kdot(acc *[8]float32, x, y *byte, blocks int)

func dotQ2_KSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	if nb := n / QK_K; nb > 0 {
		q2Kdot(&acc, &row[0], &act[0], nb)
	}
	return reduce(acc[:])
}

// q3Kdot adds the partial of each of the Q3_K·Q8_K blocks to acc.
//
//go:noescape
func q3Kdot(acc *[8]float32, x, y *byte, blocks int)

func dotQ3_KSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	if nb := n / QK_K; nb > 0 {
		q3Kdot(&acc, &row[0], &act[0], nb)
	}
	return reduce(acc[:])
}

// q4Kdot adds the partial of each of the Q4_K·Q8_K blocks to acc.
//
//go:noescape
func q4Kdot(acc *[8]float32, x, y *byte, blocks int)

func dotQ4_KSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	if nb := n / QK_K; nb > 0 {
		q4Kdot(&acc, &row[0], &act[0], nb)
	}
	return reduce(acc[:])
}

// q5Kdot adds the partial of each of the Q5_K·Q8_K blocks to acc.
//
//go:noescape
func q5Kdot(acc *[8]float32, x, y *byte, blocks int)

func dotQ5_KSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	if nb := n / QK_K; nb > 0 {
		q5Kdot(&acc, &row[0], &act[0], nb)
	}
	return reduce(acc[:])
}

// q6Kdot adds the partial of each of the Q6_K·Q8_K blocks to acc.
//
//go:noescape
func q6Kdot(acc *[8]float32, x, y *byte, blocks int)

func dotQ6_KSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	if nb := n / QK_K; nb > 0 {
		q6Kdot(&acc, &row[0], &act[0], nb)
	}
	return reduce(acc[:])
}

// iq4xsDot adds the partial of each of the IQ4_XS·Q8_K blocks to acc.
//
//go:noescape
func iq4xsDot(acc *[8]float32, x, y *byte, blocks int)

func dotIQ4_XSSIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	if nb := n / QK_K; nb > 0 {
		iq4xsDot(&acc, &row[0], &act[0], nb)
	}
	return reduce(acc[:])
}

// f16x32, bf16x32 and f32x32 add the products of 32·chunks elements to
// acc, element i to lane i mod 32.
//
//go:noescape
func f16x32(acc *[32]float32, x, y *byte, chunks int)

//go:noescape
func bf16x32(acc *[32]float32, x, y *byte, chunks int)

//go:noescape
func f32x32(acc *[32]float32, x, y *byte, chunks int)

func dotF16SIMD(row, act []byte, n int) float32 {
	var acc [32]float32
	if n >= 32 {
		f16x32(&acc, &row[0], &act[0], n/32)
	}
	elemsF16(&acc, row, act, n&^31, n)
	return reduce(acc[:])
}

func dotBF16SIMD(row, act []byte, n int) float32 {
	var acc [32]float32
	if n >= 32 {
		bf16x32(&acc, &row[0], &act[0], n/32)
	}
	elemsBF16(&acc, row, act, n&^31, n)
	return reduce(acc[:])
}

func dotF32SIMD(row, act []byte, n int) float32 {
	var acc [32]float32
	if n >= 32 {
		f32x32(&acc, &row[0], &act[0], n/32)
	}
	elemsF32(&acc, row, act, n&^31, n)
	return reduce(acc[:])
}

// rowsSIMD runs MatVecRows with the whole-row kernels where t has one
// (F16, F32), and says whether it did.
func rowsSIMD(t Type, w []byte, stride int, a *Activation, out []float32) bool {
	n := a.N
	if (t != F16 && t != F32) || n == 0 {
		return false
	}
	es := t.TypeSize()
	var xtail [128]byte // the activation's last partial chunk, zero-padded
	whole := n &^ 31
	copy(xtail[:], a.Data[whole*es:n*es])
	x := &xtail[0]
	if whole > 0 {
		x = &a.Data[0]
	}
	if t == F16 {
		rowsF16(&out[0], &w[0], stride, x, &xtail[0], n, len(out))
	} else {
		rowsF32(&out[0], &w[0], stride, x, &xtail[0], n, len(out))
	}
	return true
}

// rowsF16 and rowsF32 set out[r] to the dot product of the n-element
// row at w + r·stride with x (whose last partial chunk is also at xtail,
// zero-padded to 32 elements), as dotF16SIMD and dotF32SIMD do, for r <
// rows.
//
//go:noescape
func rowsF16(out *float32, w *byte, stride int, x, xtail *byte, n, rows int)

//go:noescape
func rowsF32(out *float32, w *byte, stride int, x, xtail *byte, n, rows int)
