package encoder

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
)

// TestHiddenRefusesBadInput: an input that is empty, longer than the
// context or holds a token past the vocabulary is refused with ErrInput,
// naming what is wrong, and the model still encodes afterwards.
func TestHiddenRefusesBadInput(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m, err := Load(openFixture(t, "bert"), be)
	if err != nil {
		t.Fatal(err)
	}
	long := make([]uint32, encodertest.Context+1)
	for i := range long {
		long[i] = 5
	}
	for _, tc := range []struct {
		ids  []uint32
		says string
	}{
		{nil, "no tokens"},
		{long, "more than the model's context of 64"},
		{[]uint32{2, 75, 3}, "token 75 (at 1) is outside the vocabulary of 75"},
	} {
		if _, err := m.Hidden(context.Background(), tc.ids); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want ErrInput saying %q", tc.ids, err, tc.says)
		}
	}
	if _, err := m.Hidden(context.Background(), long[:encodertest.Context]); err != nil {
		t.Fatalf("a whole context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Hidden(ctx, []uint32{2, 3}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestLoadRefusesMalformed: a file that is not an encoder this package
// runs, or whose tensors do not fit its metadata, is refused with
// ErrInvalid naming the key or tensor.
func TestLoadRefusesMalformed(t *testing.T) {
	bases := map[string]func() ([]byte, error){
		"":     func() ([]byte, error) { return encodertest.Fixture("bert") },
		"jina": encodertest.Jina, "jina-reranker": encodertest.JinaReranker,
		"moe":   func() ([]byte, error) { return encodertest.Fixture("nomic-bert-moe") },
		"gemma": func() ([]byte, error) { return encodertest.Gemma(true) },
		"jina3": func() ([]byte, error) { return encodertest.Fixture("jina-bert-v3") },
		"modern": func() ([]byte, error) {
			return encodertest.Build(encodertest.Spec{Arch: "modern-bert", Embd: 32, Layers: 3, Heads: 4, FF: 48, Context: 64, Window: 16})
		},
	}
	for _, tc := range []struct {
		name string
		set  map[string]any
		drop string // a key or a tensor left out
		says string
		base string // the fixture changed: bert's where empty
	}{
		{"a decoder", map[string]any{"general.architecture": "llama"}, "", `"llama" is not an encoder`, ""},
		{"causal", map[string]any{"bert.attention.causal": true}, "", "attends both ways", ""},
		{"heads", map[string]any{"bert.attention.head_count": uint32(5)}, "", "5 heads do not divide", ""},
		{"no eps", nil, "bert.attention.layer_norm_epsilon", "layer_norm_epsilon", ""},
		{"wider", map[string]any{"bert.feed_forward_length": uint32(64)}, "", "blk.0.ffn_up.weight has shape", ""},
		{"no positions", nil, "position_embd.weight", "position_embd.weight is missing", ""},
		{"huge", map[string]any{"bert.block_count": uint32(1 << 30)}, "", "block_count is 1073741824", ""},
		{"jina without token types", nil, "token_types.weight", "needs token type embeddings", "jina"},
		{"a norm's bias alone", nil, "blk.1.attn_k_norm.weight", "blk.1.attn_k_norm.bias without its weight", "jina"},
		{"a gate in some layers", nil, "blk.0.ffn_gate.weight", "blk.1 has a gate (ffn_gate.weight) where blk.0 has none", "jina"},
		{"more experts used than there are", map[string]any{"nomic-bert-moe.expert_used_count": uint32(5)}, "", "5 of 4 experts used", "moe"},
		{"no expert count", nil, "nomic-bert-moe.expert_count", "expert_count is missing", "moe"},
		{"no experts", nil, "blk.1.ffn_down_exps.weight", "blk.1.ffn_down_exps.weight is missing", "moe"},
		{"fewer experts than counted", map[string]any{"nomic-bert-moe.expert_count": uint32(8)}, "", "blk.1.ffn_gate_inp.weight has shape", "moe"},
		{"a ReGLU", map[string]any{"modern-bert.hidden_activation": "relu"}, "", `hidden_activation "relu"`, "modern"},
		{"a pattern per layer", map[string]any{"modern-bert.attention.sliding_window_pattern": []bool{false, true, true}}, "", "sliding_window_pattern is an array of 3", "modern"},
		{"no input norm past the first layer", nil, "blk.1.attn_norm.weight", "blk.1.attn_norm.weight is missing", "modern"},
		{"an up of FF", map[string]any{"modern-bert.feed_forward_length": uint32(96)}, "", "blk.0.ffn_up.weight has shape", "modern"},
		{"one projection of two", nil, "dense_3.weight", "dense_2.weight and dense_3.weight come together", "gemma"},
		{"projections that disagree", map[string]any{"gemma-embedding.dense_3_feat_in": uint32(48)}, "", "must be set and agree", "gemma"},
		{"KV heads that do not divide", map[string]any{"gemma-embedding.attention.head_count_kv": uint32(3)}, "", "3 key heads for 4 query heads", "gemma"},
		{"values of another width", map[string]any{"gemma-embedding.attention.value_length": uint32(8)}, "", "values 8 wide for keys 16 wide", "gemma"},
		{"no window", nil, "gemma-embedding.attention.sliding_window", "sliding_window is missing", "gemma"},
		{"no RMS epsilon", nil, "gemma-embedding.attention.layer_norm_rms_epsilon", "layer_norm_rms_epsilon is missing", "gemma"},
		{"jina-bert-v3 without token types", nil, "tokenizer.ggml.token_type_count", "needs a token type count", "jina3"},
		{"up neither FF nor 2·FF", map[string]any{"jina-bert-v2.feed_forward_length": uint32(40)}, "", "blk.0.ffn_up.weight has shape", "jina-reranker"},
	} {
		raw, err := bases[tc.base]()
		if err != nil {
			t.Fatal(err)
		}
		base, err := gguf.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		w, err := gguf.Rewrite(base, tc.set, tc.drop)
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		be := cpu.New(cpu.Options{Threads: 1})
		_, err = Load(f, be)
		be.Close()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.name, err, tc.says)
		}
	}
}

