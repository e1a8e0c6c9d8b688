package model_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
)

// TestLFM2Refusals: an lfm2 file whose layer pattern or convolution the
// engine cannot run is refused with the key named, and so is a backend
// without the gated convolution.
func TestLFM2Refusals(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	file := fixtureBytes(t, "lfm2", "Q8_0")
	refusedAll(t, be, file, []refusal{
		{"bidirectional", map[string]any{"lfm2.attention.causal": false}, model.ErrUnsupported, "bidirectional"},
		{"no convolution blocks", map[string]any{"lfm2.attention.head_count_kv": uint32(2)}, model.ErrUnsupported, "without convolution blocks"},
		{"KV heads varying", map[string]any{"lfm2.attention.head_count_kv": []uint32{0, 2, 0, 1}}, model.ErrUnsupported, "varies over the attention blocks"},
		{"counts of another length", map[string]any{"lfm2.attention.head_count_kv": []uint32{0, 2}}, model.ErrInvalid, "2 counts for 4 blocks"},
		{"no KV head counts", map[string]any{"lfm2.attention.head_count_kv": nil}, model.ErrInvalid, "head_count_kv is missing"},
		{"no taps", map[string]any{"lfm2.shortconv.l_cache": nil}, model.ErrInvalid, "shortconv.l_cache"},
		{"one tap", map[string]any{"lfm2.shortconv.l_cache": uint32(1)}, model.ErrInvalid, "shortconv.l_cache = 1"},
		{"too many taps", map[string]any{"lfm2.shortconv.l_cache": uint32(backend.MaxConvKernel + 1)}, model.ErrInvalid, "shortconv.l_cache = 65"},
	})
	if _, err := load(t, file, plainBackend{be}); !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "gated short convolution") {
		t.Fatalf("a backend without the gated convolution: %v, want %v", err, model.ErrUnsupported)
	}
}

// TestLFM2Layout: the KV head counts mark the convolution blocks, which
// keep a one-head cache slot and a state of ConvKernel−1 rows (twice:
// the checkpoint), and a sliding window slides the attention blocks only.
func TestLFM2Layout(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	file := fixtureBytes(t, "lfm2", "Q8_0")
	m, err := load(t, file, be)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	if want := []bool{true, false, true, true}; !slices.Equal(c.Recurrent, want) {
		t.Fatalf("recurrent blocks %v, want %v", c.Recurrent, want)
	}
	head, attn := c.HeadDimK+c.HeadDimV, c.KVHeads*(c.HeadDimK+c.HeadDimV)
	var got []int
	for l := range c.Layers {
		got = append(got, c.LayerKVElems(l))
	}
	if want := []int{head, attn, head, head}; c.KVHeads == 1 || !slices.Equal(got, want) {
		t.Fatalf("floats per position by block %v, want %v (%d KV heads)", got, want, c.KVHeads)
	}
	if got, want := m.StateBytes(), int64(2*4*3*(c.ConvKernel-1)*c.Embd); got != want {
		t.Fatalf("state of %d bytes, want %d", got, want)
	}
	if slices.Contains(c.SWA, true) {
		t.Fatalf("sliding blocks %v in a file without a window", c.SWA)
	}
	w, err := load(t, rewrite(t, file, map[string]any{"lfm2.attention.sliding_window": uint32(8)}, nil, nil), be)
	if err != nil {
		t.Fatal(err)
	}
	if c := w.Config(); c.SlidingWindow != 8 || !slices.Equal(c.SWA, []bool{false, true, false, false}) {
		t.Fatalf("window %d over blocks %v, want 8 over block 1", c.SlidingWindow, c.SWA)
	}
	parsed, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.LoadStage(parsed, be, model.LayerRange{Lo: 0, Hi: 2}); !errors.Is(err, model.ErrUnsupported) {
		t.Fatalf("a stage of an lfm2 model: %v, want %v", err, model.ErrUnsupported)
	}
}

// TestLFM2MoERefusals: an lfm2moe file whose routing the engine does not
// run, or whose blocks do not add up, is refused with the key named.
func TestLFM2MoERefusals(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	file := fixtureBytes(t, "lfm2moe", "Q8_0")
	m, err := load(t, file, be)
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config(); !c.ExpertSigmoid || c.DenseLead != 1 || c.Experts != 8 {
		t.Fatalf("config %+v", c)
	}
	refusedAll(t, be, file, []refusal{
		{"softmax gating", map[string]any{"lfm2moe.expert_gating_func": uint32(1)}, model.ErrUnsupported, "expert_gating_func = 1"},
		{"no gating", map[string]any{"lfm2moe.expert_gating_func": nil}, model.ErrInvalid, "expert_gating_func"},
		{"more dense blocks than blocks", map[string]any{"lfm2moe.leading_dense_block_count": uint32(5)}, model.ErrInvalid, "leading_dense_block_count = 5"},
		// Block 1's experts then have no dense FFN to stand in for them.
		{"dense where the file has experts", map[string]any{"lfm2moe.leading_dense_block_count": uint32(2)}, model.ErrInvalid, "blk.1.ffn_gate.weight"},
	})
	noBias := rewrite(t, file, nil, func(ts []gguf.TensorInfo) []gguf.TensorInfo {
		return slices.DeleteFunc(ts, func(ti gguf.TensorInfo) bool { return ti.Name == "blk.2.exp_probs_b.bias" })
	}, nil)
	if _, err := load(t, noBias, be); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "blk.2.exp_probs_b.bias") {
		t.Fatalf("no selection bias: %v", err)
	}
}

// refusal is a metadata edit that makes a file refused: the error and
// the text it must name.
type refusal struct {
	name string
	meta map[string]any
	want error
	key  string
}

// refusedAll checks that each edit of file is refused as it says.
func refusedAll(t *testing.T, be backend.Backend, file []byte, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, rewrite(t, file, tc.meta, nil, nil), be)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("%v, want %v naming %q", err, tc.want, tc.key)
			}
		})
	}
}
