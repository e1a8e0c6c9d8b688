package metal

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal/kernels"
)

// LFM2's gated short convolution (kernels/ops.metal's gated_conv): a
// dispatch per sequence of the step, its spans in the arguments and its
// states bound as buffers, so a step needs no read-back for it.

var _ backend.GatedConver = (*Backend)(nil)

// GatedConv implements backend.GatedConver.
func (b *Backend) GatedConv(y, bcx backend.Tensor, wt backend.Weight, seqs []backend.DeltaSeq) {
	w := asWeight(wt)
	ch, k := y.Cols, w.cols
	if w.rows != ch || w.typ != quant.F32 || k < 2 || k > kernels.ConvMaxKernel || bcx.Cols != 3*ch || bcx.Rows != y.Rows {
		panic(fmt.Sprintf("metal: GatedConv of %d × %d rows into %d × %d with a %d × %d %s weight", bcx.Rows, bcx.Cols, y.Rows, ch, w.rows, k, w.typ))
	}
	for i, s := range seqs {
		if err := s.Check(y.Rows, (k-1)*ch, 0); err != nil {
			panic(fmt.Sprintf("metal: GatedConv: sequence %d: %v", i, err))
		}
	}
	b.lock()
	defer b.unlock()
	for _, s := range seqs {
		sp := s.Spans
		b.dispatch(kernels.GatedConv, kernels.Elementwise(ch), []bind{tb(y), tb(bcx), w.at, tb(s.Prev.Conv), tb(s.Next.Conv)},
			i32(sp[0].Row), i32(sp[0].N), i32(sp[1].Row), i32(sp[1].N), i32(ch), i32(k))
		b.wrote(s.Next.Conv)
	}
	b.wrote(y)
}
