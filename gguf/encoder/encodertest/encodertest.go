// Package encodertest builds the random-weight encoders (bert,
// nomic-bert, nomic-bert-moe, jina-bert-v2, modern-bert and
// gemma-embedding, with a small WordPiece vocabulary or a vocabulary
// file's) that the encoder's, the engine's and the node's tests load, and
// whose hidden states llama.cpp gave for the goldens in
// gguf/encoder/testdata.
package encodertest

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/quant"
)

// The fixtures' shape: small, but every dimension distinct and the heads
// more than one.
const (
	Embd, Layers, Heads, FF, Context = 32, 2, 4, 48, 64
)

// Spec shapes a fixture Build writes.
type Spec struct {
	Arch                             string // "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert" or "gemma-embedding"
	Embd, Layers, Heads, FF, Context int
	// Pooling is the file's pooling_type; 0 writes mean's (1).
	Pooling uint32
	// Reranker adds a classification head, as a converted cross-encoder
	// has (bert: cls and cls.output, one label; jina-bert-v2: a one-row
	// cls, as jina-reranker-v1's), and pooling rank (4).
	Reranker bool
	// jina-bert-v2's options: FusedGate writes the gate as ffn_up's first
	// half (2·FF rows) rather than an ffn_gate of its own; Norms adds the
	// optional layer norms (attn_q_norm, attn_k_norm, attn_norm_2).
	FusedGate, Norms bool
	// nomic-bert-moe's mixture, in every second layer (the odd ones):
	// Experts experts (4 where 0), ExpertsUsed of them per token (2
	// where 0).
	Experts, ExpertsUsed int
	// modern-bert's and gemma-embedding's local attention window (every
	// third layer global: modern-bert's first of each three,
	// gemma-embedding's last), and modern-bert's hidden_activation ("gelu"
	// where empty).
	Window, WindowEvery int // WindowEvery: the period of global layers, 3 where 0
	Activation          string
	// gemma-embedding's key and value heads, its heads' width, and the
	// width of its dense projections (0: the file has none).
	KVHeads, HeadDim, Dense int
	// Tokenizer, when set, is a vocabulary file's metadata whose
	// tokenizer.* keys the fixture takes instead of Vocab's (an XLM-R
	// vocabulary for a bge-m3-shaped encoder); the token embeddings get a
	// row per token.
	Tokenizer *gguf.Metadata
}

// Vocab is a WordPiece vocabulary in llama.cpp's GGUF form (a
// word's first piece after "▁", continuations bare; punctuation is a
// word of its own): the specials, a few words, a few punctuation marks
// and suffixes, and every lowercase letter both ways, so that any
// lowercase ASCII word has pieces.
func Vocab() (tokens []string, types []int32) {
	tokens = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	types = []int32{3, 2, 3, 3, 3}
	for _, w := range []string{"the", "man", "walks", "into", "bar", "cat", "sat", "on", "mat", "dog", "runs", "fast"} {
		tokens, types = append(tokens, "▁"+w), append(types, 1)
	}
	for _, p := range []string{"▁.", "▁,", "▁!", "▁?", "ing", "ed"} {
		tokens, types = append(tokens, p), append(types, 1)
	}
	for c := 'a'; c <= 'z'; c++ {
		tokens, types = append(tokens, "▁"+string(c), string(c)), append(types, 1, 1)
	}
	return tokens, types
}

// Fixture builds the random-weight encoder of arch (any Build takes) the
// goldens were made from: Build at the fixtures' shape (gemma-embedding's
// is Gemma's, with its dense projections).
func Fixture(arch string) ([]byte, error) {
	if arch == "gemma-embedding" {
		return Gemma(true)
	}
	return Build(Spec{Arch: arch, Embd: Embd, Layers: Layers, Heads: Heads, FF: FF, Context: Context})
}

