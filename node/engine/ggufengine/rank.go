package ggufengine

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/detmath"
	"github.com/meshnode/meshnode/gguf/quant"
)

// rankHead is a decoder reranker's head (Qwen3-Reranker, as llama.cpp
// converts it): cls.output.weight, a row per label ("yes", "no": the
// language model's own rows for those words), read from the last token's
// final hidden state, the scores softmaxed; the relevance is the first
// label's probability.
type rankHead struct {
	typ          quant.Type
	w            []byte
	labels, embd int
}

// rankHeadArchs are the decoder architectures llama.cpp reranks with:
// their rank pooling reads the last token (llm_graph_input_cls).
var rankHeadArchs = map[string]bool{"qwen3": true}

// loadRankHead reads a decoder's reranking head where the file's pooling
// is rank: nil, nil where it is not; an error where it is but the head
// is missing or the architecture is not one llama.cpp reranks with.
func loadRankHead(f *gguf.File, embd int) (*rankHead, error) {
	if _, err := embeddingPooling(f.Metadata); !errors.Is(err, errRankPooling) {
		return nil, nil
	}
	arch, _ := f.Metadata.String("general.architecture")
	if !rankHeadArchs[arch] {
		return nil, fmt.Errorf("%w: a %s model whose pooling is rank: only Qwen3-style rerankers (the last token's state through cls.output) are run", ErrNoEmbeddings, arch)
	}
	labels := 1
	if n, ok := f.Metadata.ArrayLen(arch + ".classifier.output_labels"); ok && n > 0 {
		labels = n
	}
	t, w, ok, err := f.TensorShaped("cls.output.weight", embd, labels)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: its pooling is rank, but it has no cls.output.weight to score with", ErrNoEmbeddings)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrNoEmbeddings, err)
	case !t.Type.Supported():
		return nil, fmt.Errorf("%w: cls.output.weight has type %s", ErrNoEmbeddings, t.Type)
	}
	return &rankHead{typ: t.Type, w: w, labels: labels, embd: embd}, nil
}

// score is the first label's probability for a final hidden state h, as
// llama.cpp computes it: the head's product in the weight type's
// activation format, then a softmax over the labels (ggml_soft_max: the
// exponentials summed wide).
func (r *rankHead) score(h []float32) (float32, error) {
	b, err := quant.NewBatch(r.typ, r.embd, 1)
	if err != nil {
		return 0, err
	}
	if err := b.Quantize(0, h); err != nil {
		return 0, err
	}
	out := make([]float32, r.labels)
	quant.MatMul(r.typ, r.w, b, out, r.labels)
	return softmaxFirst(out), nil
}

// softmaxFirst is softmax(x)[0], the largest subtracted, the sum in
// float64, as ggml_soft_max (one row, no scale) gives it.
func softmaxFirst(x []float32) float32 {
	top := x[0]
	for _, v := range x {
		top = max(top, v)
	}
	var sum float64
	first := float32(0)
	for i, v := range x {
		e := expf32(v - top)
		if i == 0 {
			first = e
		}
		sum += float64(e)
	}
	return first * float32(1/sum)
}

// expf32 is e^x rounded to float32 (the C library's expf, which ggml's
// softmax calls for a row too short for its vector loop).
func expf32(x float32) float32 { return float32(detmath.Exp(float64(x))) }

// Reranks reports whether the model is a reranker (its pooling is rank,
// with the head to score by): it scores (Rank) and makes no embeddings.
func (m *Model) Reranks() bool { return m.rank != nil }

// RerankTemplate is the file's prompt for a query and a document, with
// {query} and {document} to replace, or "" where it has none.
func (m *Model) RerankTemplate() string { return m.rerankTemplate }

// Rank returns each input's relevance (an input being a query and a
// document joined as llama-server joins them), as llama.cpp's rank pooling
// of a Qwen3-style reranker makes it: the last token's final hidden
// state through cls.output, softmaxed, the first label's probability.
// Inputs are checked and evaluated as Embed's are (eachHidden).
func (m *Model) Rank(ctx context.Context, inputs [][]uint32) ([]float32, error) {
	if m.rank == nil {
		why := "its pooling is not rank"
		if m.rankErr != nil {
			why = m.rankErr.Error()
		}
		return nil, refuse("model %s is not a reranker: %s", m.name, why)
	}
	out := make([]float32, 0, len(inputs))
	e := m.model.Config().Embd
	err := m.eachHidden(ctx, inputs, "reranking", func(hidden []float32) error {
		score, err := m.rank.score(hidden[len(hidden)-e:])
		out = append(out, score)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
