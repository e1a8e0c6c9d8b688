package ggufengine

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/encoder"
)

// Pooling is how a model's per-token hidden states make one embedding
// (llama.cpp's enum llama_pooling_type).
type Pooling uint32

// The pooling types a GGUF file names in <arch>.pooling_type.
const (
	PoolingNone Pooling = 0 // a vector per token, no pooling
	PoolingMean Pooling = 1
	PoolingCLS  Pooling = 2 // the first token's
	PoolingLast Pooling = 3 // the last token's
	PoolingRank Pooling = 4 // a reranker's score, not an embedding
)

func (p Pooling) String() string {
	switch p {
	case PoolingNone:
		return "none"
	case PoolingMean:
		return "mean"
	case PoolingCLS:
		return "cls"
	case PoolingLast:
		return "last"
	case PoolingRank:
		return "rank"
	}
	return fmt.Sprintf("pooling type %d", uint32(p))
}

// ErrNoEmbeddings is wrapped by the reason a model cannot embed.
var ErrNoEmbeddings = errors.New("ggufengine: the model cannot make embeddings")

// errRankPooling: the file's pooling is rank, a reranker's score (which
// an Encoder with a classification head makes, Encoder.Rank).
var errRankPooling = fmt.Errorf("%w: its pooling type is rank (a reranker: it scores a query and a document together, POST /v1/rerank)", ErrNoEmbeddings)

// embeddingPooling reads the file's pooling type (mean when it names
// none, as llama.cpp's server pools a model without one) and refuses a
// model whose embeddings the engine cannot make as llama.cpp makes them.
func embeddingPooling(md *gguf.Metadata) (Pooling, error) {
	arch, _ := md.String("general.architecture")
	// An encoder (LoadEncoder) attends both ways, as its file says; the
	// language models' engine attends causally, so another model whose
	// file says so cannot embed here.
	if causal, ok := md.Bool(arch + ".attention.causal"); ok && !causal && !encoder.Supports(arch) {
		return 0, fmt.Errorf("%w: %s.attention.causal is false (an encoder's bidirectional attention), and the engine attends causally", ErrNoEmbeddings, arch)
	}
	v, ok := md.Uint32(arch + ".pooling_type")
	if !ok {
		if i, iok := md.Int32(arch + ".pooling_type"); iok && i >= 0 {
			v, ok = uint32(i), true
		}
	}
	if !ok {
		return PoolingMean, nil
	}
	switch p := Pooling(v); p {
	case PoolingMean, PoolingCLS, PoolingLast:
		return p, nil
	case PoolingNone:
		return 0, fmt.Errorf("%w: its pooling type is none (a vector per token), and an embedding is one vector per input", ErrNoEmbeddings)
	case PoolingRank:
		return 0, errRankPooling
	default:
		return 0, fmt.Errorf("%w: unknown %s", ErrNoEmbeddings, p)
	}
}

// Pooling is how the model pools its embeddings, or why it cannot make
// them (an error wrapping ErrNoEmbeddings).
func (m *Model) Pooling() (Pooling, error) { return m.pooling, m.poolingErr }

// Dimensions is the length of the model's embeddings: its hidden size.
func (m *Model) Dimensions() int { return m.model.Config().Embd }

// Embed returns the embedding of each input: its tokens' final hidden
// states (the output norm's, the output head's input) pooled as the file
// says, then scaled to unit L2 norm, as llama.cpp's server returns them.
// Each input is evaluated from the start of one of the engine's sessions
// (whose cached conversation it drops); inputs are checked as prompts
// are, and refused with engine.ErrRefused.
func (m *Model) Embed(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return m.embed(ctx, inputs, true)
}

// Pooled is Embed without the scaling: the pooled hidden states as they
// are (what Ollama's older /api/embeddings returns).
func (m *Model) Pooled(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return m.embed(ctx, inputs, false)
}

func (m *Model) embed(ctx context.Context, inputs [][]uint32, unit bool) ([][]float32, error) {
	if m.poolingErr != nil {
		return nil, refuse("%v", m.poolingErr)
	}
	out := make([][]float32, 0, len(inputs))
	err := m.eachHidden(ctx, inputs, "embedding", func(hidden []float32) error {
		out = append(out, poolHidden(hidden, m.Dimensions(), m.pooling, unit))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachHidden checks inputs as prompts are checked, then hands f each
// input's final hidden states in turn (what for errors: "embedding",
// "reranking"). Each input is evaluated from the start of one of the
// engine's sessions, whose cached conversation it drops; f's slice is
// reused for the next input.
func (m *Model) eachHidden(ctx context.Context, inputs [][]uint32, what string, f func(hidden []float32) error) error {
	for i, in := range inputs {
		if err := m.eng.checkPrompt(in); err != nil {
			return fmt.Errorf("input %d: %w", i, err)
		}
	}
	var hidden []float32
	for _, in := range inputs {
		s, err := m.eng.pool.acquire(ctx, nil)
		if err != nil {
			return err
		}
		s.Truncate(0)
		hidden, err = s.EvalHidden(ctx, in, hidden)
		s.Truncate(0) // its cache holds no conversation a prompt continues
		m.eng.pool.release(s)
		if err == nil {
			err = f(hidden)
		}
		if err != nil {
			return fmt.Errorf("ggufengine: %s: %w", what, err)
		}
	}
	return nil
}

// poolHidden pools rows of hidden states (e floats each), summing in
// float64, and where unit is set normalises the result to unit L2 norm.
func poolHidden(hidden []float32, e int, p Pooling, unit bool) []float32 {
	n := len(hidden) / e
	sum := make([]float64, e)
	switch p {
	case PoolingCLS:
		for j, x := range hidden[:e] {
			sum[j] = float64(x)
		}
	case PoolingLast:
		for j, x := range hidden[(n-1)*e:] {
			sum[j] = float64(x)
		}
	default: // mean
		for i := range n {
			for j, x := range hidden[i*e : (i+1)*e] {
				sum[j] += float64(x)
			}
		}
		for j := range sum {
			sum[j] /= float64(n)
		}
	}
	out := make([]float32, e)
	if !unit {
		for j, x := range sum {
			out[j] = float32(x)
		}
		return out
	}
	norm := l2(sum)
	for j, x := range sum {
		if norm > 0 {
			x /= norm
		}
		out[j] = float32(x)
	}
	return out
}

// UnitLength scales v to unit L2 norm in place (summed in float64), as
// poolHidden scales its pooled sums; a zero vector stays zero.
func UnitLength(v []float32) {
	wide := make([]float64, len(v))
	for i, x := range v {
		wide[i] = float64(x)
	}
	norm := l2(wide)
	if norm == 0 {
		return
	}
	for i, x := range wide {
		v[i] = float32(x / norm)
	}
}

// l2 is v's Euclidean length.
func l2(v []float64) float64 {
	var sq float64
	for _, x := range v {
		sq += float64(x * x) // rounded: arm64 would fuse it, and the bits must replay anywhere
	}
	return math.Sqrt(sq)
}