// Build writes a random-weight encoder of sp's shape with Vocab, seeded
// by its architecture: the same bytes every run. Matrices are F16 (as
// converted models' are), norms and biases F32.
func Build(sp Spec) ([]byte, error) {
	var err error
	arch := sp.Arch
	rng := rand.New(rand.NewPCG(11, uint64(len(arch))))
	w := gguf.NewWriter()
	tokens, types := Vocab()
	set := func(k string, v any) {
		if e := w.Set(k, v); e != nil && err == nil {
			err = e
		}
	}
	set("general.architecture", arch)
	set("general.name", "meshnode-"+arch+"-fixture")
	set(arch+".context_length", uint32(sp.Context))
	set(arch+".embedding_length", uint32(sp.Embd))
	set(arch+".feed_forward_length", uint32(sp.FF))
	set(arch+".block_count", uint32(sp.Layers))
	set(arch+".attention.head_count", uint32(sp.Heads))
	set(arch+".attention.layer_norm_epsilon", float32(1e-12))
	set(arch+".attention.causal", false)
	if sp.Reranker {
		sp.Pooling = 4
	}
	set(arch+".pooling_type", max(sp.Pooling, 1))
	moe := arch == "nomic-bert-moe"
	if arch == "nomic-bert" || moe {
		set(arch+".rope.freq_base", float32(1000))
	}
	if arch == "jina-bert-v3" {
		set(arch+".rope.freq_base", float32(20000)) // jina-embeddings-v3's rotary base
	}
	if arch == "modern-bert" || arch == "gemma-embedding" {
		set(arch+".rope.freq_base", float32(160000))
		set(arch+".rope.freq_base_swa", float32(10000))
		set(arch+".attention.sliding_window", uint32(sp.Window))
		set(arch+".attention.sliding_window_pattern", uint32(cmp.Or(sp.WindowEvery, 3)))
		if sp.Activation != "" {
			set(arch+".hidden_activation", sp.Activation)
		}
	}
	if arch == "gemma-embedding" {
		set(arch+".attention.head_count_kv", uint32(sp.KVHeads))
		set(arch+".attention.key_length", uint32(sp.HeadDim))
		set(arch+".attention.value_length", uint32(sp.HeadDim))
		set(arch+".attention.layer_norm_rms_epsilon", float32(1e-6))
		if sp.Dense > 0 {
			set(arch+".dense_2_feat_in", uint32(sp.Embd))
			set(arch+".dense_2_feat_out", uint32(sp.Dense))
			set(arch+".dense_3_feat_in", uint32(sp.Dense))
			set(arch+".dense_3_feat_out", uint32(sp.Embd))
		}
	}
	if moe {
		sp.Experts, sp.ExpertsUsed = cmp.Or(sp.Experts, 4), cmp.Or(sp.ExpertsUsed, 2)
		set(arch+".expert_count", uint32(sp.Experts))
		set(arch+".expert_used_count", uint32(sp.ExpertsUsed))
		set(arch+".moe_every_n_layers", uint32(2))
	}
	if sp.Tokenizer != nil {
		n, _ := sp.Tokenizer.ArrayLen("tokenizer.ggml.tokens")
		tokens = make([]string, n)
		for _, kv := range sp.Tokenizer.KVs() {
			if strings.HasPrefix(kv.Key, "tokenizer.") && kv.Key != "tokenizer.ggml.token_type_count" {
				set(kv.Key, kv.Value)
			}
		}
		set("tokenizer.ggml.token_type_count", uint32(1)) // XLM-R has one
	} else {
		set("tokenizer.ggml.model", "bert")
		set("tokenizer.ggml.tokens", tokens)
		set("tokenizer.ggml.token_type", types)
		set("tokenizer.ggml.token_type_count", uint32(2))
		set("tokenizer.ggml.padding_token_id", uint32(0))
		set("tokenizer.ggml.unknown_token_id", uint32(1))
		set("tokenizer.ggml.bos_token_id", uint32(2))
		set("tokenizer.ggml.seperator_token_id", uint32(3))
		set("tokenizer.ggml.mask_token_id", uint32(4))
	}

	normal := func(n int, mean, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + float64(sd*rng.NormFloat64())) // rounded: the same bytes on arm64, which would fuse it
		}
		return v
	}
	f32 := func(name string, v []float32, dims ...int64) {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		if e := w.AddTensor(name, quant.F32, dims, b); e != nil && err == nil {
			err = e
		}
	}
	f16 := func(name string, v []float32, dims ...int64) {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], quant.FP32ToFP16(x))
		}
		if e := w.AddTensor(name, quant.F16, dims, b); e != nil && err == nil {
			err = e
		}
	}
	e, sd := int64(sp.Embd), 1/math.Sqrt(float64(sp.Embd))
	f16("token_embd.weight", normal(len(tokens)*sp.Embd, 0, 1), e, int64(len(tokens)))
	switch arch {
	case "modern-bert":
		modern(sp, f16, f32, normal)
	case "gemma-embedding":
		gemma(sp, f16, f32, normal)
	default:
		types2 := int64(2)
		if sp.Tokenizer != nil {
			types2 = 1
		}
		f32("token_types.weight", normal(int(types2)*sp.Embd, 0, 0.5), e, types2)
		if arch == "bert" {
			f16("position_embd.weight", normal(sp.Context*sp.Embd, 0, 0.5), e, int64(sp.Context))
		}
		f32("token_embd_norm.weight", normal(sp.Embd, 1, 0.1), e)
		f32("token_embd_norm.bias", normal(sp.Embd, 0, 0.1), e)
		for l := range sp.Layers {
			p := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
			if arch == "nomic-bert" || moe {
				f16(p("attn_qkv.weight"), normal(3*sp.Embd*sp.Embd, 0, sd), e, 3*e)
				if moe {
					f32(p("attn_qkv.bias"), normal(3*sp.Embd, 0, 0.1), 3*e)
				}
			} else {
				for _, m := range []string{"attn_q", "attn_k", "attn_v"} {
					f16(p(m+".weight"), normal(sp.Embd*sp.Embd, 0, sd), e, e)
					f32(p(m+".bias"), normal(sp.Embd, 0, 0.1), e)
				}
			}
			f16(p("attn_output.weight"), normal(sp.Embd*sp.Embd, 0, sd), e, e)
			f32(p("attn_output.bias"), normal(sp.Embd, 0, 0.1), e)
			f32(p("attn_output_norm.weight"), normal(sp.Embd, 1, 0.1), e)
			f32(p("attn_output_norm.bias"), normal(sp.Embd, 0, 0.1), e)
			if moe && l%2 == 1 {
				x, ff := int64(sp.Experts), int64(sp.FF)
				f32(p("ffn_gate_inp.weight"), normal(sp.Experts*sp.Embd, 0, sd), e, x)
				f16(p("ffn_up_exps.weight"), normal(sp.Experts*sp.FF*sp.Embd, 0, sd), e, ff, x)
				f16(p("ffn_down_exps.weight"), normal(sp.Experts*sp.Embd*sp.FF, 0, 1/math.Sqrt(float64(sp.FF))), ff, e, x)
			} else {
				up := int64(sp.FF)
				if sp.FusedGate {
					up *= 2
				}
				f16(p("ffn_up.weight"), normal(int(up)*sp.Embd, 0, sd), e, up)
				if arch == "nomic-bert" || arch == "jina-bert-v2" && !sp.FusedGate {
					f16(p("ffn_gate.weight"), normal(sp.FF*sp.Embd, 0, sd), e, int64(sp.FF))
				}
				if arch != "nomic-bert" {
					f32(p("ffn_up.bias"), normal(int(up), 0, 0.1), up)
					f32(p("ffn_down.bias"), normal(sp.Embd, 0, 0.1), e)
				}
				if sp.Norms {
					for _, n := range []string{"attn_q_norm", "attn_k_norm", "attn_norm_2"} {
						f32(p(n+".weight"), normal(sp.Embd, 1, 0.1), e)
						f32(p(n+".bias"), normal(sp.Embd, 0, 0.1), e)
					}
				}
				f16(p("ffn_down.weight"), normal(sp.Embd*sp.FF, 0, 1/math.Sqrt(float64(sp.FF))), int64(sp.FF), e)
			}
			f32(p("layer_output_norm.weight"), normal(sp.Embd, 1, 0.1), e)
			f32(p("layer_output_norm.bias"), normal(sp.Embd, 0, 0.1), e)
		}
		if sp.Reranker && arch == "jina-bert-v2" {
			f16("cls.weight", normal(sp.Embd, 0, sd), e, 1)
			f32("cls.bias", normal(1, 0, 0.1), 1)
		} else if sp.Reranker {
			f16("cls.weight", normal(sp.Embd*sp.Embd, 0, sd), e, e)
			f32("cls.bias", normal(sp.Embd, 0, 0.1), e)
			f16("cls.output.weight", normal(sp.Embd, 0, 1), e, 1)
			f32("cls.output.bias", normal(1, 0, 0.1), 1)
		}
	}
	if err != nil {
		return nil, err
	}
	return w.Bytes()
}

