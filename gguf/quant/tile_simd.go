//go:build (amd64 || arm64) && !purego

package quant

import (
	"math"
	"sync"
)

// Tile kernels
//
// A batch of activations times a matrix runs eight weight rows at a time.
// The eight rows' blocks are first repacked, a chunk of blocks at a time,
// into a layout where one vector holds the same four elements of all
// eight rows (row r in bytes 4r..4r+3: AVX2 takes the 32 bytes as one
// vector, NEON as rows 0-3 and 4-7); the kernel then broadcasts four
// activation bytes and multiplies them with all eight rows in one
// instruction, and every row's sum lands in its own lane with no
// horizontal add. The repacked chunk stays in L1 while every activation
// row of the batch passes over it.
//
// The arithmetic per output is VecDot's: each block's integer sum is
// exact, becomes the same float32 partial by the same float32 operations,
// and partial b is added to accumulator lane b mod 8 of its row (the
// kernel keeps lane j of all eight rows in one vector, acc[8j:8j+8]);
// the lanes are reduced by halving at the end, as reduce does.

// tileKernel is the tile kernel of one weight type on this machine.
type tileKernel struct {
	chunk  int // blocks repacked at a time: a multiple of 8
	packed int // bytes of one block of eight rows, repacked
	// short: with a single activation row, the tile kernel serves rows
	// of fewer blocks than this, which the row kernel leaves to Go (it
	// works eight blocks at a time), and the row kernel longer ones.
	short int
	// pack repacks the first blocks blocks of the eight rows at w (rs
	// bytes apart) into dst.
	pack func(dst, w *byte, rs, blocks int)
	// dot adds the partials of blocks 0..blocks-1 of the repacked rows at
	// w and the activation blocks at y (their per-block figures at aux)
	// to acc: block k to acc[8(k mod 8)+r] for row r. With out set (the
	// last chunk), it then reduces each row's lanes as reduce does and
	// stores row r's result to out[r] instead.
	dot func(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
}

// bandKernel is a tile kernel that takes several activation rows at
// once: h weight rows (sixteen in tile_z_amd64.s's AVX-512 kernels,
// eight in tile_y_amd64.s's AVX2 ones) repacked so that a vector holds
// the same four elements of all of them, times four activation rows at a
// time (dot4), or three, two or one (dot3, dot2, dot1), or where it has
// them five to nine (wide), each weight group loaded once for the rows of
// a call.
// Each activation row keeps its accumulators in its own 8h floats, lane
// j of the h rows at h·j: block b0+k of a call adds to lane (lane+k) mod 8
// (lane is b0 mod 8), as VecDot's block b0+k does.
type bandKernel struct {
	h      int // weight rows a tile
	chunk  int // blocks repacked at a time
	packed int // bytes of one block of h rows, repacked
	// oneMin, oneMax: a one-row batch (a decoded token) takes this kernel
	// (dot1) for rows of oneMin to oneMax blocks, where it was measured
	// faster than the eight-row tiles or the row kernel it would take
	// otherwise (BenchmarkMatMulOneRow); oneMax 0: never.
	oneMin, oneMax int
	// oneStreamed: with weights read from memory a one-row batch takes
	// this kernel at every width from oneMin (oneRowBand), where that was
	// measured faster.
	oneStreamed bool
	// pack repacks the first blocks blocks of the h rows at w (rs bytes
	// apart) into dst.
	pack func(dst, w []byte, rs, blocks int)
	// dot4 (dot3, dot2, dot1) add the partials of blocks 0..blocks-1 of the
	// repacked rows at w and the activation rows at y (row i at y+i·ys,
	// its figures at aux+i·xs) to acc (row i's at acc[8h·i:]). With out
	// set (the last chunk), they then reduce each row's lanes as reduce
	// does, store activation row i's h results at out+i·os bytes and
	// leave its lanes zero.
	dot4, dot3, dot2, dot1 bandDot
	// wide are the forms of five rows on (wide[i]: 5+i rows; none: four
	// at most): a window of up to 4+len(wide) rows in one call, where
	// calls of four and the rest loaded and looped over each tile's
	// weights again for each (a fifth row alone cost as much as two).
	wide []bandDot
	// narrowStreamed: weights read from memory and repacked at each
	// product (neither cached nor packed) take four rows a call, not the
	// wide forms: Q6_K's, asking for the next chunk in half as many calls,
	// ran 0.88–0.97× as fast at 7–9 rows of 8192×2048 on 2 threads.
	narrowStreamed bool
}

// bandDot is a band kernel of one to four activation rows (see
// bandKernel's dot4), and pf, pfLines, pfSpan, pfSkip and pfCol what it
// asks for while it multiplies (BANDLOOP in tile_amd64.h, matMulBand).
type bandDot func(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

// dots returns the kernel of the next of n activation rows left and how
// many it takes: all n in one call where k has a form of n rows (wide
// ones only where wide); where more are left than its widest form takes
// (of six rows or more), one less than that (so that no row is left
// alone: 10 rows as 8 and 2); else four, or where k has none for n (or the tail kernels are
// off), dot1 and 1.
func (k *bandKernel) dots(n int, wide bool) (bandDot, int) {
	most := 4
	if wide {
		most += len(k.wide)
	}
	switch {
	case useBandTails && n >= 5 && n <= most:
		return k.wide[n-5], n
	case useBandTails && n > most && most >= 6:
		return k.wide[most-6], most - 1
	case n >= 4:
		return k.dot4, 4
	case n == 3 && k.dot3 != nil && useBandTails:
		return k.dot3, 3
	case n == 2 && k.dot2 != nil && useBandTails:
		return k.dot2, 2
	}
	return k.dot1, 1
}

// tileScratch is one call's repacked chunk and accumulators.
type tileScratch struct {
	w    []byte
	acc  [][64]float32
	band []float32 // the band kernels' accumulators
}

// useVNNI selects vnniTiles where the CPU has them, useZ zTiles and
// useY yTiles; tests switch them off to hold the other tiles to the Go
// kernels too.
var (
	useVNNI = haveVNNI
	useZ    = haveZ
	useY    = haveSIMD
	// useBandTails lets a band kernel take a batch's last two or three
	// rows (a speculative window of 2 or 3 is the commonest) in one call
	// (dot2, dot3) rather than one at a time, and five to nine rows in one
	// (wide) rather than by fours; benchmarks and tests switch it off to
	// compare.
	useBandTails = true
	// streamAhead lets the band kernels ask for the weights they read
	// next a few lines a block (matMulBand); benchmarks switch it off to
	// compare with asking for each chunk's rows at once before a call.
	streamAhead = true
)

var tileScratchPool = sync.Pool{New: func() any { return new(tileScratch) }}

// matMulTiles does MatMul's rows in whole tiles of eight, where t has a
// tile kernel that serves this batch, and returns how many rows it did
// (from row 0). p (nil: none) holds w's rows packed for the kernels.
func matMulTiles(t Type, w []byte, p *Packed, rs, rows int, b *Batch, out []float32, stride int) int {
	s := tileScratchPool.Get().(*tileScratch)
	defer tileScratchPool.Put(s)
	done := 0
	if fb := floatBandFor(t); fb != nil && (b.rows > 1 || b.wideRow > 0) {
		return matMulFloat(fb, s, t, w, rs, rows, b, out, stride)
	}
	nb := b.n / t.BlockSize()
	if band := bandFor(t); band != nil && (b.rows > 1 || oneRowBand(band, nb, b.cached, b.streamedRows)) {
		done = matMulBand(band, s, t, w, p.bandsFor(band, rs, rows), rs, rows, b, out, stride)
	}
	k := tileFor(t)
	full := rows &^ 7
	if k == nil || full <= done || b.rows == 1 && nb >= k.short {
		return done
	}
	packed := p.tilesFor(k, rs, rows)
	if need := k.packed * min(k.chunk, nb); packed == nil && len(s.w) < need {
		s.w = make([]byte, need)
	}
	if cap(s.acc) < b.rows {
		s.acc = make([][64]float32, b.rows)
	}
	acc := s.acc[:b.rows]
	wb, ab, xb := t.TypeSize(), b.typ.TypeSize(), auxBytes(b.typ)
	for r := done; r < full; r += 8 {
		clear(acc)
		for b0 := 0; b0 < nb; b0 += k.chunk {
			b1 := min(nb, b0+k.chunk)
			src := s.w
			if packed != nil {
				src = packed[(r/8*nb+b0)*k.packed:]
			} else {
				k.pack(&s.w[0], &w[r*rs+b0*wb], rs, b1-b0)
			}
			for i := range acc {
				var o *float32
				if b1 == nb {
					o = &out[i*stride+r : i*stride+r+8][0]
				}
				k.dot(&acc[i], &src[0], &b.data[i*b.rowSize+b0*ab], &b.aux[i*b.auxSize+b0*xb], b1-b0, o)
			}
		}
	}
	return full
}

// oneRowBandMode: 0 takes a one-row batch (a decoded token) by the band
// kernel by oneRowBand's rule, 1 always, -1 never (the eight-row tiles or
// the row kernel, as before); tests and benchmarks set it to compare.
var oneRowBandMode = 0

// oneRowBand says whether a one-row batch of rows of nb blocks takes the
// band kernel k: from k.oneMin blocks, and where the weights are expected
// in cache (Batch.SetCached) up to k.oneMax, as measured there. Weights
// read from memory take it at every width from k.oneMin where
// k.oneStreamed says (the AVX-512 kernels) and the batch does not ask
// for the row kernels (rows, Batch.SetStreamedRows): on an Intel Xeon,
// asking for sixteen rows at a time kept more reads in flight than a row
// kernel's stream did (1.14–1.78× the row kernels' rate on 2048×8192 and
// 8192×2048; BenchmarkMatMulStream, k=1), while on an AMD EPYC the
// band kernels' repacking made them the slower (0.44–0.68×).
func oneRowBand(k *bandKernel, nb int, cached, rows bool) bool {
	switch oneRowBandMode {
	case 1:
		return true
	case -1:
		return false
	}
	if !cached && rows {
		return false
	}
	return nb >= k.oneMin && (nb <= k.oneMax || !cached && k.oneStreamed)
}

// StreamedBand reports whether a one-row batch of n elements by weights of
// type t read from memory takes the band kernels unless told otherwise
// (Batch.SetStreamedRows): where the choice exists.
func StreamedBand(t Type, n int) bool {
	k := bandFor(t)
	return k != nil && n%t.BlockSize() == 0 && oneRowBand(k, n/t.BlockSize(), false, false)
}

// bandFor returns the band kernel this machine runs for t, if any.
func bandFor(t Type) *bandKernel {
	if z := zTiles[t]; z != nil && useZ {
		return z
	}
	if y := yTiles[t]; y != nil && useY {
		return y
	}
	return nil
}

// matMulBand does MatMul's rows in whole tiles of k.h with k, and
// returns how many it did (from row 0). A batch takes its activation
// rows four at a time, then the last one to three in one call.
//
// Where the weights stream from memory (not Batch.SetCached), a tile's
// reads are asked for ahead of its pack, so that they overlap the
// arithmetic. Where a tile's rows are at most two chunks, the kernels ask
// for the next tile, contiguous in the mapping, a few lines before each
// block (BANDLOOP), spread evenly over the tile's blocks and calls: the
// core keeps reading while it multiplies, where asking for a chunk's rows
// all at once stalled it until they came, and a window's extra rows cost
// their arithmetic on top of the reading (8192×2048 Q8_0 from memory: 0.054
// of a one-row pass each, 0.032 now at 8 rows; BenchmarkMatMulStream).
// Longer rows ask for the next chunk's sixteen row segments the same way,
// a few lines a block (the tile-ahead asks measured 0.8–0.97× as fast
// there, the segments 1.05–1.14× the chunk asks on 2048×8192 Q8_0 and
// Q4_0). A one-row batch asks the same way.
//
// packed (nil: none) holds w's rows packed for k (Packed): the tiles are
// read from there, each contiguous after the last at every width. Packed
// rows read from memory (a model larger than the cache, packed once:
// gguf/cpu) stream as one sequence with nothing repacked, and a batch of
// several rows asks for the next packed tile as the kernels ask for the
// next tile of short rows: on this project's AMD EPYC (2 threads) a
// window of 2–8 Q8_0 rows by 8192×2016 and 8192×2048 then cost 1.2–1.3×
// less than repacked (BenchmarkMatMulStream, x_packed). One row asks for
// nothing: the hardware's prefetchers follow one sequence, and the asks
// made it slower (0.89–1.06× without them, within the noise of the row
// kernels' rate). Weights in cache ask for nothing.
func matMulBand(k *bandKernel, s *tileScratch, t Type, w, packed []byte, rs, rows int, b *Batch, out []float32, stride int) int {
	h := k.h
	full := rows / h * h
	nb := b.n / t.BlockSize()
	if full == 0 || nb == 0 {
		return 0
	}
	if need := k.packed * min(k.chunk, nb); packed == nil && len(s.w) < need {
		s.w = make([]byte, need)
	}
	if need := 8 * h * b.rows; len(s.band) < need {
		s.band = make([]float32, need)
	}
	// The kernels' reductions leave the lanes zero (ZOUT, YOUT), so acc
	// is cleared once here rather than before each tile.
	acc := s.band[:8*h*b.rows]
	clear(acc)
	wb, ab, xb := t.TypeSize(), b.typ.TypeSize(), auxBytes(b.typ)
	// The wide forms, but where the weights stream unpacked and k's
	// asks ran slower so (narrowStreamed).
	wide := b.cached || packed != nil || !k.narrowStreamed
	calls := 0 // kernel calls per chunk
	for i := 0; i < b.rows; calls++ {
		_, n := k.dots(b.rows-i, wide)
		i += n
	}
	// Asking ahead (above). Rows of at most two chunks: tileLines, the
	// lines each block of each call asks for, so that a tile's calls ask
	// for all of the next tile's h·rs bytes. Longer rows: each chunk's
	// calls ask for the next chunk's h row segments likewise.
	// The tiles asked for: w's rows, or their packed copies (each the
	// next's neighbour, above), tileBytes apart in stream.
	stream, tileBytes := w, h*rs
	if packed != nil {
		stream, tileBytes = packed, nb*k.packed
	}
	ask := !b.cached && streamAhead
	tileLines := 0
	if ask && (packed == nil && nb <= 2*k.chunk || packed != nil && b.rows > 1) {
		tileLines = (tileBytes + 63) / 64
		tileLines = (tileLines + nb*calls - 1) / (nb * calls)
	}
	for r := 0; r < full; r += h {
		pfAt := (r/h + 1) * tileBytes // the next tile's bytes asked for so far
		for b0 := 0; b0 < nb; b0 += k.chunk {
			blocks := min(nb, b0+k.chunk) - b0
			src := s.w
			if packed != nil {
				src = packed[(r/h*nb+b0)*k.packed:]
			} else {
				k.pack(s.w, w[r*rs+b0*wb:], rs, blocks)
			}
			last := b0+blocks == nb
			// The next chunk's rows (or the next tile's first), read by
			// its pack from the mapping.
			next, nextBlocks := r*rs+(b0+blocks)*wb, min(nb-b0-blocks, k.chunk)
			if last {
				next, nextBlocks = (r+h)*rs, min(nb, k.chunk)
			}
			nothing := r+h == full && last || b.cached || packed != nil
			// span: the lines of one row's segment (one more than its
			// bytes need, for where it starts within a line); perBlock:
			// the lines each block of each call asks for; done: the
			// segments' lines asked for so far.
			span, perBlock, done := 0, 0, 0
			if ask && tileLines == 0 && !nothing {
				span = (nextBlocks*wb+63)/64 + 1
				perBlock = (h*span + blocks*calls - 1) / (blocks * calls)
			}
			// Without asking ahead (streamAhead off), a few of the next
			// chunk's rows at a time before each call.
			per, ahead := (h+calls-1)/calls, 0
			if nothing || ask {
				ahead = h
			}
			for i := 0; i < b.rows; {
				dot, n := k.dots(b.rows-i, wide)
				if ahead < h {
					m := min(per, h-ahead)
					prefetchRows(&w[next+ahead*rs], rs, m, nextBlocks*wb)
					ahead += m
				}
				// Past w's end (a task's last tile) the kernel asks for
				// lines that are not its own, which is harmless: a
				// prefetch never faults.
				var pf *byte
				pfLines, pfSpan, pfSkip, pfCol := 0, math.MaxInt, 0, 0
				switch {
				case tileLines > 0 && pfAt < len(stream):
					pf, pfLines = &stream[pfAt], tileLines
					pfAt += 64 * blocks * tileLines
				case perBlock > 0 && done < h*span:
					if at := next + done/span*rs + done%span*64; at < len(w) {
						pf, pfLines, pfSpan, pfSkip, pfCol = &w[at], perBlock, span, rs-64*span, done%span
					}
					done += blocks * perBlock
				}
				var o *float32
				if last {
					// Bounds of the n rows' outputs, checked here.
					_ = out[(i+n-1)*stride+r+h-1]
					o = &out[i*stride+r : i*stride+r+h][0]
				}
				dot(&acc[8*h*i], &src[0], &b.data[i*b.rowSize+b0*ab], &b.aux[i*b.auxSize+b0*xb],
					b.rowSize, b.auxSize, blocks, b0&7, o, 4*stride, pf, pfLines, pfSpan, pfSkip, pfCol)
				i += n
			}
		}
	}
	return full
}