// FuzzLoad: no file makes Load, Hidden or Scores panic. Seeded with
// small fixtures of each architecture, and jina-bert-v2's rerankers and
// options.
func FuzzLoad(f *testing.F) {
	for _, sp := range []encodertest.Spec{
		{Arch: "bert"}, {Arch: "nomic-bert"}, {Arch: "nomic-bert-moe"}, {Arch: "jina-bert-v3"}, {Arch: "bert", Reranker: true},
		{Arch: "jina-bert-v2", Norms: true}, {Arch: "jina-bert-v2", FusedGate: true, Reranker: true},
		{Arch: "modern-bert", Window: 4}, {Arch: "modern-bert", Reranker: true, Activation: "silu"},
		{Arch: "gemma-embedding", Window: 4, KVHeads: 1, HeadDim: 4, Dense: 16},
	} {
		sp.Embd, sp.Layers, sp.Heads, sp.FF, sp.Context = 8, 1, 2, 8, 8
		if sp.Arch == "nomic-bert-moe" {
			sp.Layers = 2 // its second layer is the mixture
		}
		b, err := encodertest.Build(sp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	be := cpu.New(cpu.Options{Threads: 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		gf, err := gguf.Parse(b)
		if err != nil {
			return
		}
		m, err := Load(gf, be)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Load: %v, not ErrInvalid", err)
			}
			return
		}
		if _, err := m.Hidden(context.Background(), []uint32{2, 5, 3}); err != nil && !errors.Is(err, ErrInput) {
			t.Fatalf("Hidden: %v", err)
		}
		if _, err := m.Scores(context.Background(), []uint32{2, 5, 3}); err != nil && !errors.Is(err, ErrInput) && !errors.Is(err, ErrNoHead) {
			t.Fatalf("Scores: %v", err)
		}
	})
}
