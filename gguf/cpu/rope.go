package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
)

// ropeJob rotates the heads of one row (one position) per task.
type ropeJob struct {
	x       []float32
	cols    int
	headDim int
	pos     int
	r       *backend.RoPE
	angles  backend.RoPEAngles
	scratch [][]float32
}

// RoPE implements backend.Backend, following ggml's rope kernel: per
// position a cache of (cos, sin) for each pair (backend.RoPEAngles).
func (b *Backend) RoPE(x backend.Tensor, headDim, pos int, r *backend.RoPE) {
	if headDim <= 0 || x.Cols%headDim != 0 || r.Dims > headDim || r.Dims%2 != 0 || (r.Factors != nil && len(r.Factors) < r.Dims/2) {
		panic(fmt.Sprintf("cpu: RoPE of %d columns, head %d, dims %d, %d factors", x.Cols, headDim, r.Dims, len(r.Factors)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.growScratch(headDim)
	b.rope = ropeJob{x: data(x), cols: x.Cols, headDim: headDim, pos: pos, r: r, angles: r.Angles(), scratch: b.scratch}
	b.pool.run(x.Rows, &b.rope)
	b.rope = ropeJob{}
}

func (j *ropeJob) do(w, t int) {
	r := j.r
	cache := j.scratch[w][:r.Dims]
	j.angles.At(j.pos+t, cache)
	row := j.x[t*j.cols : (t+1)*j.cols]
	n := r.Dims
	for h := 0; h < j.cols; h += j.headDim {
		x := row[h : h+j.headDim]
		for i0 := 0; i0 < n; i0 += 2 {
			c, s := cache[i0], cache[i0+1]
			a, b := i0, i0+1 // llama's adjacent pairs
			if r.NeoX {
				a, b = i0/2, i0/2+n/2
			}
			x0, x1 := x[a], x[b]
			x[a] = float32(x0*c) - float32(x1*s)
			x[b] = float32(x0*s) + float32(x1*c)
		}
	}
}
