package encoder

import (
	"errors"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf"
)

// ErrInvalid is wrapped by every reason a file is not an encoder Load can
// run: a missing key or tensor, a shape that does not fit.
var ErrInvalid = errors.New("encoder: invalid model")

// Supports reports whether arch is an architecture this package runs.
func Supports(arch string) bool {
	switch arch {
	case "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert", "gemma-embedding":
		return true
	}
	return false
}

// FFN is an encoder's feed-forward activation.
type FFN int

const (
	// GELU: down(gelu(up·x)), bert's.
	GELU FFN = iota
	// SwiGLU: down(silu(gate·x) ⊙ up·x), nomic-bert's.
	SwiGLU
	// GEGLU: down(gelu(gate·x) ⊙ up·x), jina-bert-v2's, its gate a matrix
	// of its own or the first half of up's rows (Config.FusedGate).
	GEGLU
)

// Config is an encoder's geometry, from the file's metadata.
type Config struct {
	Arch                       string
	Embd, Layers, Heads, FF    int
	Context, Vocab, TokenTypes int
	NormEps                    float32 // the layer norms' (gemma-embedding: the RMS norms')
	RoPEBase                   float32 // nomic-bert's rotary embedding; 0 where the model has none
	RoPEDims                   int
	// HeadDim is a head's width (Embd/Heads, or attention.key_length);
	// KVHeads the key and value heads (gemma-embedding groups its queries).
	HeadDim, KVHeads int
	// ALiBi is jina-bert-v2's maximum ALiBi bias (8, as llama.cpp fixes
	// it), its only position signal; 0 for the others.
	ALiBi float32
	// nomic-bert-moe's mixture of experts: every MoEEvery-th layer (those
	// whose index is 1 modulo it; 0: none) routes each token to
	// ExpertsUsed of Experts GELU experts, a softmax over all of them
	// weighting the chosen (not renormalised), as llama.cpp's
	// build_moe_ffn does for it.
	Experts, ExpertsUsed, MoEEvery int
	// Classes is how many scores a reranker's classification head makes
	// (llama.cpp's n_cls_out); 0 where the file has no head.
	Classes int
	FFN     FFN
	// Positions: bert's learned position embeddings (nomic-bert rotates,
	// jina-bert-v2 biases its attention); FusedQKV: one attn_qkv matrix;
	// FusedGate: the gate as up's first half, ggml_geglu's split
	// (jina-bert-v2's where the file has it so; always modern-bert's).
	Positions, FusedQKV, FusedGate bool
	// PreNorm: modern-bert's layers, which norm their input before
	// attention and before the feed-forward (the first layer's attention
	// norm optional), with a norm of the output after the last, where the
	// others norm each sum after it.
	PreNorm bool
	// Window is modern-bert's local attention: its sliding-window layers
	// see the keys within Window/2 of each token, and rotate by
	// RoPEBaseSWA; every WindowEvery-th layer from the first attends
	// globally. 0: every layer is global.
	Window, WindowEvery int
	RoPEBaseSWA         float32
	// DenseFirst: the global layer comes first in each WindowEvery
	// (modern-bert's); else last (gemma-embedding's: five local layers,
	// then a global one).
	DenseFirst bool
	// Sandwich: gemma-embedding's layers, RMS-normed before and after
	// attention and before and after the feed-forward, each sum's input
	// the residual, with an RMS norm of the output after the last; its
	// embeddings are scaled by √Embd (EmbedScale), and its pooled vector
	// may go through two dense projections (Dense2Out wide, then back to
	// Embd from Dense3In), as sentence-transformers' modules do.
	Sandwich            bool
	EmbedScale          float32
	Dense2Out, Dense3In int
}

// maxDim bounds every dimension a file may declare, far past any
// encoder's (bge-large: 1024 wide, 4096 feed-forward, 24 layers), so
// that a hostile header cannot make Load allocate from it.
const maxDim = 1 << 20

// maxExperts bounds a mixture's experts (nomic-embed-text-v2-moe has 8),
// as llama.cpp's LLAMA_MAX_EXPERTS does.
const maxExperts = 1024

