package cuda

import (
	"fmt"

	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// LFM2's gated short convolution (kernels/delta.cuh's gated_conv): one
// launch over every sequence of the step, its rows and state addresses in
// the step's argument area as the delta net's are.

var _ backend.GatedConver = (*Backend)(nil)

// GatedConv implements backend.GatedConver.
func (b *Backend) GatedConv(y, bcx backend.Tensor, wt backend.Weight, seqs []backend.DeltaSeq) {
	w := asWeight(wt)
	ch, k := y.Cols, w.cols
	if w.rows != ch || w.typ != quant.F32 || k < 2 || k > kernels.ConvMaxKernel || bcx.Cols != 3*ch || bcx.Rows != y.Rows {
		panic(fmt.Sprintf("cuda: GatedConv of %d × %d rows into %d × %d with a %d × %d %s weight", bcx.Rows, bcx.Cols, y.Rows, ch, w.rows, k, w.typ))
	}
	if len(seqs) == 0 {
		return
	}
	yp, xp := ptr(y), ptr(bcx)
	b.lock()
	defer b.unlock()
	tab := b.argSeqs("GatedConv", y.Rows, seqs, (k-1)*ch, 0)
	b.launch(kernels.GatedConv, kernels.ShortConvShape(ch, len(seqs)), yp, xp, w.ptr, tab, i32(ch), i32(k))
	b.wrote(y)
}
