//go:build (amd64 || arm64) && !purego

package quant

// Assembly kernels and the Go that joins them to the pure-Go ones. Each
// assembly kernel adds its partials into the same accumulator lanes, in
// the same order and with the same float32 operations, as the Go kernel
// would; the Go kernel then does any tail and the reduction (for the
// eight-block kernels the assembly does the tail too: groupTail). So
// results are bit-identical by construction, and simd_test.go checks it.

// groupTail has the formats whose assembly adds eight blocks a group
// (q8_0x8 and the like) add the blocks of rows past their last whole
// group too, as one group padded with the activation's zero blocks. A
// block times a zero block adds ±0 to its lane (the sum of its quants'
// products is 0, and its scale times the activation's zero scale is ±0
// where the weight's scales are finite: an MXFP4 scale always is), and ±0
// changes no lane (a lane starts at +0 and never holds -0), so acc ends
// as the Go tail (blocksQ4_0 and the like) leaves it, bit for bit. So the
// weight's tail is read where it lies, the next row's blocks after it,
// unless the matrix ends first or those blocks have a scale that is not
// finite; then it is copied beside zero blocks. Rows of a whole number of
// groups have no tail, but a model's need not: on a 1B-shaped model of
// width 2016 (63 blocks) the Go tail of 7 blocks took more time than the
// 56 before it, and its Q4_0 decode ran at half the speed. The
// activation's tail is padded once for every row it meets.
type groupTail struct {
	t        Type
	xs       int // the weight's bytes a block
	from, nb int // the tail's blocks
	// The largest blocks of the formats: Q8_0's 34 bytes, Q8_1's 36.
	x [8 * 34]byte // a weight row's tail, then zero blocks
	y [8 * 36]byte // the activation's tail, then zero blocks
}

// set makes g the tail of rows of nb blocks of t by the activation act,
// and says whether there is one.
func (g *groupTail) set(t Type, act []byte, nb int) bool {
	g.t, g.from, g.nb = t, nb&^7, nb
	at, _ := VecDotType(t)
	g.xs = t.TypeSize()
	ys := at.TypeSize()
	if g.from == nb {
		return false
	}
	clear(g.x[:]) // each copied tail then overwrites the same bytes
	clear(g.y[copy(g.y[:], act[g.from*ys:nb*ys]):])
	return true
}

// add adds a row's tail blocks to acc: tail is the weight's bytes from
// the row's first tail block to the end of the matrix.
func (g *groupTail) add(acc *[8]float32, tail []byte) {
	x := g.x[:]
	if len(tail) >= 8*g.xs && g.finite(tail) {
		x = tail
	} else {
		copy(x, tail[:(g.nb-g.from)*g.xs])
	}
	g.groups(acc, x, g.y[:], 1)
}

// finite says whether the scales of the blocks past the row's tail in
// tail (whatever bytes lie there) are finite, so that the activation's
// zero blocks make them add ±0.
func (g *groupTail) finite(tail []byte) bool {
	fields := 1 // d
	switch g.t {
	case MXFP4:
		return true // an E8M0 scale is a power of two, finite at every byte
	case Q4_1, Q5_1:
		fields = 2 // d and m
	}
	for k := g.nb - g.from; k < 8; k++ {
		for f := range fields {
			if h := uint16(tail[k*g.xs+2*f]) | uint16(tail[k*g.xs+2*f+1])<<8; h&0x7c00 == 0x7c00 {
				return false // fp16 Inf or NaN
			}
		}
	}
	return true
}

// rowAhead is how far ahead of the row they multiply the row kernels ask
// for weights read from memory, where asked to (Batch.SetRowsAhead). On 2
// cores of the AMD EPYC, left to the hardware's prefetchers, Q8_0 rows of
// 2016 elements (63 blocks) read at 17–21 GB/s, where rows of 1952 and
// 2048 read at 25–35: asking for the row 4 rows on (8.5 KB) took them to
// 30–39. Asking for a whole row of 8192 Q8_0 elements ahead made its
// rows 1.7× slower, so whether to ask is the CPU backend's to time.
const rowAhead = 8 << 10

// RowsAhead says whether MatMul's row kernels for a one-row batch of n
// elements by weights of type t ask for rows ahead where told to
// (Batch.SetRowsAhead): there is a choice to make.
func RowsAhead(t Type, n int) bool {
	return useSIMD && n%32 == 0 && hasGroups(t)
}

// hasGroups says whether t's row kernel here is an eight-block assembly
// kernel (groupTail.groups): not on an arm64 core without SDOT, which
// keeps the Go kernels.
func hasGroups(t Type) bool {
	switch t {
	case Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4:
		return kernels[t].asm != nil
	}
	return false
}

