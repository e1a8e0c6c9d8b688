package cuda_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"unsafe"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// f32Bytes is v as an F32 tensor's bytes.
func f32Bytes(v []float32) []byte {
	return slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

// testDeltaNet runs the short convolution and the scan on both backends
// over three steps of two sequences, one advanced in place and one from a
// previous state into the next (then swapped, as a session does), with
// head sizes a warp does and does not divide; the scan's state layouts
// differ, so the outputs of later steps are what compares them.
func testDeltaNet(t *testing.T, p *pair) {
	dev, ok := p.dev.(backend.DeltaNetter)
	if !ok {
		t.Fatal("the backend has no delta-net kernels")
	}
	for _, sz := range []int{32, 40} {
		const kh, nh, k, n = 2, 4, 4, 8
		ch, inner := (2*kh+nh)*sz, nh*sz
		conv := p.weight(quant.F32, ch, k, f32Bytes(p.random(ch*k, 0.5)))
		a := make([]float32, nh)
		for i := range a {
			a[i] = -float32(math.Exp(p.rng.NormFloat64()))
		}
		// Both sides' weights from one draw.
		dtv, normv := p.random(nh, 1), p.random(sz, 1)
		mk := func(v []float32) weights { return p.weight(quant.F32, 1, len(v), f32Bytes(v)) }
		dtw, aw, normw := mk(dtv), mk(a), mk(normv)
		dc := &backend.DeltaNet{KeyHeads: kh, Heads: nh, HeadDim: sz, Eps: 1e-6, DTBias: dtw.c, A: aw.c, Norm: normw.c}
		dd := &backend.DeltaNet{KeyHeads: kh, Heads: nh, HeadDim: sz, Eps: 1e-6, DTBias: dtw.d, A: aw.d, Norm: normw.d}

		type state struct{ conv, ssm tensors }
		newState := func() state {
			return state{p.tensor(k-1, ch, nil), p.tensor(nh*sz, sz, nil)}
		}
		// Sequence 0 alternates two states; sequence 1 is in place.
		s0 := [2]state{newState(), newState()}
		s1 := newState()
		seqs := func(side int, cur int) []backend.DeltaSeq {
			pick := func(st state) backend.DeltaState {
				if side == 0 {
					return backend.DeltaState{Conv: st.conv.c, SSM: st.ssm.c}
				}
				return backend.DeltaState{Conv: st.conv.d, SSM: st.ssm.d}
			}
			return []backend.DeltaSeq{
				{Spans: [2]backend.RowSpan{{Row: 0, N: 3}, {Row: 7, N: 1}}, Prev: pick(s0[cur]), Next: pick(s0[1-cur])},
				{Spans: [2]backend.RowSpan{{Row: 3, N: 4}}, Prev: pick(s1), Next: pick(s1)},
			}
		}
		for step := range 3 {
			what := fmt.Sprintf("head %d, step %d", sz, step)
			cur := step % 2
			x := p.tensor(n, ch, p.random(n*ch, 1))
			z := p.tensor(n, inner, p.random(n*inner, 1))
			beta := p.tensor(n, nh, p.random(n*nh, 2))
			av := p.random(n*nh, 8)
			av[1] = 25 // softplus's linear branch
			alpha := p.tensor(n, nh, av)
			y := p.tensor(n, inner, nil)
			before := make([]float32, nh*sz*sz)
			p.dev.Read(before, s0[cur].ssm.d)

			p.cpu.ShortConv(x.c, conv.c, seqs(0, cur))
			dev.ShortConv(x.d, conv.d, seqs(1, cur))
			p.compare("shortconv", what, x)
			p.compare("shortconv", what+" state", s0[1-cur].conv)
			p.compare("shortconv", what+" in-place state", s1.conv)

			p.cpu.DeltaScan(y.c, x.c, z.c, beta.c, alpha.c, dc, seqs(0, cur))
			dev.DeltaScan(y.d, x.d, z.d, beta.d, alpha.d, dd, seqs(1, cur))
			p.compare("deltascan", what, y)

			after := make([]float32, nh*sz*sz)
			p.dev.Read(after, s0[cur].ssm.d)
			if !slices.Equal(before, after) {
				t.Errorf("%s: the scan changed its previous state", what)
			}
			if step > 0 && slices.Equal(after, make([]float32, len(after))) {
				t.Errorf("%s: the previous state is empty", what)
			}
		}
	}
	// The gates: elementwise (the attention's) and one per row (the
	// shared expert's), with inputs past float32's e^x range.
	for _, gc := range []int{24, 1} {
		xv := p.random(5*24, 2)
		gv := p.random(5*gc, 6)
		gv[0] = -120
		x := p.tensor(5, 24, xv)
		g := p.tensor(5, gc, gv)
		p.cpu.SigmoidMul(x.c, g.c)
		dev.SigmoidMul(x.d, g.d)
		p.compare("sigmoidmul", fmt.Sprintf("gate of %d columns", gc), x)
	}
}

// TestEmuHybridGraphs: a qwen35 decode step is one recording (nothing is
// read back per layer), replayed as a CUDA graph once it repeats, although
// each step reads one of the session's two delta-net states and writes the
// other (their addresses travel in the argument area); its logits are
// eager launching's bit for bit.
func TestEmuHybridGraphs(t *testing.T) {
	f := fixture(t, "qwen35", "Q4_0")
	eager, _ := newEmu(t, cuda.Options{NoGraphs: true})
	defer eager.Close()
	want, _ := greedy(t, eager, f, modelSteps)
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	replaysGreedy(t, be, f, want, "launched one by one")
	t.Logf("%+v", be.Stats())
}
