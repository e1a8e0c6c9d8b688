package model

import (
	"github.com/meshnode/meshnode/gguf/backend"
)

// The mixture-of-experts FFN (llama.cpp's build_moe_ffn as qwen3moe calls
// it): a router matrix scores the experts of each row, a softmax over all
// of them, the top k by probability, their probabilities renormalised to
// sum to 1; each chosen expert is a SwiGLU FFN, and the row's output is
// the sum of the experts' outputs times their weights, added in rank
// order (best first) as ggml adds its views. gpt-oss adds a bias to the
// router and to each expert's three products, chooses by logit and
// weights by a softmax over the chosen (routeChosen), and gates with the
// clamped SwiGLU.
//
// It is written against the plain kernel set: the experts are separate
// weights (views of the file's 3-D tensors), the rows routed to an expert
// are gathered into a contiguous tensor and multiplied by that expert's
// matrices alone, so a step reads only the experts its rows chose, and any
// backend that can take a weight runs it with no kernel of its own. The
// routing and the weighted sum run on the host: they are k·Embd
// multiply-adds a row, and every backend can Read and Write.
//
// A backend that implements backend.MoE (the CPU and CUDA do) runs the
// same arithmetic itself (moeDevice): the choice stays in its memory and
// its expert products read each chosen expert by the stored index, so a
// step reads nothing back (a CUDA decode step is one graph). The host
// path remains for backends without it (Metal), with the same bits.
//
// Batch invariance: a row's router scores, its choice, its experts'
// products (MatMul's rows are independent) and its weighted sum (fixed
// rank order, per row) do not depend on the other rows of the step, so a
// token's output is the same bits alone or batched.

// moeScratch is the MoE FFN's per-step memory: device activations for one
// expert's rows, and host copies for the routing and the sum.
type moeScratch struct {
	logits                 backend.Tensor // rows × Experts router scores
	xe, ye                 backend.Tensor // rows × Embd: one expert's input rows and output
	gate, up               backend.Tensor // rows × ExpertFF
	hostLogits, hostX, out []float32
	hostY                  []float32
	prod                   []float32 // rows × k × Embd: weight · expert output, by rank
	sel                    []int     // rows × k chosen experts, best first
	w                      []float32 // rows × k their weights
	rows                   [][]int   // per expert: the step's rows routed to it
	probs                  []float32 // one row's probabilities

	// With backend.MoE: the choice and the chosen experts' activations,
	// a row per (row, rank).
	dsel, dw   backend.Tensor // rows × k
	dgate, dup backend.Tensor // rows·k × ExpertFF
	dy         backend.Tensor // rows·k × Embd
}

func newMoEScratch(be backend.Backend, c *Config, rows int) *moeScratch {
	k := c.ExpertsUsed
	ms := &moeScratch{logits: be.NewTensor(rows, c.Experts)}
	if xp, ok := be.(backend.MoE); ok {
		// The backend routes steps of up to dr rows; longer ones take
		// the host path (MoEMaxRows).
		dr := rows
		if max := xp.MoEMaxRows(); max > 0 {
			dr = min(rows, max)
		}
		ms.dsel, ms.dw = be.NewTensor(dr, k), be.NewTensor(dr, k)
		ms.dgate, ms.dup = be.NewTensor(dr*k, c.ExpertFF), be.NewTensor(dr*k, c.ExpertFF)
		ms.dy = be.NewTensor(dr*k, c.Embd)
		if dr == rows {
			return ms
		}
	}
	ms.xe, ms.ye = be.NewTensor(rows, c.Embd), be.NewTensor(rows, c.Embd)
	ms.gate, ms.up = be.NewTensor(rows, c.ExpertFF), be.NewTensor(rows, c.ExpertFF)
	ms.hostLogits = make([]float32, rows*c.Experts)
	ms.hostX, ms.hostY = make([]float32, rows*c.Embd), make([]float32, rows*c.Embd)
	ms.out = make([]float32, rows*c.Embd)
	ms.prod = make([]float32, rows*k*c.Embd)
	ms.sel, ms.w = make([]int, rows*k), make([]float32, rows*k)
	ms.rows = make([][]int, c.Experts)
	ms.probs = make([]float32, c.Experts)
	for e := range ms.rows {
		ms.rows[e] = make([]int, 0, rows)
	}
	return ms
}

