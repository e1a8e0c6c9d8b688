package model

import (
	"github.com/meshnode/meshnode/gguf/greedyhead"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Hosted is a backend whose tensors are this process's memory and whose
// workers take other work between kernels (the CPU backend): reading a
// step's hidden rows costs a copy, not a transfer, so its greedy tokens
// may come from the output head's int8 shadow (greedyhead), computed on
// its workers, instead of from every logit.
type Hosted interface {
	Workers() int
	// Parallel runs f(t) for every t < n on the workers.
	Parallel(n int, f func(t int))
}

// maxShadow is the largest output head (in elements) given a shadow: one
// the size of a small model's, whose extra rows are bound by arithmetic
// (a speculative window's); a larger one streams from memory, where rows
// are nearly free anyway, and its shadow would cost its own size again.
const maxShadow = 32 << 20

// shadowable notes an output head of type t held in b as one BuildShadow
// may shadow: where the backend is Hosted, nothing follows the product
// that could reorder or tie the logits (a bias, a scale, a final
// softcap), the
// head is at most maxShadow elements and greedyhead takes its type and
// shape. Any other head is left without one.
func (m *Model) shadowable(t quant.Type, b []byte) {
	if _, ok := m.be.(Hosted); !ok || m.outBias != nil || m.cfg.FinalSoftcap > 0 || m.cfg.LogitScale != 1 {
		return
	}
	if m.cfg.VocabSize*m.cfg.Embd > maxShadow || greedyhead.Supports(t, m.cfg.VocabSize, m.cfg.Embd) != nil {
		return
	}
	m.headType, m.headData = t, b
}

// BuildShadow builds the output head's int8 shadow, where the model may
// have one and has not yet (Load builds it; LoadStage leaves it to the
// caller, whose memory budget may not hold it: ShadowBytes), and
// reports whether the model has one. Call it before the model's
// sessions and batches step.
func (m *Model) BuildShadow() bool {
	if m.greedy == nil && m.headData != nil {
		if h, err := greedyhead.New(m.headType, m.headData, m.cfg.VocabSize, m.cfg.Embd); err == nil {
			m.greedy = h
		}
		m.headData = nil // built, or refused for good (a weight not finite)
	}
	return m.greedy != nil
}

// greedyScratch is what the shadow needs per scratch: the hidden rows on
// the host, as activations of the head's type.
type greedyScratch struct {
	buf  []float32
	acts []*quant.Activation
	s    greedyhead.Scratch
}

// headLogits computes the logits of the last step's rows if they were
// left to the shadow and are wanted after all.
func (m *Model) headLogits(sc *scratch) {
	if sc.pendingHead == 0 {
		return
	}
	rows := sc.pendingHead
	sc.pendingHead = 0
	m.head(sc.logitsT.Slice(0, rows), sc.h.Slice(0, rows))
}

// greedyArgMax sets dst[r] to the argmax of logits row r for the first
// len(dst) rows of the last step through the shadow, and reports whether
// it settled every one (else the caller computes the logits).
func (m *Model) greedyArgMax(sc *scratch, dst []int) bool {
	if m.greedy == nil || sc.pendingHead < len(dst) {
		return false
	}
	g := sc.greedy
	if g == nil {
		g = new(greedyScratch)
		sc.greedy = g
	}
	e := m.cfg.Embd
	rows := len(dst)
	if len(g.buf) < rows*e {
		g.buf = make([]float32, rows*e)
	}
	m.be.Read(g.buf, sc.h.Slice(0, rows))
	for len(g.acts) < rows {
		a, err := quant.NewActivation(m.greedy.Type(), e)
		if err != nil {
			return false
		}
		g.acts = append(g.acts, a)
	}
	for r := range rows {
		if err := g.acts[r].Quantize(g.buf[r*e : (r+1)*e]); err != nil {
			return false
		}
	}
	acts := g.acts[:rows]
	be := m.be.(Hosted)
	// Two parts a worker: one slow to start costs half as much.
	m.greedy.Prepare(acts, &g.s, 2*be.Workers())
	be.Parallel(g.s.Parts(), func(p int) { m.greedy.Approximate(&g.s, p) })
	if rows == 1 {
		m.greedy.Settle(acts, dst, &g.s)
	} else {
		be.Parallel(rows, func(r int) { dst[r] = m.greedy.SettleRow(acts[r], r, &g.s) })
		g.s.Count(dst)
	}
	for _, d := range dst {
		if d < 0 {
			return false
		}
	}
	return true
}
