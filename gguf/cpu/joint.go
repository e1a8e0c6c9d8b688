package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
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
		done[i] = true
		parts := append(b.mm.parts[:0], matmulPart{w: wi, dst: data(dsts[i])})
		for j := i + 1; j < len(ws) && !alone(wi); j++ {
			if wj := asWeight(ws[j]); !done[j] && wj.typ == wi.typ && !alone(wj) {
				parts = append(parts, matmulPart{w: wj, dst: data(dsts[j])})
				done[j] = true
			}
		}
		b.products(parts, x)
	}
}
