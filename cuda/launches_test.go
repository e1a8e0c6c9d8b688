package cuda_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// decodeLaunchesPerLayer bounds the kernels one layer of a decode step
// launches, by architecture, as docs/cuda.md lists them: llama's 11 (add+
// norm+quantise, QKV, RoPE, store K/V, attention, quantise, output,
// add+norm+quantise, gate+up, GLU+quantise, down), phi3's fused QKV
// and gate+up matrices, qwen2's Q, K and V biases, gemma3's per-head Q/K
// norms and post-attention and post-FFN norms, qwen3's Q/K norms, and
// qwen3moe's router and its experts on the device (the routing, the
// gathered gate and up products, the GLU, quantise, the gathered down
// product and the weighted sum: no read-back), a dense gemma4 block's V
// norm and output scale; for qwen35 and qwen35moe a pair of blocks, a
// delta net (its four projections, the short convolution and the scan,
// the output projection) and gated attention (qwen3's with the query and
// gate projections split at load, and the sigmoid gate), and qwen35moe's
// shared expert and its gate; gpt-oss's 27: llama's attention with Q, K,
// V and output biases (the sinks in the attention kernel), the router and
// its bias, and qwen3moe's expert launches with a bias after each
// gathered product and the clamped SwiGLU; granite's 13: llama's and
// the two residual scales, and granitemoe's 18: qwen3moe's with the
// residual scales in place of the Q/K norms; smollm3's, llama's (its
// NoPE blocks, every fourth, launch fewer: no RoPE); gemma2's 14:
// gemma3's without the Q/K norms (the score cap is the attention
// kernel's); mistral3's 12: llama's and, past the original context, the
// queries' temperature; olmo2's and exaone4's 17: the Q/K norms and the
// two post-norms, and with no norm before attention or the FFN to fuse
// them into, the residual adds and the quantisations launched alone;
// ernie4_5's, llama's; lfm2's 31 for a run of its pattern, two
// convolution blocks (add+norm+quantise, the in-projection, the gated
// convolution, quantise, the out-projection, then llama's FFN: 9 each)
// and qwen3's attention block (13); lfm2moe's 46, each block's FFN
// qwen3moe's experts routed on the device by sigmoid with the selection
// bias. A change that launches more fails here and updates the docs.
var decodeLaunchesPerLayer = map[string]int64{"llama": 11, "phi3": 12, "qwen2": 16, "gemma3": 16, "qwen3": 13, "qwen3moe": 18, "gemma4": 19, "qwen35": 26, "qwen35moe": 50, "gpt-oss": 27, "granite": 13, "granitemoe": 18, "smollm3": 11, "gemma2": 14, "mistral3": 12, "olmo2": 17, "exaone4": 17, "ernie4_5": 11, "lfm2": 31, "lfm2moe": 46}

// decodeLaunchesOutside bounds those outside the layers: the embedding
// (and gemma3's scaling of it), the final norm with its quantisation, the
// output head (and gemma3's softcap), and the greedy step's argmax.
const decodeLaunchesOutside = 7

// TestDecodeLaunches counts the kernels a decode step launches, per layer
// and outside the layers (two models that differ only in depth tell them
// apart), for every architecture of the fixtures.
func TestDecodeLaunches(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Skipf("vocabulary source: %v", err)
	}
	for _, arch := range modeltest.Archs {
		t.Run(arch, func(t *testing.T) {
			be, _ := newEmu(t, cuda.Options{NoGraphs: true})
			why := modeltest.Unsupported(arch, be)
			be.Close()
			if why != "" {
				t.Skip(why)
			}
			perLayer, outside, err := modeltest.PerLayer(arch, md, func(f *gguf.File) (int64, error) { return decodeLaunches(t, f), nil })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d launches per layer, %d outside the layers", arch, perLayer, outside)
			if want, ok := decodeLaunchesPerLayer[arch]; !ok || perLayer > want || perLayer <= 0 {
				t.Errorf("%s: %d launches per layer, want at most %d", arch, perLayer, want)
			}
			if outside > decodeLaunchesOutside || outside <= 0 {
				t.Errorf("%s: %d launches outside the layers, want at most %d", arch, outside, decodeLaunchesOutside)
			}
		})
	}
}

// decodeLaunches is the kernels one greedy decode step of f launches,
// kernel by kernel.
func decodeLaunches(t *testing.T, f *gguf.File) int64 {
	be, _ := newEmu(t, cuda.Options{NoGraphs: true})
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
	// A mixture of experts routes on the device (backend.MoE), and
	// Qwen3.5 (gguf/model/hybrid.go) reads nothing back per layer: its
	// delta nets' convolution and scan, its attention's query-and-gate
	// projections and output gate, and qwen35moe's shared-expert gate
	// are the backend's kernels.
	if steps, want := after.Steps-before.Steps, int64(1); steps != want {
		t.Errorf("a decode step was launched as %d recordings, want %d", steps, want)
	}
	return after.Launches - before.Launches
}
