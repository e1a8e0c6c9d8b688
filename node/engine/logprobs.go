package engine

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/gguf/sample"
)

// TokenLogprob is one output token's log-probability under the model's
// distribution at its position (sample.LogProbs: the log-softmax of the
// logits, before any penalty, truncation or temperature), with the top
// likeliest tokens there, likeliest first.
type TokenLogprob struct {
	Token   uint32
	Logprob float64
	Top     []sample.LogProb
}

// Logprobs asks a serve for its tokens' log-probabilities: Top
// alternatives each (0 … sample.MaxTopLogProbs), handed to Record once
// per emitted token, just before emit gets it, on the serve's goroutine.
// They are output presentation, not part of the request: asking for them
// changes no token, so the request identity and its receipt do not say
// whether they were asked for.
type Logprobs struct {
	Top    int
	Record func(TokenLogprob)
	// Prompt, when set, asks for the prompt's tokens' log-probabilities
	// too, each under the distribution after the tokens before it (the
	// first, which has none, left out), handed over once, before the
	// first output token, on the serve's goroutine. Only an engine that
	// is a PromptLogprobReporter honours it; the caller checks.
	Prompt func([]TokenLogprob)
}

type logprobsKey struct{}

// WithLogprobs returns ctx carrying lp for the serve it is passed to. An
// engine honours it only if it is a LogprobReporter; the caller checks.
func WithLogprobs(ctx context.Context, lp *Logprobs) context.Context {
	return context.WithValue(ctx, logprobsKey{}, lp)
}

// LogprobsFrom is the serve's Logprobs, or nil when none were asked for.
func LogprobsFrom(ctx context.Context) *Logprobs {
	lp, _ := ctx.Value(logprobsKey{}).(*Logprobs)
	return lp
}

// LogprobReporter is an engine that reports its tokens' log-probabilities
// when its serve's context asks (WithLogprobs).
type LogprobReporter interface {
	Engine
	ReportsLogprobs() bool
}

// ReportsLogprobs is whether e reports log-probabilities.
func ReportsLogprobs(e Engine) bool {
	r, ok := e.(LogprobReporter)
	return ok && r.ReportsLogprobs()
}

// PromptLogprobReporter is an engine that reports its prompts' tokens'
// log-probabilities when its serve's Logprobs asks (Logprobs.Prompt).
type PromptLogprobReporter interface {
	Engine
	ReportsPromptLogprobs() bool
}

// ReportsPromptLogprobs is whether e reports its prompts'
// log-probabilities.
func ReportsPromptLogprobs(e Engine) bool {
	r, ok := e.(PromptLogprobReporter)
	return ok && r.ReportsPromptLogprobs()
}

// LogprobQueue keeps a generation's log-probabilities between the pick of
// each token and its emission: the engines pick tokens ahead of handing
// them out (a speculative window's, those a stop string holds back), and
// hand out a prefix of what they picked, in order.
type LogprobQueue struct {
	lp      *Logprobs
	entries []TokenLogprob
	sent    int
}

// NewLogprobQueue returns a queue for lp; nil lp gives a nil queue, whose
// methods do nothing.
func NewLogprobQueue(lp *Logprobs) *LogprobQueue {
	if lp == nil {
		return nil
	}
	return &LogprobQueue{lp: lp}
}

// Pick records the token picked next from logits.
func (q *LogprobQueue) Pick(logits []float32, tok uint32) {
	if q == nil {
		return
	}
	lp, top := sample.LogProbs(nil, logits, tok, q.lp.Top)
	q.entries = append(q.entries, TokenLogprob{Token: tok, Logprob: lp, Top: top})
}

// Emit hands the record of tok, the next token out, to the serve's
// Logprobs. It fails when tok is not the next token picked: an engine's
// bug, reported rather than mislabelled.
func (q *LogprobQueue) Emit(tok uint32) error {
	if q == nil {
		return nil
	}
	if q.sent >= len(q.entries) || q.entries[q.sent].Token != tok {
		return fmt.Errorf("engine: token %d emitted without its log-probability (%d of %d recorded)", tok, q.sent, len(q.entries))
	}
	q.lp.Record(q.entries[q.sent])
	q.entries[q.sent].Top = nil
	q.sent++
	return nil
}
