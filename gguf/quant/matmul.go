package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// Batch is a set of activation rows in one format, for the weights of one
// type: what MatMul multiplies a matrix by. Besides the quantised rows it
// keeps a few figures per block (the activation's scale as a float32, the
// sums of its quants) that the matrix kernels would otherwise recompute
// for every weight row. Reuse one across calls: Reset reshapes it in
// place, and Quantize fills one row.
type Batch struct {
	typ       Type // the activation format: VecDotType of the weight type
	n, rows   int
	rowSize   int
	auxSize   int // bytes of per-block figures per row
	pairSize  int // bytes of paired quants per row (one-row Q8_0 batches)
	data, aux []byte
	pairs     []byte
	acts      []Activation
	// wide: for the float types' band kernels (floatBands), each row's
	// first wideRow elements (its whole rounds of 32) widened to float32,
	// rows wideRow apart, and zero rows after the last up to a multiple of
	// four; wideRow is 0 where they do not run.
	wide    []float32
	wideRow int
	// cached: the weights MatMul multiplies this batch by are expected in
	// cache (SetCached), so the band kernels do not prefetch them.
	cached bool
	// streamedRows: a one-row batch by weights read from memory takes the
	// row kernels, not the band kernels (SetStreamedRows).
	streamedRows bool
	// rowsAhead: the row kernels ask for the rows ahead of those they
	// multiply, by weights read from memory (SetRowsAhead).
	rowsAhead bool
}

// SetCached tells MatMul whether the weights it will multiply b by are
// expected to be in the CPU's cache (a model that fits in its last-level
// cache, read again every token) rather than coming from memory. MatMul's
// band kernels prefetch the next weight rows while they work on the
// current ones: that overlaps the reads of weights streaming from memory,
// and only costs instructions where they are already cached. It does not
// change any result. Reset keeps the setting; a new Batch prefetches.
func (b *Batch) SetCached(on bool) { b.cached = on }

// SetStreamedRows tells MatMul to multiply a one-row batch by weights read
// from memory (not SetCached) with the row kernels (or, for short rows,
// the eight-row tiles) rather than the sixteen-row band kernels, which
// repack their weights as they read them. Which is faster depends on the
// CPU (StreamedBand says where there is a choice; the CPU backend times
// both); both give the same bits. Reset keeps the setting.
func (b *Batch) SetStreamedRows(on bool) { b.streamedRows = on }

// SetRowsAhead tells MatMul's row kernels to ask for the weight rows
// rowAhead bytes ahead of those they multiply by b's first row, where the
// weights are read from memory (not SetCached). On some CPUs and row
// widths the hardware's own prefetching leaves them waiting, on others
// the asks only cost (RowsAhead says where there is a choice; the CPU
// backend times both); both give the same bits. Reset keeps the setting.
func (b *Batch) SetRowsAhead(on bool) { b.rowsAhead = on }

// Per-block figures kept beside a row of a Batch, for the formats whose
// matrix kernels use them:
//
//   - Q8_0: float32 d, then int32 Σq (8 bytes a block);
//   - Q8_K: the int16 sums of its quants, 16 at a time, computed from the
//     quants (a block's own bsums are data, and need not agree with them).
//
// On amd64 a one-row Q8_0 batch (a token being decoded) also keeps its
// quants paired, for the row kernel that takes half of each of two blocks
// in one vector: for blocks 2m and 2m+1 of each whole group of eight,
// elements 0-15 of each, then elements 16-31 of each (64 bytes a pair).
func auxBytes(t Type) int {
	switch t {
	case Q8_0:
		return 8
	case Q8_K:
		return 32
	}
	return 0
}

// NewBatch returns a batch of rows n-element activations for weights of
// type w.
func NewBatch(w Type, n, rows int) (*Batch, error) {
	b := new(Batch)
	if err := b.Reset(w, n, rows); err != nil {
		return nil, err
	}
	return b, nil
}