// modern writes modern-bert's tensors after its token embeddings: no
// token types or positions; pre-norm layers without biases (the first
// without an attention norm, as ModernBERT's), a fused QKV and an up of
// twice the feed-forward's width (the gate its first half); the output
// norm; for a reranker, ModernBERT's head (cls, its norm, cls.output).
func modern(sp Spec, f16, f32 func(string, []float32, ...int64), normal func(int, float64, float64) []float32) {
	e, sd := int64(sp.Embd), 1/math.Sqrt(float64(sp.Embd))
	f32("token_embd_norm.weight", normal(sp.Embd, 1, 0.1), e)
	for l := range sp.Layers {
		p := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		if l > 0 {
			f32(p("attn_norm.weight"), normal(sp.Embd, 1, 0.1), e)
		}
		f16(p("attn_qkv.weight"), normal(3*sp.Embd*sp.Embd, 0, sd), e, 3*e)
		f16(p("attn_output.weight"), normal(sp.Embd*sp.Embd, 0, sd), e, e)
		f32(p("ffn_norm.weight"), normal(sp.Embd, 1, 0.1), e)
		f16(p("ffn_up.weight"), normal(2*sp.FF*sp.Embd, 0, sd), e, 2*int64(sp.FF))
		f16(p("ffn_down.weight"), normal(sp.Embd*sp.FF, 0, 1/math.Sqrt(float64(sp.FF))), int64(sp.FF), e)
	}
	f32("output_norm.weight", normal(sp.Embd, 1, 0.1), e)
	if sp.Reranker {
		f16("cls.weight", normal(sp.Embd*sp.Embd, 0, sd), e, e)
		f32("cls.norm.weight", normal(sp.Embd, 1, 0.1), e)
		f16("cls.output.weight", normal(sp.Embd, 0, 1), e, 1)
		f32("cls.output.bias", normal(1, 0, 0.1), 1)
	}
}

