package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/receipt"
)

// encoderModel is a text encoder of the BERT family (ggufengine.Encoder):
// an embedding model, which answers /v1/embeddings and Ollama's
// /api/embed, or a reranker, which answers /v1/rerank. It lends its
// tokenizer and refuses every generation, having no output head to write
// with.
type encoderModel struct {
	e     *ggufengine.Encoder
	facts gguf.Facts
	eng   encoderEngine
}

// openEncoder loads an encoder (s's name, threads and context apply; the
// rest configures language models).
func openEncoder(s modelSpec, log *slog.Logger) (localModel, error) {
	e, err := ggufengine.LoadEncoder(s.Path, ggufengine.Config{Name: s.Name, Threads: s.Threads, Context: s.Context, Log: log})
	if err != nil {
		return nil, err
	}
	return &encoderModel{e: e, facts: e.Facts(), eng: encoderEngine{name: e.Name(), weights: e.Weights()}}, nil
}

func (m *encoderModel) Name() string          { return m.e.Name() }
func (m *encoderModel) Engine() engine.Engine { return m.eng }
func (m *encoderModel) ContextLength() int    { return m.e.ContextLength() }
func (m *encoderModel) Facts() *gguf.Facts    { return &m.facts }
func (m *encoderModel) Size() int64           { return m.e.Size() }
func (m *encoderModel) Path() string          { return m.e.Path() }
func (m *encoderModel) Backend() string       { return m.e.Backend() }
func (m *encoderModel) Close() error          { return m.e.Close() }
func (m *encoderModel) Decoder() decoder      { return newTokenDecoder(m.e.Tokenizer()) }

// Prompt refuses: an encoder generates nothing.
func (m *encoderModel) Prompt(*api.Generation, int) (string, []uint32, error) {
	what := "an embedding model (a text encoder): it makes embeddings (POST /v1/embeddings, Ollama's /api/embed)"
	if m.e.Reranks() {
		what = "a reranker (a text encoder): it scores documents against a query (POST /v1/rerank)"
	}
	e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", "model %q is %s, not text", m.Name(), what)
	e.Param = "model"
	return "", nil, e
}

// EmbeddingSupport implements embedder: a reranker makes no embeddings.
func (m *encoderModel) EmbeddingSupport() error {
	if m.e.Reranks() {
		return errors.New("it is a reranker: it scores a query and a document together (POST /v1/rerank)")
	}
	return nil
}

// Reranks implements reranker.
func (m *encoderModel) Reranks() bool { return m.e.Reranks() }

// RerankTemplate implements reranker.
func (m *encoderModel) RerankTemplate() string { return m.e.RerankTemplate() }

// Rank implements reranker.
func (m *encoderModel) Rank(ctx context.Context, inputs [][]uint32) ([]float32, error) {
	return m.e.Rank(ctx, inputs)
}

// Dimensions implements embedder.
func (m *encoderModel) Dimensions() int { return m.e.Dimensions() }

// Tokenizer implements embedder and tokenizing.
func (m *encoderModel) Tokenizer() *tokenizer.Tokenizer { return m.e.Tokenizer() }

// Template implements tokenizing: an encoder has no chat template.
func (m *encoderModel) Template() *chat.Template { return nil }

// Embed implements embedder.
func (m *encoderModel) Embed(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return m.e.Embed(ctx, inputs)
}

// Pooled implements embedder.
func (m *encoderModel) Pooled(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return m.e.Pooled(ctx, inputs)
}

// encoderEngine is an encoder's steward engine: it names the weights (for
// /v1/models' digest) and refuses every serve, which the node refuses
// before it reaches the steward (encoderModel.Prompt).
type encoderEngine struct {
	name    string
	weights receipt.Weights
}

func (e encoderEngine) Recipe() string                   { return e.name }
func (e encoderEngine) Fidelity() receipt.Fidelity       { return receipt.F0 }
func (e encoderEngine) UJPerToken() uint64               { return 1 }
func (e encoderEngine) UJPerOptionScored() uint64        { return 0 }
func (e encoderEngine) Deterministic() bool              { return true }
func (e encoderEngine) Weights() (receipt.Weights, bool) { return e.weights, true }

func (e encoderEngine) Serve(context.Context, receipt.ServeRequest, []uint32, func(uint32) error) (engine.Outcome, error) {
	return engine.Outcome{}, fmt.Errorf("%w: %s is an embedding model: it generates nothing", engine.ErrRefused, e.name)
}

// EncoderCapabilities implements api.EncoderModel for the model served.
func (s *servedModel) EncoderCapabilities() ([]string, bool) {
	m, ok := s.in.m.(*encoderModel)
	switch {
	case !ok:
		return nil, false
	case m.e.Reranks():
		return []string{}, true
	}
	return []string{"embedding"}, true
}
