package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// tileBytes is the weight bytes one task of a batched product covers: they
// stay in the core's L1/L2 cache while every activation row is dotted with
// them.
const tileBytes = 16 << 10

// tasksPerThread oversubscribes the workers so that the atomic hand-out
// evens out cores that run at different speeds.
const tasksPerThread = 4

// quantJob converts activation rows to the weight's activation format.
type quantJob struct {
	x    []float32
	cols int
	acts []quant.Activation
}

func (j *quantJob) do(_, t int) {
	if err := j.acts[t].Quantize(j.x[t*j.cols : (t+1)*j.cols]); err != nil {
		panic(err) // sizes are fixed by MatMul
	}
}

// matmulJob dots a tile of weight rows with every activation row.
type matmulJob struct {
	w     *weight
	acts  []quant.Activation
	dst   []float32
	chunk int
}

func (j *matmulJob) do(_, t int) {
	w := j.w
	r0, r1 := split(t, j.chunk, w.rows)
	rows := w.data[r0*w.rowSize : r1*w.rowSize]
	for i := range j.acts {
		out := j.dst[i*w.rows+r0 : i*w.rows+r1]
		quant.MatVec(w.typ, rows, &j.acts[i], out)
	}
}

// MatMul implements backend.Backend.
func (b *Backend) MatMul(dst backend.Tensor, wt backend.Weight, x backend.Tensor) {
	w := asWeight(wt)
	n := x.Rows
	if x.Cols != w.cols || dst.Cols != w.rows || dst.Rows != n {
		panic(fmt.Sprintf("cpu: MatMul %d × %d = (%d × %d) · (%d × %d)ᵀ", dst.Rows, dst.Cols, n, x.Cols, w.rows, w.cols))
	}
	b.mu.Lock()
	defer b.mu.Unlock()

	acts := b.activations(w.act, n, w.cols)
	b.quan = quantJob{x: data(x), cols: w.cols, acts: acts}
	b.pool.run(n, &b.quan)

	chunk := ceilDiv(w.rows, b.threads*tasksPerThread)
	if n > 1 {
		// A batch re-reads each tile once per activation row: keep
		// tiles cache-sized, but still enough of them to share out.
		chunk = min(chunk, max(1, tileBytes/w.rowSize))
	}
	b.mm = matmulJob{w: w, acts: acts, dst: data(dst), chunk: chunk}
	b.pool.run(ceilDiv(w.rows, chunk), &b.mm)
	b.mm, b.quan = matmulJob{}, quantJob{}
}

// activations returns n activations of type t and width cols over the
// backend's reusable buffer. Called with b.mu held.
func (b *Backend) activations(t quant.Type, n, cols int) []quant.Activation {
	rs, err := t.RowSize(cols)
	if err != nil {
		panic(err) // checked when the weight was made
	}
	if need := n * rs; len(b.actBuf) < need {
		b.actBuf = make([]byte, need)
	}
	if cap(b.acts) < n {
		b.acts = make([]quant.Activation, n)
	}
	acts := b.acts[:n]
	for i := range acts {
		acts[i] = quant.Activation{Type: t, N: cols, Data: b.actBuf[i*rs : (i+1)*rs : (i+1)*rs]}
	}
	return acts
}
