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
func Supports(arch string) bool { return arch == "bert" || arch == "nomic-bert" }

// Config is an encoder's geometry, from the file's metadata.
type Config struct {
	Arch                       string
	Embd, Layers, Heads, FF    int
	Context, Vocab, TokenTypes int
	NormEps                    float32
	RoPEBase                   float32 // nomic-bert's rotary embedding; 0 for bert's learned positions
	RoPEDims                   int
	HeadDim                    int
	// Classes is how many scores a reranker's classification head makes
	// (llama.cpp's n_cls_out); 0 where the file has no head.
	Classes int
	// Positions: bert's learned position embeddings (nomic-bert rotates
	// instead); GatedFFN: nomic-bert's SwiGLU in place of bert's GELU;
	// FusedQKV: one attn_qkv matrix (the file says, not the arch).
	Positions, GatedFFN, FusedQKV bool
}

// maxDim bounds every dimension a file may declare, far past any
// encoder's (bge-large: 1024 wide, 4096 feed-forward, 24 layers), so
// that a hostile header cannot make Load allocate from it.
const maxDim = 1 << 20

// ParseConfig reads an encoder's configuration.
func ParseConfig(md *gguf.Metadata) (Config, error) {
	arch, _ := md.String("general.architecture")
	if !Supports(arch) {
		return Config{}, fmt.Errorf("%w: architecture %q is not an encoder (bert, nomic-bert)", ErrInvalid, arch)
	}
	c := Config{Arch: arch, Positions: arch == "bert", GatedFFN: arch == "nomic-bert"}
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
	if !c.Positions {
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
