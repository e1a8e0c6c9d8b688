package modeltest

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/quant"
)

// RerankTemplate is the Qwen3-style reranker fixture's prompt for a pair,
// Qwen3-Reranker's in shape (its control-token texts are plain text in a
// vocabulary without them).
const RerankTemplate = "<|im_start|>user\nQuery: {query}\nDocument: {document}<|im_end|>\n<|im_start|>assistant\n"

// Reranker is a one-layer qwen3 fixture (random F16 weights, vocab's
// tokenizer cut to 2048 tokens) made a reranker as llama.cpp converts
// Qwen3-Reranker: pooling rank, a two-label head ("yes", "no") in
// cls.output.weight, a rerank template (tokenizer.chat_template.rerank).
// node/engine/ggufengine's testdata/llama-rerank-qwen3.json holds
// llama.cpp's scores of it, with the built-in model's vocabulary.
func Reranker(vocab *gguf.Metadata) ([]byte, error) {
	spec, w, err := oneLayerQwen3(vocab, map[string]any{"qwen3.pooling_type": uint32(4), "qwen3.classifier.output_labels": []string{"yes", "no"},
		"tokenizer.chat_template.rerank": RerankTemplate})
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(7, 8))
	head := make([]byte, 2*2*spec.Embd)
	for i := range 2 * spec.Embd {
		binary.LittleEndian.PutUint16(head[2*i:], quant.FP32ToFP16(float32(rng.NormFloat64()*0.2)))
	}
	if err := w.AddTensor("cls.output.weight", quant.F16, []int64{int64(spec.Embd), 2}, head); err != nil {
		return nil, err
	}
	return w.Bytes()
}

// Embedder is a one-layer qwen3 fixture (random F16 weights, vocab's
// tokenizer) made an embedding model as llama.cpp converts
// Qwen3-Embedding: pooling last (the final token's normed state), and EOS
// appended to every input (tokenizer.ggml.add_eos_token), as its
// tokenizer's post-processor appends <|endoftext|>.
// node/engine/ggufengine's testdata/llama-embedding-qwen3.json holds
// llama.cpp's embeddings of it, with the built-in model's vocabulary.
func Embedder(vocab *gguf.Metadata) ([]byte, error) {
	_, w, err := oneLayerQwen3(vocab, map[string]any{"qwen3.pooling_type": uint32(3), "tokenizer.ggml.add_eos_token": true})
	if err != nil {
		return nil, err
	}
	return w.Bytes()
}

// oneLayerQwen3 is the one-layer F16 qwen3 fixture with vocab's tokenizer,
// its keys changed by set, for a caller to add tensors to.
func oneLayerQwen3(vocab *gguf.Metadata, set map[string]any) (Spec, *gguf.Writer, error) {
	spec := Fixture("qwen3", "F16")
	spec.Layers = 1
	b, err := Generate(spec, vocab)
	if err != nil {
		return spec, nil, err
	}
	base, err := gguf.Parse(b)
	if err != nil {
		return spec, nil, err
	}
	w, err := gguf.Rewrite(base, set)
	return spec, w, err
}
