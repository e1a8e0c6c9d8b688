package encoder

import (
	"runtime"
	"sync"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// attend writes into out (n × heads·d) every token's attention over every
// token, head by head: softmax(scale · q·k) weighting v, as ggml's
// mul_mat, soft_max_ext and mul_mat do it without a cache (float32 dot
// products, the exponentials' sum wide). The heads are shared out among
// goroutines; each head's arithmetic is the same whoever computes it.
func attend(out, q, k, v []float32, n, heads, d int, scale float32) {
	w := heads * d
	workers := min(heads, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	next := make(chan int, heads)
	for h := range heads {
		next <- h
	}
	close(next)
	for range workers {
		wg.Go(func() {
			p := make([]float32, n)
			acc := make([]float32, d)
			for h := range next {
				off := h * d
				for i := range n {
					qi := q[i*w+off : i*w+off+d]
					top := float32(-3.4e38)
					for j := range n {
						kj := k[j*w+off : j*w+off+d]
						var s float32
						for t, x := range qi {
							s += float32(x * kj[t]) // rounded: arm64 would fuse it, and the bits must agree everywhere
						}
						p[j] = s * scale
						top = max(top, p[j])
					}
					var sum float64
					for j, x := range p {
						e := float32(detmath.Exp(float64(x - top)))
						p[j] = e
						sum += float64(e)
					}
					inv := float32(1 / sum)
					clear(acc)
					for j, pj := range p {
						pj *= inv
						vj := v[j*w+off : j*w+off+d]
						for t, x := range vj {
							acc[t] += float32(pj * x)
						}
					}
					copy(out[i*w+off:i*w+off+d], acc)
				}
			}
		})
	}
	wg.Wait()
}