// Modern is the modern-bert fixture the goldens were made from, with
// vocab's tokenizer (GPT-2's BPE vocabulary, llama.cpp's
// ggml-vocab-gpt-2.gguf) under the keys ModernBERT's converter writes
// (pre-tokenizer "modern-bert", BOS, EOS and SEP added; GPT-2's
// <|endoftext|> as the SEP it lacks): three layers at Fixture's width, the
// first global and the others local in a window of 16. The reranker's
// feed-forward is SwiGLU (Granite Embedding R2's), the other's GEGLU.
func Modern(vocab *gguf.File, reranker bool) ([]byte, error) {
	w, err := gguf.Rewrite(vocab, map[string]any{
		"tokenizer.ggml.pre": "modern-bert", "tokenizer.ggml.add_bos_token": true,
		"tokenizer.ggml.add_eos_token": true, "tokenizer.ggml.add_sep_token": true,
		"tokenizer.ggml.seperator_token_id": uint32(50256),
	})
	if err != nil {
		return nil, err
	}
	raw, err := w.Bytes()
	if err != nil {
		return nil, err
	}
	voc, err := gguf.Parse(raw)
	if err != nil {
		return nil, err
	}
	sp := Spec{Arch: "modern-bert", Embd: Embd, Layers: 3, Heads: Heads, FF: FF, Context: Context, Window: 16,
		Reranker: reranker, Tokenizer: voc.Metadata}
	if reranker {
		sp.Activation = "silu"
	}
	return Build(sp)
}

