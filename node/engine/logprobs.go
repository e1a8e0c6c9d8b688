package engine

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

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
	// PostSampling, llama-server's post_sampling_probs, asks for each
	// token under the distribution the sampler drew it from (after the
	// penalties, the filters and the temperature: sample.Sampler's
	// DistAllowed) in place of the model's: its log-probability, and the
	// likeliest tokens of that distribution (those it keeps, at most
	// Top). A greedy pick's is the pick alone, at probability 1. It
	// changes no token, but a serve with it does not speculate (a
	// window's rows would each need the sampler's distribution after the
	// drafts before them); the request names no draft.
	PostSampling bool
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

// PostSampling reports whether the serve's Logprobs ask for the
// sampler's distributions (Logprobs.PostSampling), under which it does
// not speculate.
func PostSampling(ctx context.Context) bool {
	lp := LogprobsFrom(ctx)
	return lp != nil && lp.PostSampling
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
	dist    []sample.Prob // PostSampling's scratch
}

// PostSampling reports whether the queue records the sampler's
// distributions (Logprobs.PostSampling); false for a nil queue.
func (q *LogprobQueue) PostSampling() bool { return q != nil && q.lp.PostSampling }

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

// SampleAllowed picks the next token from logits with smp
// (sample.Sampler.SampleAllowed) and records it: under the model's
// distribution (Pick), or, where the serve asked for the distribution
// the pick was drawn from (Logprobs.PostSampling), under smp's, taken
// before the draw (a stateful sampler's, mirostat's or adaptive-p's, is
// what the draw reads). A nil queue only picks.
func (q *LogprobQueue) SampleAllowed(smp *sample.Sampler, logits []float32, history []uint32, allowed []uint64) uint32 {
	if !q.PostSampling() {
		next := smp.SampleAllowed(logits, history, allowed)
		q.Pick(logits, next)
		return next
	}
	q.dist = smp.DistAllowed(q.dist[:0], logits, history, allowed)
	next := smp.SampleAllowed(logits, history, allowed)
	q.entries = append(q.entries, distLogprob(q.dist, next, q.lp.Top))
	return next
}

// distLogprob is tok's record under the distribution d: its
// log-probability (−Inf where d leaves it out) and d's top likeliest
// tokens, ties to the lower id.
func distLogprob(d []sample.Prob, tok uint32, top int) TokenLogprob {
	t := TokenLogprob{Token: tok, Logprob: math.Inf(-1)}
	for _, x := range d {
		if x.ID == tok {
			t.Logprob = math.Log(x.P)
		}
	}
	top = min(top, sample.MaxTopLogProbs)
	if top <= 0 {
		return t
	}
	// Insertion into a sorted list of at most top entries: top is small.
	order := func(a, b sample.Prob) int {
		if a.P != b.P {
			return cmp.Compare(b.P, a.P)
		}
		return cmp.Compare(a.ID, b.ID)
	}
	kept := make([]sample.Prob, 0, top)
	for _, x := range d {
		if len(kept) == top {
			if order(x, kept[top-1]) >= 0 {
				continue
			}
			kept = kept[:top-1]
		}
		i, _ := slices.BinarySearchFunc(kept, x, order)
		kept = slices.Insert(kept, i, x)
	}
	for _, x := range kept {
		t.Top = append(t.Top, sample.LogProb{ID: x.ID, LogProb: math.Log(x.P)})
	}
	return t
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
