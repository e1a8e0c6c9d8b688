//go:build (amd64 || arm64) && !purego

package quant

import "github.com/meshnode/meshnode/internal/pages"

// Packed is a weight matrix's rows repacked once into the layouts its
// tile and band kernels multiply (tile_simd.go), for MatMulPacked, which
// then skips the repacking MatMul does at every call. Where the weights
// stay in cache between calls (a small model), a product is bound by its
// arithmetic, and repacking the rows was as much again: 29% of a small
// draft model's one-token step, more than the products themselves (21%).
// Weights read from memory gain little: the pack overlaps the reads.
type Packed struct {
	rs, nb int // source row bytes, blocks a row
	rows   int // the rows packed
	tile   *tileKernel
	tiles  []byte // eight-row tiles: tile j's block b at (j·nb + b)·tile.packed
	band   *bandKernel
	bands  []byte // band tiles of band.h rows, laid out alike
}

// Pack repacks w, rows of cols elements of t, into the layout its
// products with batches of batch activation rows take on this machine
// (a batch of one: a decoded token; of more: a window or a prompt's
// chunk), with the weights expected in cache (Batch.SetCached), and
// returns nil where those products repack nothing (F16, BF16 and F32
// are multiplied as they are stored, and so are the other types row by
// row) or where the packed rows would be larger than the blocks by more
// than an eighth. w is not retained.
//
// Q8_0's packed rows are its blocks' size (eight rows' 272 bytes a block
// packed into 288 for the eight-row tiles, sixteen rows' 544 into 544 for
// the band kernels), so a product packed reads what it read before and
// skips the repacking: 1.4–3.2× as fast in cache (BenchmarkMatMulPacked).
// Q4_0, Q4_K and Q6_K are packed into 1.7–2.3 times their blocks'
// bytes (4- and 6-bit quants as bytes): small products gained as much,
// but a product whose blocks fit the core's L2 cache and whose packed
// rows do not lost (Q4_0, one row of 1024×2048 and of 32000×192:
// 0.92× and 0.95×), and the copy would double a model's memory.
func Pack(t Type, w []byte, cols, batch int) *Packed { return PackOn(t, w, cols, batch, nil) }

// PackOn is Pack with the tiles packed in parts by run, which calls
// do(i) once for every i < n, on as many threads as it has: a caller's
// worker pool (the CPU backend's), so that packing a 1B model's weights
// at their first products takes its threads, not one. A nil run packs on
// the caller's goroutine.
func PackOn(t Type, w []byte, cols, batch int, run func(n int, do func(i int))) *Packed {
	rs, err := t.RowSize(cols)
	if err != nil || rs == 0 || len(w)%rs != 0 || batch < 1 || !useSIMD || !useTiles {
		return nil
	}
	p := &Packed{rs: rs, nb: cols / t.BlockSize(), rows: len(w) / rs}
	tile, band := packLayout(t, p.nb, batch)
	if tile != nil && p.rows >= 8 {
		p.tile = tile
		p.tiles = p.packTiles(w, t.TypeSize(), 8, tile.chunk, tile.packed, func(dst, src []byte, blocks int) {
			tile.pack(&dst[0], &src[0], rs, blocks)
		}, run)
	}
	if band != nil && p.rows >= band.h {
		p.band = band
		p.bands = p.packTiles(w, t.TypeSize(), band.h, band.chunk, band.packed, func(dst, src []byte, blocks int) {
			band.pack(dst, src, rs, blocks)
		}, run)
	}
	if p.tile == nil && p.band == nil {
		return nil
	}
	return p
}

// PacksStreamed reports whether t's rows of cols elements, read from
// memory at every product (not in cache), are worth packing once for
// the band kernels: where those take the rows' one-row products from
// memory (StreamedBand) and Pack packs them at their blocks' size
// (Q8_0 with AVX-512 VNNI: packed, its sixteen rows' blocks take 544
// bytes, as in the file). Packed with Pack(t, w, cols, 2), one copy then
// serves every product — a decoded token's, a window's and a prompt's —
// as one sequence of tiles, with nothing repacked and, for several rows,
// the next tile asked for while one multiplies (matMulBand): a window's
// rows cost 1.2–1.3× less than repacked (BenchmarkMatMulStream's
// x_packed), and a decoded token about what the row kernels cost. The
// weights' file is then read only once.
func PacksStreamed(t Type, cols int) bool {
	k := bandFor(t)
	return StreamedBand(t, cols) && 8*k.packed <= 9*k.h*t.TypeSize()
}

