package quant_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// fillBatch quantises normal rows into b; for the other kinds it then
// overwrites their bytes with blocks as fillBlocks makes them, and has
// the batch's per-block figures recomputed.
func fillBatch(t testing.TB, rng *rand.Rand, b *quant.Batch, kind string) {
	for i := range b.Rows() {
		a := b.Row(i)
		if err := b.Quantize(i, normal(rng, a.N)); err != nil {
			t.Fatal(err)
		}
		if kind != "quantised" {
			fillBlocks(rng, a.Type, a.Data, kind)
			quant.Refigure(b, i)
		}
	}
}

// fillBlocks fills b with random blocks: with finite scales (random),
// any bytes (raw), or finite scales of which some are then made ±Inf,
// NaN or ±0 (specials: raw bytes rarely make an infinity, whose products
// with zero are NaN).
func fillBlocks(rng *rand.Rand, typ quant.Type, b []byte, kind string) {
	randomBlocks(rng, typ, b, kind == "raw")
	if kind != "specials" {
		return
	}
	bs := typ.TypeSize()
	for o := 0; o+bs <= len(b); o += bs {
		if rng.IntN(3) != 0 {
			continue
		}
		special := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1))}[rng.IntN(5)]
		if typ == quant.Q8_K {
			binary.LittleEndian.PutUint32(b[o:], math.Float32bits(special))
		}
		for _, f := range halfFields[typ] {
			binary.LittleEndian.PutUint16(b[o+f:], quant.FP32ToFP16(special))
		}
	}
}

// TestMatMulMatchesVecDot holds MatMul, tile kernels and all, to the Go
// VecDot of every weight row with every activation row, bit for bit: on
// row counts around the tile of eight, lengths that leave partial rounds
// and cross the repacked chunks, and quantised, random, raw and special
// blocks.
func TestMatMulMatchesVecDot(t *testing.T) {
	for _, cfg := range kernelConfigs() {
		if cfg.name == "no tiles" || cfg.name == "Go" {
			continue // the row kernels, which TestSIMDMatchesGo holds to Go
		}
		t.Run(cfg.name, func(t *testing.T) {
			defer cfg.set()()
			testMatMulMatchesVecDot(t)
		})
	}
}

func testMatMulMatchesVecDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	types := append([]quant.Type{quant.Q4_1, quant.F16, quant.BF16, quant.F32}, quant.TileTypes()...)
	t.Logf("tile kernels for %v", quant.TileTypes())
	for _, typ := range types {
		at, _ := quant.VecDotType(typ)
		qk := max(typ.BlockSize(), at.BlockSize())
		for _, shape := range []struct{ rows, blocks, batch int }{
			{8, 1, 2}, {9, 6, 3}, {16, 7, 2}, {13, 8, 5}, {24, 9, 2}, {8, 33, 4}, {17, 40, 3}, {8, 70, 2}, {32, 12, 1}, {16, 6, 1}, {11, 3, 1}, {8, 40, 1}, {5, 17, 1},
			// Sixteen-row tiles with four activation rows at a time and
			// the rest one by one, across repacked chunks.
			{16, 33, 4}, {40, 70, 9}, {48, 5, 6}, {31, 64, 5},
			// Five to nine activation rows in one call (wide), and more
			// in calls of eight and the rest; the short ones for the
			// K-quants' 256-element blocks.
			{16, 9, 7}, {32, 40, 8}, {33, 60, 9}, {17, 12, 13}, {16, 60, 18},
			{16, 2, 5}, {32, 3, 7}, {17, 4, 8}, {16, 8, 9}, {33, 1, 13},
			// One activation row by the band kernels (oneRowBand): a
			// tile of sixteen and the rest by the eight-row tiles or the
			// row kernel.
			{20, 2, 1}, {33, 64, 1}, {25, 8, 1},
			// One activation row by the row kernels past whole groups of
			// eight blocks: the tail padded to a group (groupTail).
			{19, 63, 1}, {9, 13, 1}, {7, 63, 2},
			// The float types' band kernels, across their chunks of 1024
			// elements, with a partial round and a partial tile of rows.
			{9, 2100, 5},
			// The float types' row kernels: rows of whole rounds of 32,
			// up to eight activation rows at a time, and one
			// (oneRowFloat); long rows in groups that hold 40 KB
			// (2048: 3+4+4 of eleven; 1536: 4+5 of nine).
			{19, 192, 3}, {7, 96, 8}, {5, 32, 2}, {21, 192, 1}, {6, 32, 1}, {6, 2048, 11}, {7, 1536, 9},
		} {
			n := shape.blocks * qk
			if n > 2048 && typ.BlockSize() > 1 {
				continue
			}
			w := make([]byte, mustRowSize(t, typ, n*shape.rows))
			b, err := quant.NewBatch(typ, n, shape.batch)
			if err != nil {
				t.Fatal(err)
			}
			b.SetCached(cachedBatches)
			b.SetRowsAhead(aheadBatches)
			for _, kind := range []string{"quantised", "random", "raw", "specials"} {
				if kind == "quantised" {
					if err := quant.Quantize(typ, normal(rng, n*shape.rows), w); err != nil {
						t.Fatal(err)
					}
				} else {
					fillBlocks(rng, typ, w, kind)
				}
				fillBatch(t, rng, b, kind)
				stride := shape.rows + 3
				out := make([]float32, shape.batch*stride)
				for i := range out {
					out[i] = float32(math.NaN())
				}
				quant.MatMul(typ, w, b, out, stride)
				rs := len(w) / shape.rows
				checkPacked(t, typ, w, n, shape.rows, b, out, stride)
				restore := quant.SetSIMD(false)
				for i := range shape.batch {
					for r := range shape.rows {
						want := quant.VecDot(typ, w[r*rs:(r+1)*rs], b.Row(i))
						if got := out[i*stride+r]; !sameFloat(got, want) {
							t.Errorf("%s %d×%d blocks, batch %d, %s: out[%d][%d] = %g (%#08x), VecDot %g (%#08x)",
								typ, shape.rows, shape.blocks, shape.batch, kind, i, r,
								got, math.Float32bits(got), want, math.Float32bits(want))
						}
					}
					for r := shape.rows; r < stride && i*stride+r < len(out); r++ {
						if !math.IsNaN(float64(out[i*stride+r])) {
							t.Fatalf("%s: MatMul wrote out[%d][%d], past its rows", typ, i, r)
						}
					}
				}
				restore()
			}
		}
	}
}

// checkPacked holds MatMulPacked, with w (rows of n elements) packed,
// to MatMul's outputs out, bit for bit: the whole matrix, and where it
// has more than one task's tile of rows (16), the span from row 16 with
// its view of the packed rows, as the CPU backend's tasks take them.
// w is packed for b's kernels, and where quant packs it for products
// from memory (PacksStreamed), as the CPU backend packs it then: one
// copy for every batch (the band kernels' asks for the next packed tile
// run where b does not expect its weights in cache).
func checkPacked(t *testing.T, typ quant.Type, w []byte, n, rows int, b *quant.Batch, out []float32, stride int) {
	t.Helper()
	packs := []*quant.Packed{quant.Pack(typ, w, n, b.Rows())}
	if quant.PacksStreamed(typ, n) {
		packs = append(packs, quant.Pack(typ, w, n, 2))
	}
	rs := len(w) / rows
	for k, p := range packs {
		for _, r0 := range []int{0, 16} {
			if r0 > 0 && rows <= r0 {
				continue
			}
			got := make([]float32, len(out))
			view := p.Rows(r0, rows)
			quant.MatMulPacked(typ, w[r0*rs:], &view, b, got, stride)
			for i := range b.Rows() {
				for r := r0; r < rows; r++ {
					if g, want := got[i*stride+r-r0], out[i*stride+r]; !sameFloat(g, want) {
						t.Fatalf("%s %d×%d, batch %d: packed (copy %d) from row %d, out[%d][%d] = %g, MatMul %g", typ, rows, n, b.Rows(), k, r0, i, r, g, want)
					}
				}
			}
		}
	}
}

