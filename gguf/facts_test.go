package gguf

import (
	"reflect"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

func TestFormatParameterCount(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0", 999: "999", 1000: "1K", 13_900_000: "14M", 1_100_048_384: "1.1B",
		7_241_732_096: "7.2B", 70_553_706_496: "71B", 999_600_000: "1B", 9_960_000: "10M",
		494_032_768: "494M", 1_500_000_000_000: "1.5T",
	} {
		if got := FormatParameterCount(n); got != want {
			t.Errorf("FormatParameterCount(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFactsFromMetadata(t *testing.T) {
	w := NewWriter()
	for k, v := range map[string]any{
		"general.architecture":             "qwen3moe",
		"qwen3moe.context_length":          uint32(32768),
		"qwen3moe.embedding_length":        uint32(2048),
		"qwen3moe.block_count":             uint32(2),
		"qwen3moe.feed_forward_length":     []int32{6144, 8192}, // per layer
		"qwen3moe.attention.head_count":    []uint32{32, 32},
		"qwen3moe.attention.key_length":    uint32(128),
		"qwen3moe.expert_count":            uint32(128),
		"qwen3moe.expert_used_count":       uint32(8),
		"qwen3moe.rope.freq_base":          float32(1e6),
		"qwen3moe.rope.scaling.factor":     float32(4),
		"tokenizer.ggml.model":             "gpt2",
		"tokenizer.ggml.tokens":            []string{"a", "b", "c"},
		"tokenizer.ggml.eos_token_id":      uint32(2),
		"tokenizer.ggml.padding_token_id":  uint32(0),
		"tokenizer.ggml.bos_token_id":      int32(-1), // none: left out
		"tokenizer.ggml.add_bos_token":     false,
		"general.quantization_version":     uint32(2),
		"tokenizer.ggml.cls_token_id_note": "not a token id key",
	} {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	// No general.file_type: the type holding most matrix bytes names it.
	if err := w.AddTensor("blk.0.ffn_up.weight", quant.Q4_K, []int64{256, 4}, make([]byte, 4*144)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("blk.0.attn_q.weight", quant.Q6_K, []int64{256, 2}, make([]byte, 2*210)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("blk.0.attn_norm.weight", quant.F32, []int64{2048}, make([]byte, 4*2048)); err != nil {
		t.Fatal(err)
	}
	f := written(t, w)
	got := f.Facts()
	want := Facts{
		Architecture: "qwen3moe", ContextLength: 32768, VocabSize: 3, EmbeddingSize: 2048,
		HeadCount: 32, KVHeadCount: 32, LayerCount: 2, FeedForwardLength: 8192, KeyLength: 128, ValueLength: 64,
		TokenizerModel: "gpt2", SpecialTokens: []SpecialToken{{"eos", 2}, {"padding", 0}},
		RopeScale: 4, RopeFreqBase: 1e6, IsMoE: true, ExpertCount: 128, UsedExpertCount: 8,
		QuantizationType: "Q4_K", ParameterCount: 256*4 + 256*2 + 2048, ParameterSize: "3.6K",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Facts =\n%+v\nwant\n%+v", got, want)
	}
}
