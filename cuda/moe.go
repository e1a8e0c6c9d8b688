package cuda

import (
	"fmt"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// A mixture of experts on the device (kernels/moe.cuh, matvec.cuh's
// mvx_*): the router's choice is written to device memory and the expert
// products read each pair's matrix through a table of the experts'
// addresses, so nothing is read back and a decode step of a MoE model
// stays one graph. The tables (and gemma4's per-expert scales) are
// uploaded once, keyed by value (constPtr): a layer's launches have the
// same parameters every step.

var _ backend.MoE = (*Backend)(nil)

// moeMaxRows bounds the steps routed on the device: MoEMatMul's gathered
// kernel reads an expert once per (row, rank) pair, which for a decode
// step (a few rows, each choosing other experts) is what any path reads,
// but for a long prompt is up to 8× the grouped path's reads (each
// expert once per 8 of its rows). 16 rows keeps decode steps of several
// sequences, and speculation's windows, one graph.
const moeMaxRows = 16

// MoEMaxRows implements backend.MoE.
func (b *Backend) MoEMaxRows() int { return moeMaxRows }

// MoERoute implements backend.MoE.
func (b *Backend) MoERoute(sel, w, logits backend.Tensor, bias backend.Weight, g backend.Gating) {
	n, k, e := logits.Rows, sel.Cols, logits.Cols
	if sel.Rows != n || w.Rows != n || w.Cols != k || k < 1 || k > e || g < backend.GateSoftmax || g > backend.GateSigmoidNorm ||
		(g == backend.GateSigmoidNorm) != (bias != nil) || bias != nil && bias.Cols() != e {
		panic(fmt.Sprintf("cuda: MoERoute of %d × %d scores into %d × %d, %d × %d (gating %d)", n, e, sel.Rows, k, w.Rows, w.Cols, g))
	}
	if n == 0 {
		return
	}
	lp, sp, wp := ptr(logits), ptr(sel), ptr(w)
	var bp uint64
	if bias != nil {
		bp = f32Ptr(bias)
	}
	b.lock()
	defer b.unlock()
	b.launch(kernels.MoERoute, kernels.MoERouteShape(n), lp, bp, sp, wp, i32(n), i32(e), i32(k), i32(int(g)))
	b.wrote(sel)
	b.wrote(w)
}

// addrTable is the device address of a table of addrs. With b locked.
func (b *Backend) addrTable(addrs []uint64) uint64 {
	return b.constPtr(unsafe.Slice((*byte)(unsafe.Pointer(&addrs[0])), 8*len(addrs)))
}

// MoEMatMul implements backend.MoE.
func (b *Backend) MoEMatMul(dst backend.Tensor, experts, biases []backend.Weight, x, sel backend.Tensor) {
	if err := backend.CheckMoEMatMul(dst, experts, biases, x, sel); err != nil {
		panic("cuda: " + err.Error())
	}
	n, k := sel.Rows, sel.Cols
	w0 := asWeight(experts[0])
	if n == 0 {
		return
	}
	addrs := make([]uint64, len(experts))
	for i, wt := range experts {
		w := asWeight(wt)
		if w.typ != w0.typ || w.rows != w0.rows || w.cols != w0.cols {
			panic(fmt.Sprintf("cuda: MoEMatMul: expert %d is %d × %d %s, expert 0 %d × %d %s", i, w.rows, w.cols, w.typ, w0.rows, w0.cols, w0.typ))
		}
		addrs[i] = w.ptr
	}
	var bias []uint64
	if biases != nil {
		bias = make([]uint64, len(biases))
		for i, bw := range biases {
			v := vector(bw)
			if v.cols != dst.Cols {
				panic(fmt.Sprintf("cuda: MoEMatMul: expert %d's bias of %d for %d columns", i, v.cols, dst.Cols))
			}
			bias[i] = uint64(v.vec.ptr)
		}
	}
	xp, yp, sp := ptr(x), ptr(dst), ptr(sel)
	xdiv := 1
	if x.Rows == n {
		xdiv = k
	}
	b.lock()
	defer b.unlock()
	var qs, d, ext uint64
	if act, _ := quant.VecDotType(w0.typ); act == quant.Q8_0 || act == quant.Q8_1 || act == quant.Q8_K {
		qs, d, ext = b.quantized(x, act)
	}
	id, _ := kernels.WeightKernel(w0.typ, kernels.MatVecGather)
	b.launch(id, kernels.MatVecGatherShape(w0.rows, n*k), b.addrTable(addrs), i32(w0.rows), i32(w0.rowSize), i32(w0.cols),
		xp, qs, d, ext, yp, sp, i32(xdiv))
	if bias != nil {
		b.launch(kernels.MoEBias, kernels.Elementwise(dst.Len()), yp, b.addrTable(bias), sp, i32(dst.Len()), i32(dst.Cols))
	}
	b.wrote(dst)
}

// MoESum implements backend.MoE.
func (b *Backend) MoESum(dst, y, sel, w backend.Tensor, scale []float32) {
	n, k, c := sel.Rows, sel.Cols, dst.Cols
	if dst.Rows != n || y.Rows != n*k || y.Cols != c || w.Rows != n || w.Cols != k {
		panic(fmt.Sprintf("cuda: MoESum of %d × %d into %d × %d", y.Rows, y.Cols, dst.Rows, c))
	}
	if n == 0 {
		return
	}
	dp, yp, sp, wp := ptr(dst), ptr(y), ptr(sel), ptr(w)
	b.lock()
	defer b.unlock()
	var scp uint64
	if scale != nil {
		scp = b.constPtr(unsafe.Slice((*byte)(unsafe.Pointer(&scale[0])), 4*len(scale)))
	}
	b.launch(kernels.MoESum, kernels.Elementwise(dst.Len()), dp, yp, sp, wp, scp, i32(dst.Len()), i32(c), i32(k))
	b.wrote(dst)
}