// gemma writes gemma-embedding's tensors after its token embeddings: per
// layer the RMS norms before and after attention and the feed-forward and
// of each head's queries and keys (gemma's weights, near 1), grouped Q, K
// and V of their own head width, a GELU-gated feed-forward, no biases;
// the output norm; and where sp.Dense is set, the dense projections.
func gemma(sp Spec, f16, f32 func(string, []float32, ...int64), normal func(int, float64, float64) []float32) {
	e, sd := int64(sp.Embd), 1/math.Sqrt(float64(sp.Embd))
	qw, kw, hd := int64(sp.Heads*sp.HeadDim), int64(sp.KVHeads*sp.HeadDim), int64(sp.HeadDim)
	for l := range sp.Layers {
		p := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
		f32(p("attn_norm.weight"), normal(sp.Embd, 1, 0.1), e)
		f16(p("attn_q.weight"), normal(int(qw*e), 0, sd), e, qw)
		f16(p("attn_k.weight"), normal(int(kw*e), 0, sd), e, kw)
		f16(p("attn_v.weight"), normal(int(kw*e), 0, sd), e, kw)
		f16(p("attn_output.weight"), normal(int(e*qw), 0, 1/math.Sqrt(float64(qw))), qw, e)
		f32(p("post_attention_norm.weight"), normal(sp.Embd, 1, 0.1), e)
		f32(p("attn_q_norm.weight"), normal(sp.HeadDim, 1, 0.1), hd)
		f32(p("attn_k_norm.weight"), normal(sp.HeadDim, 1, 0.1), hd)
		f32(p("ffn_norm.weight"), normal(sp.Embd, 1, 0.1), e)
		f16(p("ffn_gate.weight"), normal(sp.FF*sp.Embd, 0, sd), e, int64(sp.FF))
		f16(p("ffn_up.weight"), normal(sp.FF*sp.Embd, 0, sd), e, int64(sp.FF))
		f16(p("ffn_down.weight"), normal(sp.Embd*sp.FF, 0, 1/math.Sqrt(float64(sp.FF))), int64(sp.FF), e)
		f32(p("post_ffw_norm.weight"), normal(sp.Embd, 1, 0.1), e)
	}
	f32("output_norm.weight", normal(sp.Embd, 1, 0.1), e)
	if sp.Dense > 0 {
		d := int64(sp.Dense)
		f16("dense_2.weight", normal(sp.Dense*sp.Embd, 0, sd), e, d)
		f16("dense_3.weight", normal(sp.Embd*sp.Dense, 0, 1/math.Sqrt(float64(sp.Dense))), d, e)
	}
}

// Gemma is the gemma-embedding fixture the goldens were made from, as
// EmbeddingGemma is built at Fixture's width: four heads 16 wide over two
// KV heads, three layers (two local in a window of 16, then a global
// one); with dense set, its dense projections (64 wide).
func Gemma(dense bool) ([]byte, error) {
	sp := Spec{Arch: "gemma-embedding", Embd: Embd, Layers: 3, Heads: Heads, KVHeads: 2, HeadDim: 16, FF: FF,
		Context: Context, Window: 16}
	if dense {
		sp.Dense = 64
	}
	return Build(sp)
}

// Reranker is the reranker fixture the goldens were made from: Fixture's
// bert with a classification head.
func Reranker() ([]byte, error) {
	return Build(Spec{Arch: "bert", Embd: Embd, Layers: Layers, Heads: Heads, FF: FF, Context: Context, Reranker: true})
}

// Jina is the jina-bert-v2 fixture the goldens were made from: as
// jina-embeddings-v2-base-code is built (a gate of its own, the optional
// norms), 48 wide in six heads, so that ALiBi's slopes take both of
// ggml's branches (the first four heads' and the rest's).
func Jina() ([]byte, error) {
	return Build(Spec{Arch: "jina-bert-v2", Embd: 48, Layers: Layers, Heads: 6, FF: 64, Context: Context, Norms: true})
}

// JinaReranker is the jina-bert-v2 reranker fixture the goldens were made
// from: as jina-reranker-v1-tiny-en is built (the gate in ffn_up's first
// half, a one-row cls, no cls.output) at Fixture's shape.
func JinaReranker() ([]byte, error) {
	return Build(Spec{Arch: "jina-bert-v2", Embd: Embd, Layers: Layers, Heads: Heads, FF: FF, Context: Context, FusedGate: true, Reranker: true})
}
