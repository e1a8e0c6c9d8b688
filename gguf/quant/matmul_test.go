package quant_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// fillBatch quantises normal rows into b, or (random, raw) writes random
// blocks into its rows through Quantize's figures: random and raw rows
// are quantised from floats first, then their bytes overwritten and the
// figures recomputed by ResetFigures.
func fillBatch(t testing.TB, rng *rand.Rand, b *quant.Batch, kind string) {
	for i := range b.Rows() {
		a := b.Row(i)
		if err := b.Quantize(i, normal(rng, a.N)); err != nil {
			t.Fatal(err)
		}
		if kind != "quantised" {
			randomBlocks(rng, a.Type, a.Data, kind == "raw")
			quant.Refigure(b, i)
		}
	}
}

// TestMatMulMatchesVecDot holds MatMul, tile kernels and all, to the Go
// VecDot of every weight row with every activation row, bit for bit: on
// row counts around the tile of eight, lengths that leave partial rounds
// and cross the repacked chunks, and quantised, random and raw blocks.
func TestMatMulMatchesVecDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	types := append([]quant.Type{quant.Q4_1, quant.F16}, quant.TileTypes()...)
	t.Logf("tile kernels for %v", quant.TileTypes())
	for _, typ := range types {
		at, _ := quant.VecDotType(typ)
		qk := max(typ.BlockSize(), at.BlockSize())
		for _, shape := range []struct{ rows, blocks, batch int }{
			{8, 1, 2}, {9, 6, 3}, {16, 7, 2}, {13, 8, 5}, {24, 9, 2}, {8, 33, 4}, {17, 40, 3}, {8, 70, 2}, {32, 12, 1},
		} {
			n := shape.blocks * qk
			w := make([]byte, mustRowSize(t, typ, n*shape.rows))
			b, err := quant.NewBatch(typ, n, shape.batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"quantised", "random", "raw"} {
				if kind == "quantised" {
					if err := quant.Quantize(typ, normal(rng, n*shape.rows), w); err != nil {
						t.Fatal(err)
					}
				} else {
					randomBlocks(rng, typ, w, kind == "raw")
				}
				fillBatch(t, rng, b, kind)
				stride := shape.rows + 3
				out := make([]float32, shape.batch*stride)
				for i := range out {
					out[i] = float32(math.NaN())
				}
				quant.MatMul(typ, w, b, out, stride)
				rs := len(w) / shape.rows
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
	_ = errors.New
}
