package cpu_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

func TestTmpScale(t *testing.T) {
	const rows, cols = 8192, 2048
	rng := rand.New(rand.NewPCG(1, 1))
	w := normals(rng, rows*cols, 0.02)
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0} {
		data := quantized(t, typ, w)
		for _, th := range []int{1, 2} {
			be := newBackend(t, th)
			wt, _ := be.Weight(typ, rows, cols, data)
			x := tensor(be, 1, cols, normals(rng, cols, 1))
			dst := be.NewTensor(1, rows)
			best := time.Hour
			for r := 0; r < 30; r++ {
				st := time.Now()
				be.MatMul(dst, wt, x)
				best = min(best, time.Since(st))
			}
			t.Logf("%s threads %d: %v (%.1f GB/s)", typ, th, best, float64(len(data))/best.Seconds()/1e9)
		}
	}
}

type countJob struct{ per [4]int; spin int }

func (c *countJob) do(w, t int) {
	c.per[w]++
	x := 0
	for i := 0; i < c.spin; i++ {
		x += i
	}
	_ = x
}
