//go:build (amd64 || arm64) && !purego

package quant

import "fmt"

// Float band kernels
//
// The float weight types (F16, BF16, F32) take their activations in their
// own format, and their row kernels (f16x32, bf16x32, f32x32) add element
// i's product to lane i mod 32 of an accumulator, then fold the 32 lanes
// as reduce does. A batch of more than one row is multiplied here with
// kernels that take four activation rows per weight row load: each weight
// vector is loaded (and widened) once and multiplied with the same
// elements of the four rows, each product added to its own row's lane, so
// every lane of every row sees the row kernel's operations in its order.
//
// The activation rows are widened to float32 once, by Batch.Quantize
// (exactly: a half or a bfloat16 is a float32 with fewer bits), so that
// the kernels widen only the weights. The kernels keep their accumulators in memory
// between calls, so a tile of floatTileRows weight rows is taken
// floatChunk elements at a time: that much of the tile stays in L1 while
// every activation row passes over it. The kernels fold each output's 32
// lanes as reduce does and store it; where a row has elements past the
// last whole 32, those and the fold are the row kernel's Go code
// (elemsF16 etc., reduce). A batch's last rows short of four are padded
// with zero rows, whose results are not stored: a padded
// call costs less than the one-row kernel's per-output call and fold on
// short rows.

// Where the CPU has AVX-512 (useZ) and the rows have no elements past
// their last whole 32, the row kernels (floatRows) take the batch
// instead: the same arithmetic per lane, but each call runs over many
// weight rows with their accumulators in registers, so nothing is
// stored and reloaded between chunks or calls.

// floatBand4 is one type's kernel: it adds the products of the first
// 32·chunks elements of the weight row at w with each of four float32
// activation rows (row j at x + j·xs bytes) to row j's 32 lanes at
// acc + j·as bytes, element i's to lane i mod 32. With out set (the row's
// last chunk, where the row has no elements past the last whole 32), it
// then folds each row's lanes as reduce does and stores
// activation row j's result at out + j·os bytes, for j < live, instead.
type floatBand4 func(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)

// maxFloatRows is the most activation rows a float row kernel takes
// (WideRows runs them).
const maxFloatRows = WideRowsMax

