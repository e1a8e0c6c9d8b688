package ggufengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/encoder"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/receipt"
)

// IsEncoder reports whether the GGUF file at path holds a text encoder
// (the BERT family: encoder.Supports), which LoadEncoder loads, rather
// than a language model, which Load does.
func IsEncoder(path string) (bool, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	arch, _ := f.Metadata.String("general.architecture")
	return encoder.Supports(arch), nil
}

// Encoder is a text encoder loaded from a GGUF file: an embedding model
// (MiniLM, bge, bge-m3, nomic-embed-text), which Embeds, or, where its
// pooling is rank, a cross-encoder reranker, which Ranks. It generates
// nothing: it has no output head. It runs on the CPU, whatever
// Config.Backend says: its attention needs a backend that attends without
// a cache (backend.FullAttender), and an encoder is small.
type Encoder struct {
	name, path string
	file       *gguf.File
	facts      gguf.Facts
	tok        *tokenizer.Tokenizer
	enc        *encoder.Model
	be         *cpu.Backend
	pooling    Pooling
	ctx        int
	weights    receipt.Weights
	// rerankTemplate is the file's prompt for a query and a document
	// (tokenizer.chat_template.rerank), "" where it has none.
	rerankTemplate string
}

// rerankTemplateKey names the prompt a reranker joins its query and
// document with, as llama.cpp reads it ({query} and {document} replaced).
const rerankTemplateKey = "tokenizer.chat_template.rerank"

// LoadEncoder loads the encoder at path (cfg's Name, Threads and Context
// apply; the rest is for language models).
func LoadEncoder(path string, cfg Config) (*Encoder, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	e := &Encoder{path: path, file: f, facts: f.Facts(), name: cfg.Name}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	if e.name == "" {
		e.name = gguf.ModelKey(path)
	}
	if e.tok, err = tokenizer.FromGGUF(f.Metadata); err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
	}
	e.pooling, err = embeddingPooling(f.Metadata)
	if errors.Is(err, errRankPooling) {
		e.pooling, err = PoolingRank, nil // a reranker: Rank, not Embed
	}
	if err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
	}
	e.rerankTemplate, _ = f.Metadata.String(rerankTemplateKey)
	e.be = cpu.New(cpu.Options{Threads: cfg.Threads})
	if e.enc, err = encoder.Load(f, e.be); err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
	}
	c := e.enc.Config()
	if e.pooling == PoolingRank && c.Classes == 0 {
		return nil, fmt.Errorf("ggufengine: %s: %w: its pooling type is rank, but it has no classification head (cls, cls.output) to score with", path, ErrNoEmbeddings)
	}
	if e.tok.NumTokens() > c.Vocab {
		return nil, fmt.Errorf("ggufengine: %s: the tokenizer has %d tokens, the model %d", path, e.tok.NumTokens(), c.Vocab)
	}
	e.ctx = c.Context
	if cfg.Context > 0 {
		e.ctx = min(cfg.Context, c.Context)
	}
	sum, err := digest.Files(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("ggufengine: %w", err)
	}
	e.weights = receipt.Weights{Digest: receipt.ContentID(sum.Digest), Precision: Precision(e.facts.QuantizationType)}
	log.Info("model loaded", "model", e.name, "arch", c.Arch, "kind", "encoder (embeddings only)", "type", e.facts.QuantizationType,
		"params", e.facts.ParameterSize, "context", e.ctx, "pooling", e.pooling, "dimensions", c.Embd, "backend", "cpu",
		"threads", e.be.Threads(), "digest", e.weights.Digest.String())
	ok = true
	return e, nil
}

// Name is the model's name.
func (e *Encoder) Name() string { return e.name }

// Path is the file it was loaded from.
func (e *Encoder) Path() string { return e.path }

// Size is the file's size in bytes.
func (e *Encoder) Size() int64 { return e.file.Size() }

// Facts describes the file.
func (e *Encoder) Facts() gguf.Facts { return e.facts }