// aheadRows is how many rows on the row kernels ask for, of rows stride
// bytes apart: none where not streamed.
func aheadRows(stride int, streamed bool) int {
	if !streamed || stride == 0 {
		return 0
	}
	return (rowAhead + stride - 1) / stride
}

// aheadRow asks for row r+ahead of w (rows stride bytes apart), where
// ahead > 0 and w holds it.
func aheadRow(w []byte, r, stride, ahead int) {
	if ahead > 0 && (r+ahead+1)*stride <= len(w) {
		prefetchRows(&w[(r+ahead)*stride], stride, 1, stride)
	}
}

// groups adds the first groups groups of eight blocks of x by y to acc
// with g's format's kernel.
func (g *groupTail) groups(acc *[8]float32, x, y []byte, groups int) {
	switch g.t {
	case Q8_0:
		q8_0x8(acc, &x[0], &y[0], groups)
	case Q4_0:
		q4_0x8(acc, &x[0], &y[0], groups)
	case Q4_1:
		q4_1x8(acc, &x[0], &y[0], groups)
	case Q5_0:
		q5_0x8(acc, &x[0], &y[0], groups)
	case Q5_1:
		q5_1x8(acc, &x[0], &y[0], groups)
	case IQ4_NL:
		iq4nlx8(acc, &x[0], &y[0], groups)
	case MXFP4:
		mxfp4x8(acc, &x[0], &y[0], groups)
	default:
		panic("quant: no eight-block kernel for " + g.t.String())
	}
}

// groupDot is VecDot's kernel for a format with an eight-block assembly
// kernel: groupLoop over one row, which pads the activation's tail for
// this row alone.
func groupDot(t Type) dotFunc {
	return func(row, act []byte, n int) float32 {
		var out [1]float32
		groupLoop(t, row, len(row), act, nil, nil, n/32, out[:], false)
		return out[0]
	}
}

// groupRows runs MatVecRows with the eight-block kernels where t has
// them, the activation's tail padded once (groupTail), and says whether
// it did. Where streamed (Batch.SetRowsAhead, weights read from memory),
// it asks for the row rowAhead bytes on while it multiplies this one
// (aheadRow).
func groupRows(t Type, w []byte, stride int, a *Activation, out []float32, streamed bool) bool {
	if !hasGroups(t) {
		return false
	}
	groupLoop(t, w, stride, a.Data, nil, nil, a.N/32, out, streamed)
	return true
}

// groupLoop dots each row of w (rows stride bytes apart, nb blocks each)
// with the activation act into out, through t's eight-block kernel,
// or, given a one-row batch's per-block figures and paired quants (aux;
// Q4_0), through figureGroups; the tail as groupTail adds it.
func groupLoop(t Type, w []byte, stride int, act, aux, pairs []byte, nb int, out []float32, streamed bool) {
	var g groupTail
	tail := g.set(t, act, nb)
	ahead := aheadRows(stride, streamed)
	for r := range out {
		var acc [8]float32
		aheadRow(w, r, stride, ahead)
		switch {
		case nb < 8:
		case aux != nil:
			figureGroups(&acc, &w[r*stride], act, aux, pairs, nb/8)
		default:
			g.groups(&acc, w[r*stride:], act, nb/8)
		}
		if tail {
			g.add(&acc, w[r*stride+g.from*g.xs:])
		}
		out[r] = reduce(acc[:])
	}
}

// q8_0x8 adds the partials of 8·groups Q8_0·Q8_0 blocks to acc.
//
//go:noescape
func q8_0x8(acc *[8]float32, x, y *byte, groups int)

// q4_0x8 adds the partials of 8·groups Q4_0·Q8_0 blocks to acc.
//
//go:noescape
func q4_0x8(acc *[8]float32, x, y *byte, groups int)

// q4_1x8 adds the partials of 8·groups Q4_1·Q8_1 blocks to acc.
//
//go:noescape
func q4_1x8(acc *[8]float32, x, y *byte, groups int)

// q5_0x8 adds the partials of 8·groups Q5_0·Q8_0 blocks to acc.
//
//go:noescape
func q5_0x8(acc *[8]float32, x, y *byte, groups int)

// q5_1x8 adds the partials of 8·groups Q5_1·Q8_1 blocks to acc.
//
//go:noescape
func q5_1x8(acc *[8]float32, x, y *byte, groups int)

// iq4nlx8 adds the partials of 8·groups IQ4_NL·Q8_0 blocks to acc.
//
//go:noescape
func iq4nlx8(acc *[8]float32, x, y *byte, groups int)

// mxfp4x8 adds the partials of 8·groups MXFP4·Q8_0 blocks to acc.
//
//go:noescape
func mxfp4x8(acc *[8]float32, x, y *byte, groups int)

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
func rowsSIMD(t Type, w []byte, stride int, a *Activation, out []float32, streamed bool) bool {
	if groupRows(t, w, stride, a, out, streamed) {
		return true
	}
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