// Reset makes b a batch of rows n-element activations for weights of
// type w, reusing its memory where it is large enough. The rows' contents
// are undefined until quantised.
func (b *Batch) Reset(w Type, n, rows int) error {
	at, ok := VecDotType(w)
	if !ok {
		return fmt.Errorf("quant: no dot product for %s", w)
	}
	if rows < 0 {
		return fmt.Errorf("quant: batch of %d rows", rows)
	}
	rs, err := at.RowSize(n)
	if err != nil {
		return fmt.Errorf("quant: activation for %s: %w", w, err)
	}
	if n%w.BlockSize() != 0 {
		return fmt.Errorf("quant: %d elements are not whole %s blocks", n, w)
	}
	nb := n / at.BlockSize()
	as, ps := nb*auxBytes(at), 0
	if at == Q8_0 && rows == 1 && pairedRows {
		ps = 32 * (nb &^ 7)
	}
	b.typ, b.n, b.rows, b.rowSize, b.auxSize, b.pairSize = at, n, rows, rs, as, ps
	b.wideRow = 0
	if floatBandRows && (rows >= 2 || rows == 1 && oneRowFloat(w, n)) && (at == F16 || at == BF16 || at == F32) {
		b.wideRow = n &^ 31
	}
	padded := (rows + 3) &^ 3
	if cap(b.wide) < padded*b.wideRow {
		b.wide = make([]float32, padded*b.wideRow)
	}
	b.wide = b.wide[:padded*b.wideRow]
	clear(b.wide[rows*b.wideRow:])
	b.data = grow(b.data, rows*rs)
	b.aux = grow(b.aux, rows*as)
	b.pairs = grow(b.pairs, rows*ps)
	if cap(b.acts) < rows {
		b.acts = make([]Activation, rows)
	}
	b.acts = b.acts[:rows]
	for i := range b.acts {
		b.acts[i] = Activation{Type: at, N: n, Data: b.data[i*rs : (i+1)*rs : (i+1)*rs]}
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// Rows returns the number of rows.
func (b *Batch) Rows() int { return b.rows }

// Row returns row i as an Activation. Its Data aliases the batch: write
// it only through Batch.Quantize, which keeps the per-block figures.
func (b *Batch) Row(i int) *Activation { return &b.acts[i] }

// Quantize fills row i from x (Activation.Quantize's quantiser). Rows may
// be quantised concurrently.
func (b *Batch) Quantize(i int, x []float32) error {
	if i < 0 || i >= b.rows {
		return fmt.Errorf("quant: row %d of a %d-row batch", i, b.rows)
	}
	if err := b.acts[i].Quantize(x); err != nil {
		return err
	}
	b.figures(i)
	return nil
}

// figures computes row i's per-block figures from its quants.
func (b *Batch) figures(i int) {
	data := b.acts[i].Data
	if w := b.wideRow; w > 0 {
		widen(b.typ, b.wide[i*w:(i+1)*w], data)
	}
	aux := b.aux[i*b.auxSize : (i+1)*b.auxSize]
	switch b.typ {
	case Q8_0:
		for k := range len(data) / 34 {
			blk := (*[34]byte)(data[34*k:])
			binary.LittleEndian.PutUint32(aux[8*k:], math.Float32bits(half(blk[:])))
			binary.LittleEndian.PutUint32(aux[8*k+4:], uint32(sumInt8(blk[2:34])))
		}
		pairs := b.pairs[i*b.pairSize : (i+1)*b.pairSize]
		for k := 0; 32*k < len(pairs); k += 2 {
			p := pairs[32*k : 32*k+64]
			copy(p[0:16], data[34*k+2:])
			copy(p[16:32], data[34*k+36:])
			copy(p[32:48], data[34*k+18:])
			copy(p[48:64], data[34*k+52:])
		}
	case Q8_K:
		for k := range len(data) / 292 {
			qs := data[292*k+4 : 292*k+260]
			for j := range 16 {
				binary.LittleEndian.PutUint16(aux[32*k+2*j:], uint16(sumInt8(qs[16*j:16*j+16])))
			}
		}
	}
}

// sumInt8 adds bytes as int8.
func sumInt8(q []byte) int32 {
	var s int32
	for _, v := range q {
		s += int32(int8(v))
	}
	return s
}

// MatMul computes out[i*stride+r] = VecDot(t, row r of w, b.Row(i)) for
// every row r of the matrix w and every row i of b: the same bits as
// VecDot, whichever kernel runs. Where t has a tile kernel (the SIMD
// builds, for Q4_0, Q8_0, Q4_K and Q6_K), a batch of more than one row is
// multiplied eight weight rows at a time, each weight block loaded once
// for every activation row, and so are rows too short for the row
// kernel's SIMD (fewer than eight Q4_0 or Q8_0 blocks); a one-row batch
// takes the band kernels (sixteen weight rows at a time) on the row
// widths where they are faster (bandKernel.oneMin, oneMax); F16, BF16 and F32
// take a batch of two or more rows four activation rows per weight row
// load (tile_float.go); otherwise row by row.
func MatMul(t Type, w []byte, b *Batch, out []float32, stride int) {
	MatMulPacked(t, w, nil, b, out, stride)
}

// MatMulPacked is MatMul with w's rows also packed for the tile kernels
// (Pack; for a span of w's rows, Packed.Rows): the same bits, without
// repacking them. A nil p, or one packed for other kernels than this
// call takes, is MatMul.
func MatMulPacked(t Type, w []byte, p *Packed, b *Batch, out []float32, stride int) {
	f, rs := kernel(t, &Activation{Type: b.typ, N: b.n, Data: b.data[:b.rowSize]})
	if rs == 0 || len(w)%rs != 0 {
		panic(fmt.Sprintf("quant: MatMul: %d bytes are not whole %d-element %s rows", len(w), b.n, t))
	}
	rows := len(w) / rs
	if b.rows > 0 && rows > 0 && (stride < rows || len(out) < (b.rows-1)*stride+rows) {
		panic(fmt.Sprintf("quant: MatMul: %d × %d outputs with stride %d in %d floats", b.rows, rows, stride, len(out)))
	}
	done := 0
	if b.rows > 0 && useSIMD && useTiles {
		done = matMulTiles(t, w, p, rs, rows, b, out, stride)
	}
	if done == rows {
		return
	}
	// Row by row, over spans of weight rows that stay in cache while every
	// activation row passes.
	var fd figureRows
	if useSIMD && b.rows == 1 && b.auxSize > 0 {
		fd = figureDots[t]
	}
	span := max(1, rowSpanBytes/rs)
	for r0 := done; r0 < rows; r0 += span {
		r1 := min(rows, r0+span)
		for i := range b.rows {
			a := b.acts[i].Data
			o := out[i*stride:]
			if fd != nil {
				aux := b.aux[i*b.auxSize : (i+1)*b.auxSize]
				pairs := b.pairs[i*b.pairSize : (i+1)*b.pairSize]
				fd(w[r0*rs:], rs, a, aux, pairs, o[r0:r1], b.rowsAhead && !b.cached && i == 0) // w past r1: the row kernels may read on (groupTail, aheadRow)
				continue
			}
			if useSIMD && rowsSIMD(t, w[r0*rs:], rs, &b.acts[i], o[r0:r1], b.rowsAhead && !b.cached && i == 0) {
				continue // the row kernel's results, without a call per row
			}
			for r := r0; r < r1; r++ {
				o[r] = f(w[r*rs:(r+1)*rs], a, b.n)
			}
		}
	}
}

// figureRows is a rows kernel (MatVecRows) that also takes the
// activation row's per-block figures and paired quants (Batch.aux,
// Batch.pairs), with VecDot's results.
type figureRows func(w []byte, stride int, act, aux, pairs []byte, out []float32, streamed bool)

// useTiles lets benchmarks time MatMul without its tile kernels.
var useTiles = true

// rowSpanBytes is the weight bytes MatMul's row-by-row path dots with every
// activation row before it moves on: they stay in the core's L1/L2 cache.
const rowSpanBytes = 16 << 10

// oneRowFloat says whether a one-row batch of n elements for weights of
// type t takes the float row kernels (floatRows) too, where WideRows
// runs: with AVX-512 they read 32 weights a step into registers, widened
// once, where the one-row kernel (rowsF16) widens weights and activation
// each in 8-lane halves. BenchmarkMatMulFloatBand/n=1, one thread: F16
// 2.3-2.6x at 32000 × 192 (the built-in model's output head), 1.9x at
// 2048 × 2048; BF16 3-6x; F32 1.15x.
func oneRowFloat(t Type, n int) bool {
	return WideRowsFor(t) && n > 0 && n%32 == 0
}

// WideRowsMax is the most activation rows WideRows takes at once.
const WideRowsMax = 8

// WideRowsFit is how many activation rows of n float32 (padded to a
// whole 32) the float row kernels take in one pass: as many as stay in L1
// beside the weights' chunks (floatRowsL1), at least four and at most
// WideRowsMax.
func WideRowsFit(n int) int {
	return min(WideRowsMax, max(4, floatRowsL1/(4*((n+31)&^31))))
}

// floatRowsL1 is the most activation bytes a group of rows the row
// kernels take at once may hold (L1 is 32-48 KB, and the weights' chunks
// pass through it too).
const floatRowsL1 = 40 << 10

// Widen sets x to the float32 values of the first len(x) elements of
// type t (F16, BF16 or F32) at src: the activations WideRows takes.
func Widen(t Type, x []float32, src []byte) {
	if t != F16 && t != BF16 && t != F32 {
		panic(fmt.Sprintf("quant: Widen of %s", t))
	}
	if len(x) > 0 {
		widen(t, x, src)
	}
}

// widen sets x to the float32 values of the first len(x) elements of t
// at src.
func widen(t Type, x []float32, src []byte) {
	if t == F32 {
		copy(x, unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), len(x)))
		return
	}
	src = src[:2*len(x)]
	if t == F16 && widenF16SIMD != nil && useSIMD {
		widenF16SIMD(x, src)
		return
	}
	if t == F16 {
		tab := fp16Table()
		for i := range x {
			x[i] = tab[binary.LittleEndian.Uint16(src[2*i:])]
		}
		return
	}
	for i := range x {
		x[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}