// TestPack: Q8_0 is packed where it has tile kernels, and the types
// whose packed rows would be larger than their blocks (Q4_0, Q4_K,
// Q6_K), or that have none, are not; a packed copy is about the
// weights' size; and one packed for other kernels than a call takes (a
// machine's kernels switched since) still gives MatMul's bits.
func TestPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tiled := quant.TileTypes()
	// Q8_0's tiles are its blocks' size packed with VNNI's and SDOT's
	// kernels; AVX2's (without VNNI) take twice that.
	compact := slices.Contains(tiled, quant.Q8_0) && (runtime.GOARCH == "arm64" || quant.HaveVNNI())
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.Q4_1, quant.F16, quant.F32} {
		n := 256
		w := make([]byte, mustRowSize(t, typ, n*48))
		if err := quant.Quantize(typ, normal(rng, n*48), w); err != nil {
			t.Fatal(err)
		}
		p := quant.Pack(typ, w, n, 3)
		if want := typ == quant.Q8_0 && compact; (p != nil) != want {
			t.Errorf("%s: packed %v, has tile kernels %v", typ, p != nil, want)
		}
		if p == nil {
			continue
		}
		if got := p.Bytes(); got < len(w) || got > 9*len(w)/8 {
			t.Errorf("%s: %d bytes packed for %d bytes of weights", typ, got, len(w))
		}
		if v := p.Rows(8, 48); v.Bytes() != 0 && quant.HaveBand(typ) {
			t.Errorf("%s: a view from row 8, within a band tile, was made", typ)
		}
	}
	if !compact {
		t.Skip("Q8_0 is not packed on this machine")
	}
	// One copy serves one-row and larger batches where both take the
	// same kernels: with Q8_0 band kernels, rows of 16 blocks (the band's
	// one-row form), not rows of 6 (the eight-row tiles); without, the
	// eight-row tiles take both where they take a row (under 8 blocks).
	for _, cols := range []int{192, 512} {
		w := make([]byte, mustRowSize(t, quant.Q8_0, cols*32))
		p := quant.Pack(quant.Q8_0, w, cols, 1)
		if p == nil {
			if cols < 256 || quant.HaveBand(quant.Q8_0) {
				t.Errorf("Q8_0 × %d: nothing packed for one row", cols)
			}
			continue // the row kernel takes one row
		}
		if !p.Serves(quant.Q8_0, cols, 1) || p.Serves(quant.Q8_0, 2*cols, 1) || p.Serves(quant.Q4_0, cols, 1) {
			t.Errorf("Q8_0 × %d packed for one row: serves it %v, twice as wide %v, Q4_0 %v",
				cols, p.Serves(quant.Q8_0, cols, 1), p.Serves(quant.Q8_0, 2*cols, 1), p.Serves(quant.Q4_0, cols, 1))
		}
		want := cols == 512 || !quant.HaveBand(quant.Q8_0)
		if got := p.Serves(quant.Q8_0, cols, 3); got != want {
			t.Errorf("Q8_0 × %d packed for one row serves batches of 3: %v, want %v", cols, got, want)
		}
	}
	n, rows := 192, 40
	w := make([]byte, mustRowSize(t, quant.Q8_0, n*rows))
	if err := quant.Quantize(quant.Q8_0, normal(rng, n*rows), w); err != nil {
		t.Fatal(err)
	}
	// Packed for all of this machine's kernels, used under each setting.
	packs := map[int]*quant.Packed{1: quant.Pack(quant.Q8_0, w, n, 1), 3: quant.Pack(quant.Q8_0, w, n, 3)}
	for _, cfg := range kernelConfigs() {
		t.Run(cfg.name, func(t *testing.T) {
			defer cfg.set()()
			for batch, p := range packs {
				b, err := quant.NewBatch(quant.Q8_0, n, batch)
				if err != nil {
					t.Fatal(err)
				}
				fillBatch(t, rng, b, "quantised")
				want, got := make([]float32, batch*rows), make([]float32, batch*rows)
				quant.MatMul(quant.Q8_0, w, b, want, rows)
				quant.MatMulPacked(quant.Q8_0, w, p, b, got, rows)
				for i := range want {
					if !sameFloat(got[i], want[i]) {
						t.Fatalf("batch %d: packed out[%d] = %g, MatMul %g", batch, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestPackOn: packed in parts on several goroutines (PackOn, as the CPU
// backend packs on its workers), the tiles and bands are Pack's, byte
// for byte, whatever the number of tiles.
func TestPackOn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	parallel := func(n int, do func(int)) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { do(i) })
		}
		wg.Wait()
	}
	for _, cols := range []int{256, 2048} {
		for _, rows := range []int{16, 40, 16*70 + 8} {
			w := make([]byte, mustRowSize(t, quant.Q8_0, rows*cols))
			if err := quant.Quantize(quant.Q8_0, normal(rng, rows*cols), w); err != nil {
				t.Fatal(err)
			}
			for _, batch := range []int{1, 2} {
				want, got := quant.Pack(quant.Q8_0, w, cols, batch), quant.PackOn(quant.Q8_0, w, cols, batch, parallel)
				if (want == nil) != (got == nil) {
					t.Fatalf("%d×%d, batch %d: Pack packed %v, PackOn %v", rows, cols, batch, want != nil, got != nil)
				}
				if want == nil {
					continue
				}
				wt, wb := quant.PackedBytes(want)
				gt, gb := quant.PackedBytes(got)
				if !bytes.Equal(wt, gt) || !bytes.Equal(wb, gb) {
					t.Errorf("%d×%d, batch %d: packed in parts differs from packed whole", rows, cols, batch)
				}
			}
		}
	}
}

func TestBatchErrors(t *testing.T) {
	if _, err := quant.NewBatch(quant.Q8_1, 64, 2); err == nil {
		t.Error("a batch for Q8_1 weights (no dot product) was made")
	}
	if _, err := quant.NewBatch(quant.Q4_K, 64, 2); err == nil {
		t.Error("a batch of 64-element rows for Q4_K (256-element blocks) was made")
	}
	if _, err := quant.NewBatch(quant.Q4_0, 64, -1); err == nil {
		t.Error("a batch of -1 rows was made")
	}
	b, err := quant.NewBatch(quant.Q4_0, 64, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Quantize(2, make([]float32, 64)); err == nil {
		t.Error("row 2 of a 2-row batch was quantised")
	}
	if err := b.Quantize(0, make([]float32, 32)); err == nil {
		t.Error("a 32-element row was quantised into a 64-element batch")
	}
	if err := b.Reset(quant.Q6_K, 512, 3); err != nil || b.Rows() != 3 || b.Row(2).N != 512 || b.Row(2).Type != quant.Q8_K {
		t.Errorf("Reset to 3 rows of 512 for Q6_K: %v, %d rows, row 2 %d × %s", err, b.Rows(), b.Row(2).N, b.Row(2).Type)
	}
}

// FuzzMatMulMatchesVecDot: any weight and activation bytes give MatMul
// the bits of the Go VecDot. The weight row's bytes make seventeen rows
// (rotated by a byte each, so they differ: a sixteen-row tile and one
// more), the activation's a batch of five rows (four at once and one),
// of two and of one. The float types are fuzzed with the tile types.
func FuzzMatMulMatchesVecDot(f *testing.F) {
	// The tile types, and the float types' band kernels.
	types := append(quant.TileTypes(), quant.F16, quant.BF16, quant.F32)
	addDotSeeds(f, types, rand.New(rand.NewPCG(23, 24)))
	f.Fuzz(func(t *testing.T, pick uint8, row, act []byte) {
		typ, _, n, rs, as, ok := dotCase(t, types, pick, row, act)
		if !ok {
			return
		}
		const rows = 17
		w := make([]byte, 0, rows*rs)
		for r := range rows {
			w = append(w, row[r%rs:rs]...)
			w = append(w, row[:r%rs]...)
		}
		if pick&0x80 != 0 {
			defer quant.SetZ(false)()    // the AVX2 tiles of four rows at once
			defer quant.SetVNNI(false)() // the AVX2 tiles, where VNNI's would run
		}
		for _, size := range []int{5, 2, 1} {
			b, err := quant.NewBatch(typ, n, size)
			if err != nil {
				t.Fatal(err)
			}
			for i := range size {
				d := b.Row(i).Data
				copy(d, act[:as])
				slices.Reverse(d[:i*as/size])
				quant.Refigure(b, i)
			}
			out := make([]float32, size*rows)
			quant.MatMul(typ, w, b, out, rows)
			restore := quant.SetSIMD(false)
			for i := range size {
				for r := range rows {
					if want := quant.VecDot(typ, w[r*rs:(r+1)*rs], b.Row(i)); !sameFloat(out[i*rows+r], want) {
						t.Fatalf("%s n=%d, batch of %d: out[%d][%d] = %g, VecDot %g", typ, n, size, i, r, out[i*rows+r], want)
					}
				}
			}
			restore()
		}
	})
}

// TestMatMulRowInvariance pins what batch invariance rests on: an
// activation row's outputs are the same bits whatever batch it is
// multiplied in (alone, or with any number of other rows, so in any
// group of four or remainder of the sixteen-row tiles), and whichever
// kernels this machine runs (sixteen-row AVX-512, eight-row VNNI or
// AVX2 tiles, row kernels, or Go), for every type with a tile kernel.
func TestMatMulRowInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const rows, maxBatch = 59, 21 // three sixteen-row tiles, an eight-row one, three rows
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.F16, quant.BF16, quant.F32} {
		n := 3 * 256
		w := make([]byte, mustRowSize(t, typ, n*rows))
		if err := quant.Quantize(typ, normal(rng, n*rows), w); err != nil {
			t.Fatal(err)
		}
		x := normal(rng, n*maxBatch)
		// Each row alone, with the Go kernels: the reference.
		restore := quant.SetSIMD(false)
		want := matMulRows(t, typ, w, rows, x, n, maxBatch, 1)
		restore()
		for _, cfg := range kernelConfigs() {
			func() {
				defer cfg.set()()
				for _, size := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, maxBatch} {
					got := matMulRows(t, typ, w, rows, x, n, maxBatch, size)
					for i := range want {
						if !sameFloat(got[i], want[i]) {
							t.Fatalf("%s, %s, batches of %d: activation row %d, weight row %d: %g, alone %g",
								typ, cfg.name, size, i/rows, i%rows, got[i], want[i])
						}
					}
				}
			}()
		}
	}
}

// matMulRows multiplies the batch rows of n elements in x by w, size
// rows at a time (the last batch shorter), and returns the outputs.
func matMulRows(t *testing.T, typ quant.Type, w []byte, rows int, x []float32, n, batch, size int) []float32 {
	out := make([]float32, batch*rows)
	for i0 := 0; i0 < batch; i0 += size {
		m := min(size, batch-i0)
		b, err := quant.NewBatch(typ, n, m)
		if err != nil {
			t.Fatal(err)
		}
		b.SetCached(cachedBatches)
		b.SetRowsAhead(aheadBatches)
		for i := range m {
			if err := b.Quantize(i, x[(i0+i)*n:(i0+i+1)*n]); err != nil {
				t.Fatal(err)
			}
		}
		quant.MatMul(typ, w, b, out[i0*rows:], rows)
	}
	return out
}

// cachedBatches makes matMulRows's batches expect their weights in cache
// (Batch.SetCached): the band kernels do not prefetch.
var cachedBatches bool

// aheadBatches makes their row kernels ask for the rows ahead
// (Batch.SetRowsAhead).
var aheadBatches bool

type kernelConfig struct {
	name string
	set  func() (restore func())
}

// kernelConfigs are the kernel choices this machine can make MatMul run:
// between them, every tile kernel it has (sixteen-row AVX-512, eight-row
// AVX2 of four activation rows, eight-row VNNI and AVX2 of one), the row
// kernels and Go.
func kernelConfigs() []kernelConfig {
	off := func(fs ...func(bool) func()) func() func() {
		return func() func() {
			var rs []func()
			for _, f := range fs {
				rs = append(rs, f(false))
			}
			return func() {
				for _, r := range slices.Backward(rs) {
					r()
				}
			}
		}
	}
	oneRowBand := func(mode int) func() func() { return func() func() { return quant.SetOneRowBand(mode) } }
	return []kernelConfig{
		{"all kernels", off()},
		{"weights in cache (no prefetching)", func() func() {
			cachedBatches = true
			return func() { cachedBatches = false }
		}},
		{"one-row batches by the band kernels at every width", oneRowBand(1)},
		{"one-row batches never by the band kernels", oneRowBand(-1)},
		{"one-row batches by the row kernels asking ahead", func() func() {
			restore := quant.SetOneRowBand(-1)
			aheadBatches = true
			return func() { aheadBatches = false; restore() }
		}},
		{"band kernels of four rows and one only", off(quant.SetBandTails)},
		{"band kernels asking for each chunk's rows at once", off(quant.SetStreamAhead)},
		{"no AVX-512 tiles", off(quant.SetZ)},
		{"one activation row a tile", off(quant.SetZ, quant.SetY)},
		{"AVX2 one row a tile", off(quant.SetZ, quant.SetY, quant.SetVNNI)},
		{"no tiles", off(quant.SetTiles)},
		{"Go", off(quant.SetSIMD)},
	}
}
