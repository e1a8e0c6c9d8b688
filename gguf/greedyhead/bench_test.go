package greedyhead

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// BenchmarkArgMax: the greedy tokens of k activations through the shadow
// against the full head (quant.MatMul, then backend.ArgMax per row), one
// thread each, on the built-in model's head shape (32000×192 F16).
// Activations are aimed at a row with noise of the same size as the aim
// ("aimed": a confident model's) or drawn at random ("random": every
// logit a close call). x_full is the full head's time over the shadow's;
// cands the rows dotted exactly per token.
func BenchmarkArgMax(b *testing.B) {
	const rows, n = 32000, 192
	typ := quant.F16
	rng := rand.New(rand.NewPCG(5, 6))
	wf := normal(rng, rows*n, 0.05)
	w := encode(b, typ, wf)
	h, err := New(typ, w, rows, n)
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"aimed", "random"} {
		for _, k := range []int{1, 2, 4, 5} {
			b.Run(fmt.Sprintf("%s/k=%d", kind, k), func(b *testing.B) {
				batch, err := quant.NewBatch(typ, n, k)
				if err != nil {
					b.Fatal(err)
				}
				acts := make([]*quant.Activation, k)
				for i := range k {
					x := normal(rng, n, 1)
					if kind == "aimed" {
						j := rng.IntN(rows)
						for e := range x {
							x[e] += 20 * wf[j*n+e]
						}
					}
					if err := batch.Quantize(i, x); err != nil {
						b.Fatal(err)
					}
					acts[i] = batch.Row(i)
				}
				out := make([]float32, k*rows)
				want, got := make([]int, k), make([]int, k)
				full := func() {
					quant.MatMul(typ, w, batch, out, rows)
					for i := range k {
						want[i] = backend.ArgMax(out[i*rows : (i+1)*rows])
					}
				}
				var s Scratch
				shadow := func() { h.ArgMax(acts, got, &s) }
				best := func(f func()) time.Duration {
					m := time.Duration(1 << 62)
					for range 5 {
						t0 := time.Now()
						f()
						m = min(m, time.Since(t0))
					}
					return m
				}
				var tf, ts time.Duration
				b.ResetTimer()
				for range b.N {
					tf += best(full)
					ts += best(shadow)
				}
				for i := range k {
					if got[i] >= 0 && got[i] != want[i] {
						b.Fatalf("row %d: %d, the full head's %d", i, got[i], want[i])
					}
				}
				b.ReportMetric(float64(tf)/float64(ts), "x_full")
				b.ReportMetric(float64(tf.Microseconds())/float64(b.N), "full_us")
				b.ReportMetric(float64(ts.Microseconds())/float64(b.N), "shadow_us")
				b.ReportMetric(float64(s.Candidates)/float64(max(s.Tokens, 1)), "cands")
				b.ReportMetric(float64(s.Unsettled)/float64(s.Unsettled+s.Tokens), "unsettled")
			})
		}
	}
}
