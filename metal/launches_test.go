package metal_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// decodeDispatchesPerLayer bounds the kernels one layer of a decode step
// dispatches, by architecture, as docs/metal.md lists them: llama's 14
// (add+norm, quantise, QKV, RoPE, store K/V, attention, quantise, output,
// add+norm, quantise, gate+up, GLU, quantise, down), phi3's fused QKV and
// gate+up matrices, qwen2's Q, K and V biases, gemma3's per-head Q/K norms
// and post-attention and post-FFN norms, qwen3's Q/K norms, qwen3moe's
// router and two experts with the host's copy of their sum — the CUDA
// backend's counts but for qwen3moe's one fewer; for qwen35 and qwen35moe
// a pair of blocks (a delta net and gated attention, see cuda's test);
// granite's: llama's and its two residual scales; granitemoe's:
// qwen3moe's with the residual scales in place of the Q/K norms;
// smollm3's, llama's; gemma2's, gemma3's without the Q/K norms;
// mistral3's, llama's and past the original context the queries'
// temperature; olmo2's and exaone4's 18 (cuda's test says why);
// ernie4_5's, llama's; for lfm2 a run of its pattern, two convolution
// blocks (add+norm, quantise, the in-projection, the gated convolution,
// quantise, the out-projection, then llama's FFN: 12 each) and qwen3's
// attention block (16); lfm2moe's 58, each block's FFN qwen3moe's
// experts (routed on the host).
// llama.cpp's Metal path dispatches about 15–17 per layer. A change that
// dispatches more fails here and updates the docs.
var decodeDispatchesPerLayer = map[string]int64{"llama": 14, "phi3": 15, "qwen2": 19, "gemma3": 19, "qwen3": 16, "qwen3moe": 22, "gemma4": 22, "qwen35": 30, "qwen35moe": 54, "granite": 16, "granitemoe": 22, "smollm3": 14, "gemma2": 17, "mistral3": 15, "olmo2": 18, "exaone4": 18, "ernie4_5": 14, "lfm2": 40, "lfm2moe": 58}

// decodeDispatchesOutside bounds those outside the layers: the embedding
// (and gemma3's scaling of it), the final norm, its quantisation, the
// output head (and gemma3's softcap), and the greedy step's argmax.
const decodeDispatchesOutside = 8

// TestDecodeDispatches counts the kernels a greedy decode step dispatches,
// per layer and outside the layers (two models that differ only in depth
// tell them apart), for every architecture of the fixtures, and checks the
// step is one command buffer.
func TestDecodeDispatches(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Skipf("vocabulary source: %v", err)
	}
	for _, arch := range modeltest.Archs {
		t.Run(arch, func(t *testing.T) {
			be, _ := newEmu(t, emuConfig)
			why := modeltest.Unsupported(arch, be)
			be.Close()
			if why != "" {
				t.Skip(why)
			}
			perLayer, outside, err := modeltest.PerLayer(arch, md, func(f *gguf.File) (int64, error) { return decodeDispatches(t, f), nil })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d dispatches per decode layer, %d outside the layers", arch, perLayer, outside)
			if want, ok := decodeDispatchesPerLayer[arch]; !ok || perLayer > want || perLayer <= 0 {
				t.Errorf("%s: %d dispatches per layer, want at most %d", arch, perLayer, want)
			}
			if outside > decodeDispatchesOutside || outside <= 0 {
				t.Errorf("%s: %d dispatches outside the layers, want at most %d", arch, outside, decodeDispatchesOutside)
			}
		})
	}
}

// decodeDispatches is the kernels one greedy decode step of f dispatches.
func decodeDispatches(t *testing.T, f *gguf.File) int64 {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Eval(ctx, []uint32{7}); err != nil { // the first step makes one-off tables
		t.Fatal(err)
	}
	before := be.Stats()
	if _, err := s.EvalArgMax(ctx, []uint32{42}); err != nil {
		t.Fatal(err)
	}
	after := be.Stats()
	// A mixture of experts routes on the host (gguf/model/moe.go): each
	// layer reads back the router's scores and each chosen expert's
	// output, so its step is that many more.
	want := int64(1)
	if c := m.Config(); c.Experts > 0 {
		want += int64((c.Layers - c.DenseLead) * (1 + c.ExpertsUsed))
	}
	// Qwen3.5 (gguf/model/hybrid.go) runs each delta net's scan, each
	// attention block's query-and-gate split and output gate, on the
	// host, and qwen35moe its shared expert's gated sum. LFM2's
	// convolutions are the backend's (gated_conv): no read-back.
	if c := m.Config(); c.SSMHeads > 0 { // delta nets
		// Attention blocks read back twice: the joint query-and-gate
		// projection, split on the host, and the gated output.
		for _, rec := range c.Recurrent {
			want++
			if !rec {
				want++
			}
		}
		if c.SharedFF > 0 {
			want += int64(c.Layers)
		}
	}
	if steps := after.Steps - before.Steps; steps != want {
		t.Errorf("a decode step was %d command buffers, want %d", steps, want)
	}
	return after.Dispatches - before.Dispatches
}