// packTiles packs p's whole tiles of h rows of w (blocks of wb bytes), a
// chunk of blocks at a time: block b of tile j at (j·nb + b)·size, where a
// product reads it (matMulTiles, matMulBand). run (nil: none) packs spans
// of tiles in parallel: each writes only its own tiles.
func (p *Packed) packTiles(w []byte, wb, h, chunk, size int, pack func(dst, src []byte, blocks int), run func(n int, do func(i int))) []byte {
	tiles := p.rows / h
	out := make([]byte, tiles*p.nb*size)
	pages.AdviseHuge(out) // fresh memory, faulted in as it is written
	span := func(j0, j1 int) {
		for j := j0; j < j1; j++ {
			for b0 := 0; b0 < p.nb; b0 += chunk {
				pack(out[(j*p.nb+b0)*size:], w[h*j*p.rs+b0*wb:], min(p.nb, b0+chunk)-b0)
			}
		}
	}
	if run == nil || tiles < 2 {
		span(0, tiles)
		return out
	}
	n := min(tiles, packSpans)
	run(n, func(i int) { span(i*tiles/n, (i+1)*tiles/n) })
	return out
}

// packSpans is how many spans PackOn hands out: enough that threads
// sharing them finish together.
const packSpans = 64

// packLayout is the kernel whose layout Pack packs t's rows of nb blocks
// in for batches of batch rows: a tile or a band kernel, or neither.
func packLayout(t Type, nb, batch int) (*tileKernel, *bandKernel) {
	band, tile := bandFor(t), tileFor(t)
	switch {
	case band != nil && (batch > 1 || oneRowBand(band, nb, true, false)):
		tile = nil
	case tile != nil && (batch > 1 || nb < tile.short):
		band = nil
	default:
		return nil, nil
	}
	if tile != nil && 8*tile.packed > 9*8*t.TypeSize() || band != nil && 8*band.packed > 9*band.h*t.TypeSize() {
		return nil, nil // packed rows past the blocks' size by more than an eighth
	}
	return tile, band
}

// Serves says whether p holds t's rows of cols elements in the layout
// their products with batches of batch rows take (Pack): where one-row
// and larger batches take the same kernels, one packed copy serves both.
func (p *Packed) Serves(t Type, cols, batch int) bool {
	if rs, err := t.RowSize(cols); p == nil || err != nil || rs != p.rs {
		return false
	}
	tile, band := packLayout(t, cols/t.BlockSize(), batch)
	return (tile != nil || band != nil) && p.tile == tile && p.band == band
}

// Bytes is the memory the packed copies take.
func (p *Packed) Bytes() int {
	if p == nil {
		return 0
	}
	return len(p.tiles) + len(p.bands)
}

// Rows is the view of rows [r0, r1) of p, for a product over those rows
// of its source (MatMulPacked), or the zero Packed (nothing packed) where
// r0 does not start a tile of each layout: the product then repacks, as
// MatMul does. A value, so that a product's tasks take their views
// without allocating.
func (p *Packed) Rows(r0, r1 int) Packed {
	if p == nil || r0 < 0 || r1 < r0 || r1 > p.rows {
		return Packed{}
	}
	v := *p
	v.rows = r1 - r0
	if p.tile != nil {
		if r0%8 != 0 {
			return Packed{}
		}
		v.tiles = p.tiles[r0/8*p.nb*p.tile.packed:]
	}
	if p.band != nil {
		if r0%p.band.h != 0 {
			return Packed{}
		}
		v.bands = p.bands[r0/p.band.h*p.nb*p.band.packed:]
	}
	return v
}

// tileFor returns the eight-row tile kernel this machine runs for t, if
// any.
func tileFor(t Type) *tileKernel {
	if v := vnniTiles[t]; v != nil && useVNNI {
		return v
	}
	return simdTiles[t]
}

// tilesFor returns p's tiles of k, if p holds them for rows rows of rs
// bytes (nil: the caller repacks).
func (p *Packed) tilesFor(k *tileKernel, rs, rows int) []byte {
	if p == nil || p.tile != k || p.rs != rs || p.rows != rows {
		return nil
	}
	return p.tiles
}

// bandsFor returns p's band tiles of k, if p holds them for rows rows
// of rs bytes.
func (p *Packed) bandsFor(k *bandKernel, rs, rows int) []byte {
	if p == nil || p.band != k || p.rs != rs || p.rows != rows {
		return nil
	}
	return p.bands
}
