package cuda

import (
	"fmt"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// The delta net's kernels (kernels/delta.cuh). Each launch takes every
// sequence of the step; the sequences' rows and state addresses travel in
// the step's argument area, so the launch's parameters are the same each
// decode step whichever of a session's two states is current, and a
// decode step stays one graph. The scan's state is kept transposed (see
// delta_scan): only these kernels read it.

var _ backend.DeltaNetter = (*Backend)(nil)

// DeltaNetFits implements backend.DeltaNetter.
func (b *Backend) DeltaNetFits(headDim, convKernel int) bool {
	return headDim > 0 && headDim <= kernels.DeltaMaxDim && convKernel > 1 && convKernel <= kernels.ConvMaxKernel
}

// f32Ptr is the device address of an F32 weight's elements.
func f32Ptr(wt backend.Weight) uint64 {
	w := asWeight(wt)
	if w.vec != nil {
		return uint64(w.vec.ptr)
	}
	if w.typ != quant.F32 {
		panic(fmt.Sprintf("cuda: delta-net weight of type %s, want F32", w.typ))
	}
	return w.ptr
}

// deltaSeq mirrors delta_seq.
type deltaSeq struct {
	row0, n0, row1, n1                   int32
	prevConv, nextConv, prevSSM, nextSSM uint64
}

// argSeqs writes the sequences' table into this step's arena, checking
// their rows against rows and their states' sizes (0: not checked).
func (b *Backend) argSeqs(op string, rows int, seqs []backend.DeltaSeq, conv, ssm int) uint64 {
	h, d := b.reserve(kernels.DeltaSeqBytes * len(seqs))
	tab := unsafe.Slice((*deltaSeq)(h), len(seqs))
	for i, s := range seqs {
		if err := s.Check(rows, conv, ssm); err != nil {
			panic(fmt.Sprintf("cuda: %s: sequence %d: %v", op, i, err))
		}
		e := deltaSeq{row0: int32(s.Spans[0].Row), n0: int32(s.Spans[0].N), row1: int32(s.Spans[1].Row), n1: int32(s.Spans[1].N)}
		if conv > 0 {
			e.prevConv, e.nextConv = ptr(s.Prev.Conv), ptr(s.Next.Conv)
		}
		if ssm > 0 {
			e.prevSSM, e.nextSSM = ptr(s.Prev.SSM), ptr(s.Next.SSM)
		}
		tab[i] = e
	}
	return d
}

// ShortConv implements backend.DeltaNetter.
func (b *Backend) ShortConv(x backend.Tensor, wt backend.Weight, seqs []backend.DeltaSeq) {
	w := asWeight(wt)
	ch, k := x.Cols, w.cols
	if w.rows != ch || w.typ != quant.F32 || !b.DeltaNetFits(1, k) {
		panic(fmt.Sprintf("cuda: ShortConv of %d channels with a %d × %d %s weight", ch, w.rows, k, w.typ))
	}
	if len(seqs) == 0 {
		return
	}
	xp := ptr(x)
	b.lock()
	defer b.unlock()
	tab := b.argSeqs("ShortConv", x.Rows, seqs, (k-1)*ch, 0)
	b.launch(kernels.ShortConv, kernels.ShortConvShape(ch, len(seqs)), xp, w.ptr, tab, i32(ch), i32(k))
	b.wrote(x)
}

// DeltaScan implements backend.DeltaNetter.
func (b *Backend) DeltaScan(y, x, z, beta, alpha backend.Tensor, d *backend.DeltaNet, seqs []backend.DeltaSeq) {
	kh, nh, sz := d.KeyHeads, d.Heads, d.HeadDim
	n := x.Rows
	if kh <= 0 || nh%kh != 0 || !b.DeltaNetFits(sz, 2) || x.Cols != (2*kh+nh)*sz || y.Cols != nh*sz || z.Cols != nh*sz ||
		beta.Cols != nh || alpha.Cols != nh || y.Rows != n || z.Rows != n || beta.Rows != n || alpha.Rows != n {
		panic(fmt.Sprintf("cuda: DeltaScan of %d × %d rows for %+v", n, x.Cols, *d))
	}
	if len(seqs) == 0 {
		return
	}
	yp, xp, zp, bp, ap := ptr(y), ptr(x), ptr(z), ptr(beta), ptr(alpha)
	dt, a, norm := f32Ptr(d.DTBias), f32Ptr(d.A), f32Ptr(d.Norm)
	b.lock()
	defer b.unlock()
	tab := b.argSeqs("DeltaScan", n, seqs, 0, nh*sz*sz)
	b.launch(kernels.DeltaScan, kernels.DeltaScanShape(nh, sz, len(seqs)),
		yp, xp, zp, bp, ap, dt, a, norm, tab, i32(kh), i32(nh), i32(sz), f32(d.Eps))
	b.wrote(y)
}

// SigmoidMul implements backend.DeltaNetter.
func (b *Backend) SigmoidMul(x, g backend.Tensor) {
	if g.Rows != x.Rows || g.Cols != x.Cols && g.Cols != 1 {
		panic(fmt.Sprintf("cuda: SigmoidMul of %d × %d by %d × %d", x.Rows, x.Cols, g.Rows, g.Cols))
	}
	n := x.Len()
	if n == 0 {
		return
	}
	xp, gp := ptr(x), ptr(g)
	b.lock()
	defer b.unlock()
	b.launch(kernels.SigmoidMul, kernels.Elementwise(n), xp, gp, i32(n), i32(x.Cols), i32(g.Cols))
	b.wrote(x)
}
