package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
)

// The mixture of experts (backend.MoE): backend.Route's choice per row,
// then each chosen expert's product over the rows that chose it, gathered
// together (MatMul's rows are independent, so a row's bits are the same
// as alone), and the weighted sum best first, as gguf/model's host path
// computes them.

var _ backend.MoE = (*Backend)(nil)

// MoEMaxRows implements backend.MoE: any step, as MoEMatMul gathers a
// step's pairs by expert.
func (b *Backend) MoEMaxRows() int { return 0 }

// MoERoute implements backend.MoE.
func (b *Backend) MoERoute(sel, w, logits backend.Tensor, bias backend.Weight, g backend.Gating) {
	n, k, e := logits.Rows, sel.Cols, logits.Cols
	if sel.Rows != n || w.Rows != n || w.Cols != k || k < 1 || k > e || (g == backend.GateSigmoidNorm) != (bias != nil) {
		panic(fmt.Sprintf("cpu: MoERoute of %d × %d scores into %d × %d, %d × %d (gating %d)", n, e, sel.Rows, k, w.Rows, w.Cols, g))
	}
	var bv []float32
	if bias != nil {
		if bv = f32Weight(bias); len(bv) != e {
			panic(fmt.Sprintf("cpu: MoERoute selection bias of %d for %d experts", len(bv), e))
		}
	}
	lg, sd, wd := data(logits), data(sel), data(w)
	probs, idx := make([]float32, e), make([]int, k)
	for r := range n {
		backend.Route(lg[r*e:(r+1)*e], bv, probs, idx, wd[r*k:(r+1)*k], g)
		for j, x := range idx {
			sd[r*k+j] = float32(x)
		}
	}
}

// expertOf is the expert index stored in a sel element.
func expertOf(v float32, experts int) int {
	x := int(v)
	if float32(x) != v || x < 0 || x >= experts {
		panic(fmt.Sprintf("cpu: expert %v of %d", v, experts))
	}
	return x
}

// MoEMatMul implements backend.MoE.
func (b *Backend) MoEMatMul(dst backend.Tensor, experts, biases []backend.Weight, x, sel backend.Tensor) {
	if err := backend.CheckMoEMatMul(dst, experts, biases, x, sel); err != nil {
		panic("cpu: " + err.Error())
	}
	n, k := sel.Rows, sel.Cols
	sd, xd, yd := data(sel), data(x), data(dst)
	// The pairs (row, rank) by expert, in pair order.
	pairs := make([][]int, len(experts))
	for p, v := range sd {
		e := expertOf(v, len(experts))
		pairs[e] = append(pairs[e], p)
	}
	xs, ys := x.Cols, dst.Cols
	for e, ps := range pairs {
		if len(ps) == 0 {
			continue // an expert no row chose is not read
		}
		if len(ps) == 1 {
			// One pair (always so in a single token's step): its rows
			// in place, nothing to gather.
			p, src := ps[0], ps[0]
			if x.Rows == n {
				src = p / k
			}
			ye := dst.Slice(p, p+1)
			b.MatMul(ye, experts[e], x.Slice(src, src+1))
			if biases != nil {
				b.AddBias(ye, biases[e])
			}
			continue
		}
		xe, ye := b.NewTensor(len(ps), xs), b.NewTensor(len(ps), ys)
		xed, yed := data(xe), data(ye)
		for i, p := range ps {
			src := p
			if x.Rows == n {
				src = p / k
			}
			copy(xed[i*xs:(i+1)*xs], xd[src*xs:(src+1)*xs])
		}
		b.MatMul(ye, experts[e], xe)
		if biases != nil {
			b.AddBias(ye, biases[e])
		}
		for i, p := range ps {
			copy(yd[p*ys:(p+1)*ys], yed[i*ys:(i+1)*ys])
		}
	}
}

// MoESum implements backend.MoE.
func (b *Backend) MoESum(dst, y, sel, w backend.Tensor, scale []float32) {
	n, k, c := sel.Rows, sel.Cols, dst.Cols
	if dst.Rows != n || y.Rows != n*k || y.Cols != c || w.Rows != n || w.Cols != k {
		panic(fmt.Sprintf("cpu: MoESum of %d × %d into %d × %d", y.Rows, y.Cols, dst.Rows, c))
	}
	dd, yd, sd, wd := data(dst), data(y), data(sel), data(w)
	for r := range n {
		out := dd[r*c : (r+1)*c]
		for j := range k {
			p := r*k + j
			wt, src := wd[p], yd[p*c:(p+1)*c]
			s := float32(1)
			if scale != nil {
				s = scale[expertOf(sd[p], len(scale))]
			}
			for i, v := range src {
				if scale != nil {
					v *= s
				}
				// float32(): each product rounded, never fused into the add.
				if j == 0 {
					out[i] = float32(v * wt)
				} else {
					out[i] += float32(v * wt)
				}
			}
		}
	}
}
