package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
)

// embedder is a local model that makes embeddings (a GGUF file served
// whole).
type embedder interface {
	// EmbeddingSupport is nil, or why the model cannot embed.
	EmbeddingSupport() error
	// Dimensions is its embeddings' length.
	Dimensions() int
	Tokenizer() *tokenizer.Tokenizer
	// Embed is one unit-norm vector per input (ggufengine.Model.Embed).
	Embed(ctx context.Context, inputs [][]uint32) ([][]float32, error)
	// Pooled is Embed's vectors before their scaling to unit length.
	Pooled(ctx context.Context, inputs [][]uint32) ([][]float32, error)
}

// Embed implements api.EmbeddingModel. An embedding is not a mesh/1 serve:
// the receipt format (spec §3.1) has generations and typed decisions,
// and an embedding is neither, so it is served by the engine directly,
// under the model's gate and one of its slots, and seals no receipt
// (docs/api.md, Embeddings).
func (s *servedModel) Embed(ctx context.Context, e *api.Embedding) (*api.EmbeddingResult, error) {
	ctx, leave, err := s.in.gate.enter(ctx)
	if err != nil {
		return nil, s.draining(err)
	}
	defer leave()
	m := s.in.m
	em, ok := m.(embedder)
	if !ok {
		why := "it has no hidden states to pool"
		if n, ok := m.(interface{ noEmbeddings() string }); ok {
			why = n.noEmbeddings()
		}
		return nil, embedRefusal("model", "model %q cannot make embeddings: %s (only a GGUF model served whole on this node can)", m.Name(), why)
	}
	if err := em.EmbeddingSupport(); err != nil {
		return nil, embedRefusal("model", "model %q cannot make embeddings: %v", m.Name(), err)
	}
	// A shorter embedding is the pooled vector's first dimensions, scaled
	// afterwards, as a Matryoshka-trained model is meant to be cut (and
	// as Ollama cuts any model's).
	short := 0
	switch d := e.Dimensions; {
	case d > em.Dimensions():
		return nil, embedRefusal("dimensions", "model %q makes embeddings of %d dimensions; dimensions %d is more", m.Name(), em.Dimensions(), d)
	case d != 0 && d < em.Dimensions():
		short = d
	}
	ctxLen := m.ContextLength()
	inputs := make([][]uint32, len(e.Inputs))
	total := 0
	for i, in := range e.Inputs {
		ids := in.Tokens
		switch {
		case e.Truncate && in.IsTokens:
			ids = ids[:min(len(ids), ctxLen)]
		case e.Truncate:
			if ids, err = tokenizeTruncated(em.Tokenizer(), in.Text, ctxLen); err != nil {
				return nil, embedRefusal("input", "input %d: %v", i, err)
			}
		case !in.IsTokens:
			if ids, err = tokenizeWithin(em.Tokenizer(), in.Text, tokenizer.EncodeOptions{AddSpecial: true}, ctxLen); err != nil {
				var long *promptTooLongError
				if errors.As(err, &long) {
					return nil, embedRefusal("input", "input %d is at least %d tokens; model %q has a context of %d", i, long.AtLeast, m.Name(), ctxLen)
				}
				return nil, embedRefusal("input", "input %d: %v", i, err)
			}
		}
		if len(ids) > ctxLen {
			return nil, embedRefusal("input", "input %d is %d tokens; model %q has a context of %d", i, len(ids), m.Name(), ctxLen)
		}
		inputs[i] = ids
		total += len(ids)
	}
	embed := em.Embed
	if e.Unnormalized || short > 0 {
		embed = em.Pooled
	}
	vecs, err := embed(ctx, inputs)
	if err != nil {
		if errors.Is(err, engine.ErrRefused) {
			return nil, embedRefusal("input", "%v", err)
		}
		return nil, err
	}
	if short > 0 {
		for i, v := range vecs {
			vecs[i] = v[:short]
			if !e.Unnormalized {
				ggufengine.UnitLength(vecs[i])
			}
		}
	}
	return &api.EmbeddingResult{Vectors: vecs, PromptTokens: total}, nil
}

// tokenizeTruncated is text's ids cut to fit limit, as Ollama's truncate
// cuts an input past the context: the text's first ids kept, between the
// special tokens the vocabulary puts around it (BOS or [CLS], EOS or
// [SEP]), so that the model sees a whole input's shape. A text that fits
// is Encode's with its specials.
func tokenizeTruncated(tok *tokenizer.Tokenizer, text string, limit int) ([]uint32, error) {
	before, after := tok.Specials()
	room := limit - len(before) - len(after)
	if room < 1 {
		return nil, fmt.Errorf("a context of %d leaves no room for text between its %d special tokens", limit, len(before)+len(after))
	}
	ids, _ := tok.EncodeLimit(text, tokenizer.EncodeOptions{}, room)
	return slices.Concat(before, ids[:min(len(ids), room)], after), nil
}

// noEmbeddings says why the reference engine makes none.
func (m *referenceModel) noEmbeddings() string {
	return "the reference engine hashes its tokens and has no hidden states to pool"
}

// noEmbeddings says why a split model makes none.
func (sm *splitModel) noEmbeddings() string {
	return "it is split across nodes, and its last layers' hidden states are on another node"
}

func embedRefusal(param, format string, args ...any) error {
	e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", format, args...)
	e.Param = param
	return e
}