// moeFFN sets o to the mixture-of-experts FFN of the normed rows h,
// routed by the scores of the rows routeIn (h itself, or gemma4's own
// router input).
func (m *Model) moeFFN(ms *moeScratch, ly *layer, o, h, routeIn backend.Tensor) {
	be, c := m.be, &m.cfg
	n, k, e := h.Rows, c.ExpertsUsed, c.Embd

	logits := ms.logits.Slice(0, n)
	project(be, logits, ly.router, ly.routerBias, routeIn)
	if m.xp != nil && n <= ms.dsel.Rows {
		m.moeDevice(ms, ly, o, h, logits)
		return
	}
	be.Read(ms.hostLogits[:n*c.Experts], logits)
	for i := range ms.rows {
		ms.rows[i] = ms.rows[i][:0]
	}
	for r := range n {
		lg, sel, w := ms.hostLogits[r*c.Experts:(r+1)*c.Experts], ms.sel[r*k:(r+1)*k], ms.w[r*k:(r+1)*k]
		backend.Route(lg, ly.selBiasHost, ms.probs, sel, w, c.gating())
		for _, x := range ms.sel[r*k : (r+1)*k] {
			ms.rows[x] = append(ms.rows[x], r)
		}
	}

	gathered := false
	for x, rows := range ms.rows {
		if len(rows) == 0 {
			continue // an expert no row chose is not read
		}
		cnt := len(rows)
		xe := h
		if cnt != n {
			// Gather the expert's rows (every row in order needs none:
			// always so for a single token).
			if !gathered {
				be.Read(ms.hostX[:n*e], h)
				gathered = true
			}
			for j, r := range rows {
				copy(ms.hostY[j*e:(j+1)*e], ms.hostX[r*e:(r+1)*e])
			}
			xe = ms.xe.Slice(0, cnt)
			be.Write(xe, ms.hostY[:cnt*e])
		}
		gate, up, ye := ms.gate.Slice(0, cnt), ms.up.Slice(0, cnt), ms.ye.Slice(0, cnt)
		project(be, gate, ly.gateExps[x], expertBias(ly.gateExpsB, x), xe)
		project(be, up, ly.upExps[x], expertBias(ly.upExpsB, x), xe)
		be.GLU(gate, gate, up, c.spec.glu)
		project(be, ye, ly.downExps[x], expertBias(ly.downExpsB, x), gate)
		be.Read(ms.hostY[:cnt*e], ye)
		// Scale each row by its weight for this expert, into the slot
		// of the rank the row gave it (ggml_mul: one rounding).
		for j, r := range rows {
			rank := 0
			for ms.sel[r*k+rank] != x {
				rank++
			}
			wt := ms.w[r*k+rank]
			dst := ms.prod[(r*k+rank)*e : (r*k+rank+1)*e]
			if ly.downScale != nil {
				// gemma4's per-expert output scale, its own ggml_mul.
				s := ly.downScale[x]
				for i, y := range ms.hostY[j*e : (j+1)*e] {
					dst[i] = (y * s) * wt
				}
				continue
			}
			for i, y := range ms.hostY[j*e : (j+1)*e] {
				dst[i] = y * wt
			}
		}
	}
	// Sum each row's experts best first, as llama.cpp adds its views.
	out := ms.out[:n*e]
	for r := range n {
		dst := out[r*e : (r+1)*e]
		copy(dst, ms.prod[r*k*e:(r*k+1)*e])
		for rank := 1; rank < k; rank++ {
			src := ms.prod[(r*k+rank)*e : (r*k+rank+1)*e]
			for i := range dst {
				dst[i] += src[i]
			}
		}
	}
	be.Write(o, out)
}

// moeDevice is moeFFN on a backend.MoE, from the router scores on.
func (m *Model) moeDevice(ms *moeScratch, ly *layer, o, h, logits backend.Tensor) {
	c, xp := &m.cfg, m.xp
	n, k := h.Rows, c.ExpertsUsed
	sel, w := ms.dsel.Slice(0, n), ms.dw.Slice(0, n)
	gate, up, y := ms.dgate.Slice(0, n*k), ms.dup.Slice(0, n*k), ms.dy.Slice(0, n*k)
	xp.MoERoute(sel, w, logits, ly.selBias, c.gating())
	xp.MoEMatMul(gate, ly.gateExps, ly.gateExpsB, h, sel)
	xp.MoEMatMul(up, ly.upExps, ly.upExpsB, h, sel)
	m.be.GLU(gate, gate, up, c.spec.glu)
	xp.MoEMatMul(y, ly.downExps, ly.downExpsB, gate, sel)
	xp.MoESum(o, y, sel, w, ly.downScale)
}

// expertBias is expert x's bias, or nil when the model has none.
func expertBias(b []backend.Weight, x int) backend.Weight {
	if b == nil {
		return nil
	}
	return b[x]
}