// floatRows is a float row kernel of one to eight activation rows: it
// sets the results of rows weight rows (rs bytes apart, from w) times
// each activation row j (at x + j·xs bytes, float32), weight row r's at
// out + j·os + 4r bytes, each the row kernel's to the bit. The rows are
// 32·chunks elements, and then, where mask is not zero, the elements of
// one more chunk whose bits mask sets (its first ones): the activation
// rows must be zero past them, to the end of that chunk.
type floatRows func(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

// useFloatRows lets benchmarks and tests take the band kernels where
// the row kernels would run, to compare them.
var useFloatRows = true

// WideRowsFor says whether WideRows runs for weights of type t here.
func WideRowsFor(t Type) bool {
	_, ok := zFloatRows[t]
	return ok && useZ && useFloatRows && useSIMD
}

// WideRows sets out[j·os+r], for each activation row j < live (one to
// WideRowsMax) and weight row r < rows, to VecDot of the n-element row r of w
// (type t, rows rs bytes apart) with activation row j: the float32 values
// of t's activation type (Widen), rows xs floats apart, each zero from
// element n to the next multiple of 32. Each weight chunk is widened once
// for all the activation rows, and the rows may end anywhere (no element
// past a row's n-th is read), so attention takes it for its keys and its
// transposed values. It reports false, doing nothing, where WideRowsFor
// says no.
func WideRows(t Type, w []byte, rs, n, rows int, x []float32, xs, live int, out []float32, os int) bool {
	if !WideRowsFor(t) {
		return false
	}
	es, padded := t.TypeSize(), (n+31)&^31
	if n <= 0 || rows <= 0 || live < 1 || live > WideRowsMax || xs < padded || rs < n*es ||
		len(w) < (rows-1)*rs+n*es || len(x) < (live-1)*xs+padded || os < rows && live > 1 || len(out) < (live-1)*os+rows {
		panic(fmt.Sprintf("quant: WideRows: %d × %d %s (%d bytes apart, in %d) by %d rows of %d (%d apart, in %d) into %d (%d apart)",
			rows, n, t, rs, len(w), live, padded, xs, len(x), len(out), os))
	}
	var mask uint32
	if tail := n & 31; tail > 0 {
		mask = 1<<tail - 1
	}
	zFloatRows[t][live-1](&out[0], 4*os, &w[0], rs, &x[0], 4*xs, n/32, rows, mask)
	return true
}

// floatRowsSpan is the weight bytes the row kernels take at a time when a
// batch has more than one group of four rows: they stay in L2 while
// every group passes.
const floatRowsSpan = 128 << 10

const (
	floatTileRows = 8    // weight rows a tile
	floatChunk    = 1024 // elements of a tile taken at a time
)

// floatBandFor returns the float band kernel this machine runs for t, if
// any: the AVX-512 ones where the sixteen-row tiles run (switched with
// useZ), else the AVX2 or NEON ones (switched with useY).
func floatBandFor(t Type) floatBand4 {
	if k := zFloatBands[t]; k != nil && useZ {
		return k
	}
	if !useY || !haveFMA {
		return nil
	}
	return floatBands[t]
}

// matMulFloat does MatMul's rows for a float type with the band kernel k,
// and returns how many it did (all, or none where rows are shorter than
// one round of 32, or for one activation row where oneRowFloat says no).
func matMulFloat(k floatBand4, s *tileScratch, t Type, w []byte, rs, rows int, b *Batch, out []float32, stride int) int {
	n := b.n
	whole := n &^ 31
	if whole == 0 || rows == 0 || b.rows == 0 || b.rows == 1 && !oneRowFloat(t, n) {
		return 0
	}
	if b.wideRow != whole {
		return 0 // not a batch made for the band kernels
	}
	if b.rows < 4 && whole > floatChunk && !(useZ && zFloatBands[t] != nil) {
		// Two or three long rows on the two-pass kernels (AVX2, NEON):
		// padding them to four costs more than it saves (measured on
		// AVX2: 0.76-0.99x the row kernel at 2048 elements).
		return 0
	}
	if kr, ok := zFloatRows[t]; ok && useZ && useFloatRows && whole == n {
		// A call per weight row and group of four, as the band kernels
		// make, costs more than the arithmetic on rows of a few hundred
		// elements, and reloads the accumulators on longer ones: the row
		// kernels were measured 1.1-2x faster at every batch from 2 to 64
		// rows, on rows of 192 to 2048 elements.
		// Up to eight rows take one pass over the weights (four and
		// one took two: the weights widened twice, the one-row pass
		// waiting on its sums' latency), as many as stay in L1 beside
		// the weights (WideRowsFit: eight rows of 2048 did not, and ran
		// 0.9x the band kernels where four ran 1.2x). More rows go in
		// groups as even as may be (no one-row group after a full one),
		// over the weights in spans that stay in L2 while each group
		// takes them.
		limit := WideRowsFit(whole)
		groups := (b.rows + limit - 1) / limit
		span := rows
		if groups > 1 {
			span = max(16, floatRowsSpan/rs)
		}
		for r0 := 0; r0 < rows; r0 += span {
			r1 := min(rows, r0+span)
			for g := range groups {
				i := g * b.rows / groups
				live := (g+1)*b.rows/groups - i
				_ = out[(i+live-1)*stride+r1-1] // bounds of the outputs
				kr[live-1](&out[i*stride+r0], 4*stride, &w[r0*rs], rs, &b.wide[i*whole], 4*whole, whole/32, r1-r0, 0)
			}
		}
		return rows
	}
	es := t.TypeSize()
	groups := (b.rows + 3) / 4
	// The activations, widened by Batch.Quantize, in rows of whole
	// elements, padded with zero rows.
	x := b.wide
	const xs = 4 // bytes between elements of x; rows are whole apart
	// Accumulators: activation row i, weight row r of the tile at
	// 32·(floatTileRows·i + r).
	const as = 4 * 32 * floatTileRows // bytes between activation rows'
	if need := 32 * floatTileRows * 4 * groups; len(s.band) < need {
		s.band = make([]float32, need)
	}
	acc := s.band[:32*floatTileRows*4*groups]
	fold := whole == n
	tail := elemsFor(t)
	for r0 := 0; r0 < rows; r0 += floatTileRows {
		h := min(floatTileRows, rows-r0)
		clear(acc)
		for c0 := 0; c0 < whole; c0 += floatChunk {
			chunks := (min(whole, c0+floatChunk) - c0) / 32
			last := fold && c0+floatChunk >= whole
			for i := 0; i < b.rows; i += 4 {
				live := min(4, b.rows-i)
				if last {
					// Bounds of the outputs, checked here.
					_ = out[(i+live-1)*stride+r0+h-1]
				}
				for r := range h {
					var o *float32
					if last {
						o = &out[i*stride+r0+r]
					}
					k(&acc[32*(floatTileRows*i+r)], as, &w[(r0+r)*rs+c0*es], &x[i*whole+c0], xs*whole, chunks, o, 4*stride, live)
				}
			}
		}
		if fold {
			continue
		}
		for i := range b.rows {
			a := b.acts[i].Data
			for r := range h {
				row := w[(r0+r)*rs : (r0+r+1)*rs]
				l := (*[32]float32)(acc[32*(floatTileRows*i+r):])
				tail(l, row, a, whole, n)
				out[i*stride+r0+r] = reduce(l[:])
			}
		}
	}
	return rows
}

// elemsFor returns t's Go kernel for elements from..to-1.
func elemsFor(t Type) func(acc *[32]float32, row, act []byte, from, to int) {
	switch t {
	case F16:
		return elemsF16
	case BF16:
		return elemsBF16
	}
	return elemsF32
}

// floatBands are the float band kernels (tile_float_amd64.s,
// tile_float_arm64.s).
var floatBands = map[Type]floatBand4{
	F16:  f16Band4,
	BF16: bf16Band4,
	F32:  f32Band4,
}

//go:noescape
func f16Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)

//go:noescape
func bf16Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)

//go:noescape
func f32Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
