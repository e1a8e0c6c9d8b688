package encoder

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/gguf"
)

// ErrInvalid is wrapped by every reason a file is not an encoder Load can
// run: a missing key or tensor, a shape that does not fit.
var ErrInvalid = errors.New("encoder: invalid model")

// Supports reports whether arch is an architecture this package runs.
func Supports(arch string) bool {
	switch arch {
	case "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2":
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
	NormEps                    float32
	RoPEBase                   float32 // nomic-bert's rotary embedding; 0 where the model has none
	RoPEDims                   int
	HeadDim                    int
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
	// FusedGate: jina-bert-v2's gate as up's first half, ggml_geglu's
	// split (both the file says, not the arch).
	Positions, FusedQKV, FusedGate bool
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
		return Config{}, fmt.Errorf("%w: architecture %q is not an encoder (bert, nomic-bert, nomic-bert-moe, jina-bert-v2)", ErrInvalid, arch)
	}
	c := Config{Arch: arch}
	switch arch {
	case "bert":
		c.Positions = true
	case "nomic-bert":
		c.FFN = SwiGLU
	case "jina-bert-v2":
		c.ALiBi, c.FFN = 8, GEGLU // GELU where the file has no gate (Load)
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
	if kv, ok := md.Uint32(arch + ".attention.head_count_kv"); ok && int(kv) != c.Heads {
		return Config{}, fmt.Errorf("%w: %d key heads for %d query heads: an encoder's attention here is not grouped", ErrInvalid, kv, c.Heads)
	}
	if c.Embd%c.Heads != 0 {
		return Config{}, fmt.Errorf("%w: %d heads do not divide a width of %d", ErrInvalid, c.Heads, c.Embd)
	}
	c.HeadDim = c.Embd / c.Heads
	eps, ok := md.Float32(arch + ".attention.layer_norm_epsilon")
	if !ok || !(eps > 0) || eps > 1 {
		return Config{}, fmt.Errorf("%w: %s.attention.layer_norm_epsilon is missing or not in (0, 1]", ErrInvalid, arch)
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
	if arch == "nomic-bert" || arch == "nomic-bert-moe" {
		c.RoPEBase = 10000
		if b, ok := md.Float32(arch + ".rope.freq_base"); ok {
			if !(b > 1) || b > 1e9 {
				return Config{}, fmt.Errorf("%w: %s.rope.freq_base is %v", ErrInvalid, arch, b)
			}
			c.RoPEBase = b
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
