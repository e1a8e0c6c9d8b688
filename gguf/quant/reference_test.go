package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// tolerances per weight type, measured with margin on normal data:
//   - rmse: quantisation error RMS(dequant(quant(x)) − x) / RMS(x)
//   - act:  |VecDot − Σ dequant(w)·x| / Σ|dequant(w)·x|, the error the
//     activation's own quantisation adds, in float64
//   - exact: |VecDot − Σ dequant(w)·dequant(a)| / Σ|dequant(w)·dequant(a)|,
//     which is float32 rounding alone
var tolerances = map[quant.Type]struct{ rmse, act, exact float64 }{
	quant.F32:  {0, 1e-6, 1e-6},
	quant.F16:  {2.5e-4, 1e-4, 1e-6},
	quant.BF16: {2e-3, 1e-3, 1e-6},
	quant.Q8_0: {6.5e-3, 2e-3, 1e-6},
	quant.Q4_0: {0.10, 2e-3, 1e-6},
	// Q4_1 and Q5_1 dot with Q8_1, whose block sum d·Σq is stored as fp16.
	quant.Q4_1:   {0.09, 2e-3, 2e-4},
	quant.Q5_0:   {0.05, 2e-3, 1e-6},
	quant.Q5_1:   {0.045, 2e-3, 2e-4},
	quant.IQ4_NL: {0.09, 2e-3, 1e-6},
	quant.Q2_K:   {0.35, 2e-3, 1e-6},
	quant.Q3_K:   {0.18, 2e-3, 1e-6},
	quant.Q4_K:   {0.085, 2e-3, 1e-6},
	quant.Q5_K:   {0.043, 2e-3, 1e-6},
	quant.Q6_K:   {0.021, 2e-3, 1e-6},
	quant.IQ4_XS: {0.09, 2e-3, 1e-6},
	quant.MXFP4:  {0.2, 2e-3, 1e-6},
}

func normal(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func TestAgainstFloat64Reference(t *testing.T) {
	const n, rows = 2048, 16
	rng := rand.New(rand.NewPCG(1, 2))
	for typ, tol := range tolerances {
		w := normal(rng, n*rows)
		q := make([]byte, mustRowSize(t, typ, n*rows))
		if err := quant.Quantize(typ, w, q); err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, n*rows)
		if err := quant.Dequantize(typ, q, deq); err != nil {
			t.Fatal(err)
		}
		var se, ss float64
		for i := range w {
			d := float64(deq[i]) - float64(w[i])
			se += d * d
			ss += float64(w[i]) * float64(w[i])
		}
		if rmse := math.Sqrt(se / ss); rmse > tol.rmse {
			t.Errorf("%s: quantisation RMS error %.3g, tolerance %.3g", typ, rmse, tol.rmse)
		}

		x := normal(rng, n)
		a, err := quant.NewActivation(typ, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Quantize(x); err != nil {
			t.Fatal(err)
		}
		ax := make([]float32, n)
		if err := quant.Dequantize(a.Type, a.Data, ax); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, rows)
		quant.MatVec(typ, q, a, out)
		rs := len(q) / rows
		var worstAct, worstExact float64
		for r := range rows {
			wr := deq[r*n : (r+1)*n]
			var sumX, magX, sumA, magA float64
			for i := range n {
				sumX += float64(wr[i]) * float64(x[i])
				magX += math.Abs(float64(wr[i]) * float64(x[i]))
				sumA += float64(wr[i]) * float64(ax[i])
				magA += math.Abs(float64(wr[i]) * float64(ax[i]))
			}
			if got := quant.VecDot(typ, q[r*rs:(r+1)*rs], a); got != out[r] {
				t.Errorf("%s row %d: VecDot %g != MatVec %g", typ, r, got, out[r])
			}
			worstAct = max(worstAct, math.Abs(float64(out[r])-sumX)/magX)
			worstExact = max(worstExact, math.Abs(float64(out[r])-sumA)/magA)
		}
		if worstAct > tol.act {
			t.Errorf("%s: VecDot vs float64 on the unquantised activation: %.3g, tolerance %.3g", typ, worstAct, tol.act)
		}
		if worstExact > tol.exact {
			t.Errorf("%s: VecDot vs float64 on the same quantised values: %.3g, tolerance %.3g", typ, worstExact, tol.exact)
		}
		t.Logf("%-6s rmse %.3g  dot-vs-f64 %.3g  dot-vs-f64(same inputs) %.3g", typ, math.Sqrt(se/ss), worstAct, worstExact)
	}
}

func mustRowSize(t testing.TB, typ quant.Type, n int) int {
	t.Helper()
	rs, err := typ.RowSize(n)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
