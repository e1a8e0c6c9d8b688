package quant_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

// Benchmarks report weight bytes read per second (GB/s) and, as
// x_memcpy, that rate over the rate copy() moves the same number of bytes
// on this machine in the same run: 1.0 would be running at memory speed.

const benchCols, benchRows = 4096, 256

var memcpyRate = sync.OnceValue(func() float64 {
	src := make([]byte, 16<<20)
	dst := make([]byte, len(src))
	best := 0.0
	for range 5 {
		start := time.Now()
		for range 4 {
			copy(dst, src)
		}
		best = max(best, float64(4*len(src))/time.Since(start).Seconds())
	}
	return best
})

func benchMatrix(b *testing.B, typ quant.Type) ([]byte, []float32) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := normal(rng, benchCols*benchRows)
	q := make([]byte, mustRowSize(b, typ, len(w)))
	if err := quant.Quantize(typ, w, q); err != nil {
		b.Fatal(err)
	}
	return q, normal(rng, benchCols)
}

func report(b *testing.B, bytes int) {
	rate := float64(bytes) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate/1e9, "GB/s")
	b.ReportMetric(rate/memcpyRate(), "x_memcpy")
}

func BenchmarkMatVec(b *testing.B) {
	for _, typ := range goldenTypes {
		b.Run(typ.String(), func(b *testing.B) {
			q, x := benchMatrix(b, typ)
			a, _ := quant.NewActivation(typ, benchCols)
			if err := a.Quantize(x); err != nil {
				b.Fatal(err)
			}
			out := make([]float32, benchRows)
			b.SetBytes(int64(len(q)))
			b.ResetTimer()
			for b.Loop() {
				quant.MatVec(typ, q, a, out)
			}
			report(b, len(q))
		})
	}
}

func BenchmarkDequantize(b *testing.B) {
	for _, typ := range goldenTypes {
		b.Run(typ.String(), func(b *testing.B) {
			q, _ := benchMatrix(b, typ)
			dst := make([]float32, benchCols*benchRows)
			b.SetBytes(int64(len(q)))
			b.ResetTimer()
			for b.Loop() {
				if err := quant.Dequantize(typ, q, dst); err != nil {
					b.Fatal(err)
				}
			}
			report(b, len(q))
		})
	}
}

func BenchmarkQuantizeActivation(b *testing.B) {
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q8_1, quant.Q8_K, quant.F16} {
		b.Run(typ.String(), func(b *testing.B) {
			x := normal(rand.New(rand.NewPCG(5, 6)), benchCols)
			dst := make([]byte, mustRowSize(b, typ, benchCols))
			b.SetBytes(4 * benchCols)
			for b.Loop() {
				if err := quant.Quantize(typ, x, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