// ParseConfig reads an encoder's configuration.
func ParseConfig(md *gguf.Metadata) (Config, error) {
	arch, _ := md.String("general.architecture")
	if !Supports(arch) {
		return Config{}, fmt.Errorf("%w: architecture %q is not an encoder (bert, nomic-bert, nomic-bert-moe, jina-bert-v2, jina-bert-v3, modern-bert, gemma-embedding)", ErrInvalid, arch)
	}
	c := Config{Arch: arch}
	switch arch {
	case "bert":
		c.Positions = true
	case "nomic-bert":
		c.FFN = SwiGLU
	case "jina-bert-v2":
		c.ALiBi, c.FFN = 8, GEGLU // GELU where the file has no gate (Load)
	case "gemma-embedding":
		c.Sandwich, c.FFN = true, GEGLU
	case "modern-bert":
		c.PreNorm, c.FusedQKV, c.FusedGate, c.DenseFirst = true, true, true, true
		var err error
		if c.FFN, err = modernFFN(md); err != nil {
			return Config{}, err
		}
	}
	get := func(key string, dst *int, required bool) error {
		v, ok := md.Uint32(arch + "." + key)
		if !ok {
			if required {
				return fmt.Errorf("%w: %s.%s is missing", ErrInvalid, arch, key)
			}
			return nil
		}
		if v == 0 || v > maxDim {
			return fmt.Errorf("%w: %s.%s is %d", ErrInvalid, arch, key, v)
		}
		*dst = int(v)
		return nil
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"embedding_length", &c.Embd}, {"block_count", &c.Layers}, {"attention.head_count", &c.Heads},
		{"feed_forward_length", &c.FF}, {"context_length", &c.Context},
	} {
		if err := get(k.key, k.dst, true); err != nil {
			return Config{}, err
		}
	}
	c.KVHeads = c.Heads
	if kv, ok := md.Uint32(arch + ".attention.head_count_kv"); ok && int(kv) != c.Heads {
		if !c.Sandwich || kv == 0 || c.Heads%int(kv) != 0 {
			return Config{}, fmt.Errorf("%w: %d key heads for %d query heads: an encoder's attention here is not grouped", ErrInvalid, kv, c.Heads)
		}
		c.KVHeads = int(kv)
	}
	if c.Sandwich {
		// gemma's heads are their own width (256 in EmbeddingGemma).
		c.HeadDim = c.Embd / c.Heads
		if err := get("attention.key_length", &c.HeadDim, false); err != nil {
			return Config{}, err
		}
		if v, ok := md.Uint32(arch + ".attention.value_length"); ok && int(v) != c.HeadDim {
			return Config{}, fmt.Errorf("%w: values %d wide for keys %d wide", ErrInvalid, v, c.HeadDim)
		}
		if c.HeadDim%2 != 0 {
			return Config{}, fmt.Errorf("%w: heads %d wide: a rotation takes pairs", ErrInvalid, c.HeadDim)
		}
		c.EmbedScale = float32(math.Sqrt(float64(c.Embd))) // llama.cpp's sqrtf(n_embd)
	} else {
		if c.Embd%c.Heads != 0 {
			return Config{}, fmt.Errorf("%w: %d heads do not divide a width of %d", ErrInvalid, c.Heads, c.Embd)
		}
		c.HeadDim = c.Embd / c.Heads
	}
	epsKey := arch + ".attention.layer_norm_epsilon"
	if c.Sandwich {
		epsKey = arch + ".attention.layer_norm_rms_epsilon"
	}
	eps, ok := md.Float32(epsKey)
	if !ok || !(eps > 0) || eps > 1 {
		return Config{}, fmt.Errorf("%w: %s is missing or not in (0, 1]", ErrInvalid, epsKey)
	}
	c.NormEps = eps
	if causal, ok := md.Bool(arch + ".attention.causal"); ok && causal {
		return Config{}, fmt.Errorf("%w: %s.attention.causal is true: an encoder attends both ways", ErrInvalid, arch)
	}
	if n, ok := md.Uint32("tokenizer.ggml.token_type_count"); ok {
		if n > 16 {
			return Config{}, fmt.Errorf("%w: %d token types", ErrInvalid, n)
		}
		c.TokenTypes = int(n)
	}
	if arch == "nomic-bert-moe" {
		if err := get("moe_every_n_layers", &c.MoEEvery, false); err != nil {
			return Config{}, err
		}
		if c.MoEEvery > 0 {
			if err := get("expert_count", &c.Experts, true); err != nil {
				return Config{}, err
			}
			if err := get("expert_used_count", &c.ExpertsUsed, true); err != nil {
				return Config{}, err
			}
			if c.Experts > maxExperts || c.ExpertsUsed > c.Experts {
				return Config{}, fmt.Errorf("%w: %d of %d experts used (at most %d experts)", ErrInvalid, c.ExpertsUsed, c.Experts, maxExperts)
			}
		}
	}
	ropeBase := func(key string) (float32, error) {
		b, ok := md.Float32(arch + "." + key)
		if !ok {
			return 10000, nil
		}
		if !(b > 1) || b > 1e9 {
			return 0, fmt.Errorf("%w: %s.%s is %v", ErrInvalid, arch, key, b)
		}
		return b, nil
	}
	if arch == "modern-bert" || arch == "gemma-embedding" {
		v, ok := md.Uint32(arch + ".attention.sliding_window") // 0: none, as llama.cpp reads it
		switch {
		case !ok && c.Sandwich:
			return Config{}, fmt.Errorf("%w: %s.attention.sliding_window is missing", ErrInvalid, arch)
		case v > maxDim:
			return Config{}, fmt.Errorf("%w: %s.attention.sliding_window is %d", ErrInvalid, arch, v)
		}
		c.Window = int(v)
		if c.Window > 0 {
			if n, ok := md.ArrayLen(arch + ".attention.sliding_window_pattern"); ok {
				return Config{}, fmt.Errorf("%w: %s.attention.sliding_window_pattern is an array of %d; a period is what %s takes", ErrInvalid, arch, n, arch)
			}
			// llama.cpp's defaults: modern-bert a global layer then two
			// local; gemma-embedding five local then a global.
			c.WindowEvery = 3
			if c.Sandwich {
				c.WindowEvery = 6
			}
			if v, ok := md.Uint32(arch + ".attention.sliding_window_pattern"); ok {
				if v > maxDim {
					return Config{}, fmt.Errorf("%w: %s.attention.sliding_window_pattern is %d", ErrInvalid, arch, v)
				}
				c.WindowEvery = int(v)
			}
			var err error
			if c.RoPEBaseSWA, err = ropeBase("rope.freq_base_swa"); err != nil {
				return Config{}, err
			}
		}
	}
	if c.Sandwich {
		for _, k := range []struct {
			key string
			dst *int
		}{{"dense_2_feat_out", &c.Dense2Out}, {"dense_3_feat_in", &c.Dense3In}} {
			if err := get(k.key, k.dst, false); err != nil {
				return Config{}, err
			}
		}
		for _, k := range []string{"dense_2_feat_in", "dense_3_feat_out"} {
			if v, ok := md.Uint32(arch + "." + k); ok && int(v) != c.Embd {
				return Config{}, fmt.Errorf("%w: %s.%s is %d, not the width %d", ErrInvalid, arch, k, v, c.Embd)
			}
		}
	}
	if arch == "nomic-bert" || arch == "nomic-bert-moe" || arch == "jina-bert-v3" || arch == "modern-bert" || arch == "gemma-embedding" {
		var err error
		if c.RoPEBase, err = ropeBase("rope.freq_base"); err != nil {
			return Config{}, err
		}
		c.RoPEDims = c.HeadDim
		if err := get("rope.dimension_count", &c.RoPEDims, false); err != nil {
			return Config{}, err
		}
		if c.RoPEDims > c.HeadDim || c.RoPEDims%2 != 0 {
			return Config{}, fmt.Errorf("%w: %d rotated dimensions in a head of %d", ErrInvalid, c.RoPEDims, c.HeadDim)
		}
	}
	return c, nil
}

// Local reports whether layer i attends within the sliding window, as
// llama.cpp's set_swa_pattern lays them out: one global layer in every
// WindowEvery, the first of them (DenseFirst) or the last; a period of 0
// makes every layer local.
func (c Config) Local(i int) bool {
	switch {
	case c.Window == 0:
		return false
	case c.WindowEvery == 0:
		return true
	case c.DenseFirst:
		return i%c.WindowEvery != 0
	}
	return i%c.WindowEvery < c.WindowEvery-1
}

// modernFFN is modern-bert's feed-forward from its hidden_activation, as
// llama.cpp reads it: GEGLU (ModernBERT's GELU, the default and what an
// unknown name falls back to) or SwiGLU (Granite Embedding R2's SiLU).
func modernFFN(md *gguf.Metadata) (FFN, error) {
	act, _ := md.String("modern-bert.hidden_activation")
	switch act {
	case "silu", "swish", "swiglu":
		return SwiGLU, nil
	case "relu", "reglu":
		return 0, fmt.Errorf("%w: modern-bert.hidden_activation %q (a ReGLU feed-forward) is not supported", ErrInvalid, act)
	}
	return GEGLU, nil
}
