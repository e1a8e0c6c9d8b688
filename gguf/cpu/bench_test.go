package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

// BenchmarkMatMul measures the threaded matrix product on a 2048 × 2048
// weight, for one token (decode) and a batch of 32 (prefill), against one
// thread of quant.MatVec over the same rows in the same run: speedup is
// what the worker pool adds (ideally the thread count), times what
// quant.MatMul's tile kernels add for a batch and its one-row kernels for
// a token.
func BenchmarkMatMul(b *testing.B) {
	const rows, cols = 2048, 2048
	rng := rand.New(rand.NewPCG(1, 1))
	w := normals(rng, rows*cols, 0.02)
	be := newBackend(b, 0)
	for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		data := quantized(b, typ, w)
		wt, err := be.Weight(typ, rows, cols, data)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/n=%d", typ, n), func(b *testing.B) {
				x := tensor(be, n, cols, normals(rng, n*cols, 1))
				dst := be.NewTensor(n, rows)
				single := singleThread(b, typ, data, read(be, x), n, rows, cols)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					be.MatMul(dst, wt, x)
				}
				per := b.Elapsed() / time.Duration(b.N)
				b.ReportMetric(float64(len(data))/per.Seconds()/1e9, "GB/s")
				b.ReportMetric(float64(single)/float64(per), "speedup")
			})
		}
	}
}

// singleThread times quant.MatVec over every row for each of n inputs.
func singleThread(b *testing.B, typ quant.Type, data []byte, x []float32, n, rows, cols int) time.Duration {
	a, err := quant.NewActivation(typ, cols)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]float32, rows)
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		for i := range n {
			if err := a.Quantize(x[i*cols : (i+1)*cols]); err != nil {
				b.Fatal(err)
			}
			quant.MatVec(typ, data, a, out)
		}
		best = min(best, time.Since(start))
	}
	return best
}
