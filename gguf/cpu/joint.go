package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

var _ backend.Joint = (*Backend)(nil)

// MatMuls implements backend.Joint. Weights of one type (a layer's query,
// key and value, or its gate and up) share one quantisation of x and one
// hand-out of their rows to the workers, sized by their work together:
// on the built-in model, whose 192-wide projections are each too small
// to split (matmulChunk), the three of a window's attention ran on one
// core while the other waited. Each output is VecDot's, as in MatMul, so
// the bits do not depend on how the rows were handed out. Weights of
// other types (a Q4_K_M file's Q6_K value) and one-row products that
// time their kernels (onerow.go) take MatMul's path; so do all of them
// under Options.Perturb, which perturbs each product's input alone.
func (b *Backend) MatMuls(dsts []backend.Tensor, ws []backend.Weight, x backend.Tensor) {
	if len(dsts) != len(ws) {
		panic(fmt.Sprintf("cpu: MatMuls of %d outputs by %d weights", len(dsts), len(ws)))
	}
	for i := range ws {
		checkMatMul(dsts[i], asWeight(ws[i]), x)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cached := b.WeightsCached()
	var doneA [8]bool
	done := doneA[:]
	if len(ws) > len(doneA) {
		done = make([]bool, len(ws))
	}
	alone := func(w *weight) bool { return b.perturb != 0 || b.tuning(w, x.Rows, cached) }
	for i := range ws {
		if done[i] {
			continue
		}
		// The weights of ws[i]'s type from i on, but those that go alone.
		wi := asWeight(ws[i])
		parts := b.joint.parts[:0]
		for j := i; j < len(ws) && !alone(wi); j++ {
			if wj := asWeight(ws[j]); !done[j] && wj.typ == wi.typ && !alone(wj) {
				parts = append(parts, jointPart{w: wj, dst: data(dsts[j])})
				done[j] = true
			}
		}
		if len(parts) < 2 {
			done[i] = true
			b.matMul(dsts[i], wi, x)
			continue
		}
		b.jointMatMul(parts, x)
		clear(parts) // the weights and outputs are not held past the call
		b.joint.parts = parts[:0]
	}
}

// jointMatMul multiplies x by the weights of parts, all of one type.
func (b *Backend) jointMatMul(parts []jointPart, x backend.Tensor) {
	n := x.Rows
	w0 := parts[0].w
	cached := b.quantize(w0, x)
	kind := min(n, 2) - 1 // as in matMul
	rows := 0
	for i := range parts {
		b.packFor(parts[i].w, kind, cached)
		parts[i].packed = parts[i].w.packed[kind]
		rows += parts[i].w.rows
	}
	// Handed out where their work together is (matmulChunk), each in the
	// tasks it would have alone, or, too small alone to split, in chunks
	// of the whole's: a large model's products are cut as before, in one
	// hand-out.
	chunk := matmulChunk(w0.typ, rows, w0.cols, n, b.threads)
	tasks := 0
	for i := range parts {
		r := parts[i].w.rows
		if parts[i].chunk = matmulChunk(w0.typ, r, w0.cols, n, b.threads); parts[i].chunk >= r {
			parts[i].chunk = min(chunk, r)
		}
		parts[i].first = tasks
		tasks += ceilDiv(r, parts[i].chunk)
	}
	b.batch.SetStreamedRows(false)
	b.batch.SetRowsAhead(false)
	b.joint = jointJob{parts: parts, batch: &b.batch}
	if chunk >= rows {
		for t := range tasks { // below the threshold: this goroutine's
			b.joint.do(0, t)
		}
	} else {
		b.pool.run(tasks, &b.joint)
	}
	b.joint.batch, b.quan = nil, quantJob{}
}

// jointJob multiplies a span of one of its weights' rows by every
// activation row: task t is part p's task t − p.first for the last part
// whose first task is at most t.
type jointJob struct {
	parts []jointPart
	batch *quant.Batch
}

type jointPart struct {
	w      *weight
	packed *quant.Packed
	dst    []float32
	chunk  int // rows a task
	first  int // the part's first task
}

func (j *jointJob) do(_, t int) {
	p := &j.parts[0]
	for i := len(j.parts) - 1; i > 0; i-- {
		if j.parts[i].first <= t {
			p = &j.parts[i]
			break
		}
	}
	w := p.w
	r0, r1 := split(t-p.first, p.chunk, w.rows)
	view := p.packed.Rows(r0, r1)
	quant.MatMulPacked(w.typ, w.data[r0*w.rowSize:r1*w.rowSize], &view, j.batch, p.dst[r0:], w.rows)
}