// Tokenizer is the model's tokenizer.
func (e *Encoder) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// ContextLength is the most tokens an input may have.
func (e *Encoder) ContextLength() int { return e.ctx }

// Backend names the kernels it runs on.
func (e *Encoder) Backend() string { return e.be.Name() }

// Weights names the weights (their digest and precision).
func (e *Encoder) Weights() receipt.Weights { return e.weights }

// Pooling is how its embeddings pool.
func (e *Encoder) Pooling() Pooling { return e.pooling }

// Dimensions is the length of its embeddings.
func (e *Encoder) Dimensions() int { return e.enc.Config().Embd }

// Reranks reports whether the model is a reranker (its pooling is rank):
// it scores (Rank) and makes no embeddings.
func (e *Encoder) Reranks() bool { return e.pooling == PoolingRank }

// RerankTemplate is the file's prompt for a query and a document, with
// {query} and {document} to replace, or "" where it has none.
func (e *Encoder) RerankTemplate() string { return e.rerankTemplate }

// Rank returns each input's relevance score (an input being a query and
// a document joined as llama-server joins them), as llama.cpp's rank
// pooling makes it: the first value of the classification head's output
// on the first token's hidden state, raw. Inputs are checked as Embed's
// are.
func (e *Encoder) Rank(ctx context.Context, inputs [][]uint32) ([]float32, error) {
	if !e.Reranks() {
		return nil, refuse("model %s is not a reranker (its pooling is %s)", e.name, e.pooling)
	}
	if err := e.check(inputs); err != nil {
		return nil, err
	}
	out := make([]float32, 0, len(inputs))
	for _, in := range inputs {
		s, err := e.enc.Scores(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("ggufengine: reranking: %w", err)
		}
		out = append(out, s[0])
	}
	return out, nil
}

// check refuses inputs the encoder cannot take: empty, past the context,
// or holding a token past the vocabulary.
func (e *Encoder) check(inputs [][]uint32) error {
	for i, in := range inputs {
		switch {
		case len(in) == 0:
			return refuse("input %d is empty", i)
		case len(in) > e.ctx:
			return refuse("input %d has %d tokens, more than the model's context of %d", i, len(in), e.ctx)
		}
		for _, id := range in {
			if int(id) >= e.tok.NumTokens() {
				return refuse("input %d: token %d is outside the vocabulary of %d", i, id, e.tok.NumTokens())
			}
		}
	}
	return nil
}

// Embed returns each input's embedding: its tokens' final hidden states
// pooled as the file says and scaled to unit L2 norm, as llama.cpp's
// server returns them. An input must be 1 to ContextLength tokens of the
// vocabulary; anything else is refused with engine.ErrRefused.
func (e *Encoder) Embed(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return e.embed(ctx, inputs, true)
}

// Pooled is Embed without the scaling: the pooled hidden states as they
// are (what Ollama's older /api/embeddings returns).
func (e *Encoder) Pooled(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return e.embed(ctx, inputs, false)
}

func (e *Encoder) embed(ctx context.Context, inputs [][]uint32, unit bool) ([][]float32, error) {
	if e.Reranks() {
		return nil, refuse("model %s is a reranker: it scores a query and a document together (POST /v1/rerank) and makes no embeddings", e.name)
	}
	if err := e.check(inputs); err != nil {
		return nil, err
	}
	out := make([][]float32, 0, len(inputs))
	for _, in := range inputs {
		hidden, err := e.enc.Hidden(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("ggufengine: embedding: %w", err)
		}
		if !e.enc.Projects() {
			out = append(out, poolHidden(hidden, e.Dimensions(), e.pooling, unit))
			continue
		}
		// EmbeddingGemma's dense projections come between the pooling
		// and the scaling, as llama.cpp applies them to the pooled vector.
		v := e.enc.Project(poolHidden(hidden, e.Dimensions(), e.pooling, false))
		if unit {
			UnitLength(v)
		}
		out = append(out, v)
	}
	return out, nil
}

// Close releases the backend and the file.
func (e *Encoder) Close() error {
	if e.be != nil {
		e.be.Close()
	}
	return e.file.Close()
}
