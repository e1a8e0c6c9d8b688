package node

import (
	"context"
	"errors"
	"strings"

	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
)

// reranker is a local model that scores a query and a document read
// together (a cross-encoder with a classification head: an encoder whose
// pooling is rank).
type reranker interface {
	Reranks() bool
	// RerankTemplate is the file's prompt for a pair, "" for none.
	RerankTemplate() string
	Tokenizer() *tokenizer.Tokenizer
	// Rank is each input's score (ggufengine.Encoder.Rank).
	Rank(ctx context.Context, inputs [][]uint32) ([]float32, error)
}

// Rerank implements api.RerankModel: each document joined to the query
// as llama-server joins them (rerankPair), scored by the model under its
// gate and one of its slots. Like an embedding, a score is not a mesh/1
// serve and seals no receipt.
func (s *servedModel) Rerank(ctx context.Context, q *api.Rerank) (*api.RerankResult, error) {
	ctx, leave, err := s.in.gate.enter(ctx)
	if err != nil {
		return nil, s.draining(err)
	}
	defer leave()
	m := s.in.m
	rm, ok := m.(reranker)
	if !ok || !rm.Reranks() {
		return nil, embedRefusal("model", "model %q is not a reranker (a cross-encoder whose GGUF pooling type is rank, with a classification head); for similarity, embed with /v1/embeddings", m.Name())
	}
	ctxLen := m.ContextLength()
	inputs := make([][]uint32, len(q.Documents))
	total := 0
	for i, doc := range q.Documents {
		ids := rerankPair(rm.Tokenizer(), rm.RerankTemplate(), q.Query, doc, ctxLen)
		if len(ids) > ctxLen {
			return nil, embedRefusal("documents", "document %d with the query is at least %d tokens; model %q has a context of %d", i, len(ids), m.Name(), ctxLen)
		}
		inputs[i] = ids
		total += len(ids)
	}
	scores, err := rm.Rank(ctx, inputs)
	if err != nil {
		if errors.Is(err, engine.ErrRefused) {
			return nil, embedRefusal("documents", "%v", err)
		}
		return nil, err
	}
	out := make([]float64, len(scores))
	for i, v := range scores {
		out[i] = float64(v)
	}
	return &api.RerankResult{Scores: out, PromptTokens: total}, nil
}

// rerankPair is a query and a document as llama-server's
// format_prompt_rerank joins them: through the file's rerank template
// ({query} and {document} replaced, its special tokens parsed), or else
// [BOS] query [EOS] [SEP] document [EOS], each where the vocabulary adds
// it (a BERT vocabulary: [CLS] query [SEP] document), EOS standing in
// as SEP where there is none. Tokenizing stops past limit tokens (the
// caller refuses such a pair).
func rerankPair(tok *tokenizer.Tokenizer, tmpl, query, doc string, limit int) []uint32 {
	if tmpl != "" {
		text := strings.NewReplacer("{query}", query, "{document}", doc).Replace(tmpl)
		ids, _ := tok.EncodeLimit(text, tokenizer.EncodeOptions{ParseSpecial: true}, limit)
		return ids
	}
	eos := tok.EOS()
	if eos == tokenizer.NoToken {
		eos = tok.SEP()
	}
	var ids []uint32
	if tok.AddsBOS() {
		ids = append(ids, tok.BOS())
	}
	q, _ := tok.EncodeLimit(query, tokenizer.EncodeOptions{}, limit)
	ids = append(ids, q...)
	if tok.AddsEOS() && eos != tokenizer.NoToken {
		ids = append(ids, eos)
	}
	if tok.AddsSEP() && tok.SEP() != tokenizer.NoToken {
		ids = append(ids, tok.SEP())
	}
	d, _ := tok.EncodeLimit(doc, tokenizer.EncodeOptions{}, max(0, limit-len(ids)))
	ids = append(ids, d...)
	if tok.AddsEOS() && eos != tokenizer.NoToken {
		ids = append(ids, eos)
	}
	return ids
}
