package gguf

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/gguf/quant"
)

// Facts is what a model file says about the model, as gossip carries it
// (every field of meshllm.node.v1 CompactModelMetadata). Counts the file
// does not give are 0, strings "".
type Facts struct {
	ModelKey          string // the file's base name without .gguf
	Name              string // general.name
	Architecture      string // general.architecture, e.g. "llama", "qwen2"
	ContextLength     uint32
	VocabSize         uint32
	EmbeddingSize     uint32
	HeadCount         uint32 // the largest, where heads vary by layer
	KVHeadCount       uint32 // defaults to HeadCount, as llama.cpp's does
	LayerCount        uint32
	FeedForwardLength uint32 // the largest, where it varies by layer
	KeyLength         uint32 // per head; defaults to EmbeddingSize/HeadCount
	ValueLength       uint32 // per head; defaults to EmbeddingSize/HeadCount
	TokenizerModel    string // tokenizer.ggml.model, e.g. "llama", "gpt2"
	SpecialTokens     []SpecialToken
	RopeScale         float32 // rope.scaling.factor (or rope.scale_linear); 0 if unscaled
	RopeFreqBase      float32 // rope.freq_base; llama.cpp's default 10000 if absent
	IsMoE             bool
	ExpertCount       uint32
	UsedExpertCount   uint32
	QuantizationType  string // llama.cpp's name, e.g. "Q4_K_M", "Q8_0", "F16"
	ParameterCount    uint64 // elements over all tensors
	ParameterSize     string // ParameterCount for people: "14M", "1.1B"
}

// SpecialToken is one tokenizer.ggml.<name>_token_id entry.
type SpecialToken struct {
	Name string // the key's <name>: "bos", "eos", "unknown", "padding", ...
	ID   uint32
}

// fileTypeNames maps general.file_type (llama_ftype) to the names
// llama-quantize takes and model files are published under.
var fileTypeNames = map[uint32]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
	37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}

// Facts summarises the model in f.
func (f *File) Facts() Facts {
	md := f.Metadata
	arch, _ := md.String("general.architecture")
	key := func(k string) string { return arch + "." + k }
	fc := Facts{ModelKey: ModelKey(f.path), Architecture: arch}
	fc.Name, _ = md.String("general.name")
	fc.ContextLength = maxUint32(md, key("context_length"))
	fc.EmbeddingSize = maxUint32(md, key("embedding_length"))
	fc.LayerCount = maxUint32(md, key("block_count"))
	fc.FeedForwardLength = maxUint32(md, key("feed_forward_length"))
	fc.HeadCount = maxUint32(md, key("attention.head_count"))
	fc.KVHeadCount = maxUint32(md, key("attention.head_count_kv"))
	if fc.KVHeadCount == 0 {
		fc.KVHeadCount = fc.HeadCount
	}
	fc.KeyLength = maxUint32(md, key("attention.key_length"))
	fc.ValueLength = maxUint32(md, key("attention.value_length"))
	if fc.HeadCount > 0 {
		if fc.KeyLength == 0 {
			fc.KeyLength = fc.EmbeddingSize / fc.HeadCount
		}
		if fc.ValueLength == 0 {
			fc.ValueLength = fc.EmbeddingSize / fc.HeadCount
		}
	}
	fc.ExpertCount = maxUint32(md, key("expert_count"))
	fc.UsedExpertCount = maxUint32(md, key("expert_used_count"))
	fc.IsMoE = fc.ExpertCount > 1

	if s, ok := md.Float32(key("rope.scaling.factor")); ok {
		fc.RopeScale = s
	} else if s, ok := md.Float32(key("rope.scale_linear")); ok {
		fc.RopeScale = s
	}
	fc.RopeFreqBase = 10000
	if b, ok := md.Float32(key("rope.freq_base")); ok {
		fc.RopeFreqBase = b
	}

	fc.TokenizerModel, _ = md.String("tokenizer.ggml.model")
	if n, ok := md.ArrayLen("tokenizer.ggml.tokens"); ok {
		fc.VocabSize = uint32(min(n, math.MaxUint32))
	} else if v := maxUint32(md, key("vocab_size")); v > 0 {
		fc.VocabSize = v
	} else if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Dims) == 2 {
		fc.VocabSize = uint32(min(t.Dims[1], math.MaxUint32))
	}
	for k, v := range md.All() {
		name, ok := strings.CutPrefix(k, "tokenizer.ggml.")
		if !ok {
			continue
		}
		if name, ok = strings.CutSuffix(name, "_token_id"); !ok {
			continue
		}
		if id, ok := v.AsUint64(); ok && id <= math.MaxUint32 {
			fc.SpecialTokens = append(fc.SpecialTokens, SpecialToken{name, uint32(id)})
		}
	}
	slices.SortFunc(fc.SpecialTokens, func(a, b SpecialToken) int { return strings.Compare(a.Name, b.Name) })

	for _, t := range f.Tensors {
		fc.ParameterCount += uint64(t.Elements())
	}
	fc.ParameterSize = FormatParameterCount(fc.ParameterCount)
	fc.QuantizationType = f.quantizationType()
	return fc
}

// quantizationType names general.file_type as llama.cpp does, or failing
// that the type holding the most bytes of the matrices.
func (f *File) quantizationType() string {
	if ft, ok := f.Metadata.Uint32("general.file_type"); ok {
		if name, ok := fileTypeNames[ft]; ok {
			return name
		}
	}
	bytes := map[quant.Type]uint64{}
	for _, t := range f.Tensors {
		if len(t.Dims) >= 2 {
			bytes[t.Type] += t.Size
		}
	}
	best, bestBytes := "", uint64(0)
	for typ, n := range bytes {
		if name := typ.String(); n > bestBytes || (n == bestBytes && name < best) {
			best, bestBytes = name, n
		}
	}
	return best
}

// maxUint32 reads an integer key that may also be a per-layer array, and
// returns the largest value (0 if absent or not integers).
func maxUint32(md *Metadata, key string) uint32 {
	if v, ok := md.Uint32(key); ok {
		return v
	}
	if a, ok := md.Uint32s(key); ok && len(a) > 0 {
		return slices.Max(a)
	}
	return 0
}

// FormatParameterCount writes a parameter count the way model cards do:
// two significant figures below ten units ("1.1B"), whole units above
// ("14M", "70B").
func FormatParameterCount(n uint64) string {
	units := []struct {
		scale  float64
		suffix string
	}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}}
	for i, u := range units {
		v := float64(n) / u.scale
		if v < 1 && i < len(units)-1 {
			continue
		}
		if v < 1 {
			return strconv.FormatUint(n, 10)
		}
		s := strconv.FormatFloat(v, 'f', 0, 64)
		if v < 9.95 {
			s = strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0")
		}
		if s == "1000" && i > 0 { // rounded up into the next unit
			return "1" + units[i-1].suffix
		}
		return s + u.suffix
	}
	return fmt.Sprint(n)
}
