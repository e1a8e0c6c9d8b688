package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

// geluGLURef is geluGLU one half at a time (quant.FP32ToFP16 per
// element), as it was: the reference the block version must equal and
// beat.
func geluGLURef(dst, gate, up []float32) {
	tab := geluTable()
	for i, x := range gate {
		switch {
		case x <= -10:
			dst[i] = 0
		case x >= 10:
			dst[i] = x * up[i]
		default:
			dst[i] = tab[quant.FP32ToFP16(x)] * up[i]
		}
	}
}

// TestGELUGLUMatchesRef: the block GELU gives the per-element bits on
// every value (the table's edges at ±10, NaN, infinities, subnormals,
// halves' rounding ties), for lengths that leave partial blocks, with
// dst aliasing gate as the encoders call it.
func TestGELUGLUMatchesRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	vals := []float32{-10, 10, -9.999999, 9.999999, 0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 65504, 65520, -65520,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1.00048828125, 2.0009765625}
	for range 3000 {
		vals = append(vals, float32(rng.NormFloat64()*4))
	}
	for _, n := range []int{1, 7, 255, 256, 257, len(vals)} {
		gate, up := vals[:n], make([]float32, n)
		for i := range up {
			up[i] = float32(rng.NormFloat64())
		}
		want, got := make([]float32, n), append([]float32(nil), gate...)
		geluGLURef(want, gate, up)
		geluGLU(got, got, up)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(want[i] != want[i] && got[i] != got[i]) {
				t.Fatalf("n %d: gelu(%v)·%v is %v, per element %v", n, gate[i], up[i], got[i], want[i])
			}
		}
	}
}

// BenchmarkGELUGLU: GeGLU's and the encoders' GELU over a feed-forward
// row block (64 × 8192), against the per-element conversion it
// replaced (x_perelement: how many times faster).
func BenchmarkGELUGLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 64 * 8192
	gate, up, dst := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range gate {
		gate[i], up[i] = float32(3*rng.NormFloat64()), float32(rng.NormFloat64())
	}
	best := math.Inf(1)
	for range 3 {
		start := time.Now()
		geluGLURef(dst, gate, up)
		best = min(best, time.Since(start).Seconds())
	}
	b.SetBytes(int64(4 * n))
	for b.Loop() {
		geluGLU(dst, gate, up)
	}
	b.ReportMetric(best/(b.Elapsed().Seconds()/float64(b.N)), "x_perelement")
}
