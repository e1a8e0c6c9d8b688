package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// tasksPerThread oversubscribes the workers so that the atomic hand-out
// evens out cores that run at different speeds.
const tasksPerThread = 4

// tileRows is the granularity of MatMul's tasks: quant.MatMul multiplies
// a batch by weight rows sixteen at a time where the machine has its
// AVX-512 tiles (eight where only the others), so a task boundary
// elsewhere would leave rows to a slower path.
const tileRows = 16

// quantJob converts activation rows to the weight's activation format.
type quantJob struct {
	x     []float32
	cols  int
	batch *quant.Batch
}

func (j *quantJob) do(_, t int) {
	if err := j.batch.Quantize(t, j.x[t*j.cols:(t+1)*j.cols]); err != nil {
		panic(err) // sizes are fixed by MatMul
	}
}

// matmulJob multiplies a span of weight rows by every activation row.
type matmulJob struct {
	w     *weight
	batch *quant.Batch
	dst   []float32
	chunk int
}

func (j *matmulJob) do(_, t int) {
	w := j.w
	r0, r1 := split(t, j.chunk, w.rows)
	quant.MatMul(w.typ, w.data[r0*w.rowSize:r1*w.rowSize], j.batch, j.dst[r0:], w.rows)
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

	if err := b.batch.Reset(w.typ, w.cols, n); err != nil {
		panic(err) // checked when the weight was made
	}
	b.batch.SetCached(b.WeightsCached())
	b.quan = quantJob{x: data(x), cols: w.cols, batch: &b.batch}
	b.pool.run(n, &b.quan)

	chunk := ceilDiv(ceilDiv(w.rows, b.threads*tasksPerThread), tileRows) * tileRows
	b.mm = matmulJob{w: w, batch: &b.batch, dst: data(dst), chunk: chunk}
	b.pool.run(ceilDiv(w.rows, chunk), &b.mm)
	b.mm, b.quan = matmulJob{}, quantJob{}
}

// WeightsCached says whether the weights made so far are expected to
// stay in the last-level cache between tokens (Options.CacheBytes), so
// that MatMul does not prefetch them.
func (b *Backend) WeightsCached() bool {
	return weightsCached(b.weightBytes.Load(), b.cacheBytes)
}
