package spec

import (
	"context"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
)

// DefaultThreshold is the draft's top probability below which a
// ModelProposer stops drafting: past it, a draft is more likely wrong
// than worth its cost.
const DefaultThreshold = 0.4

// CheckVocab refuses a draft model whose vocabulary is not the target's:
// the same number of tokens (in the output layer and the tokenizer), each
// with the same text. Drafts are token ids; with another vocabulary they
// would be verified as other words.
func CheckVocab(target, draft *gguf.Metadata, targetVocab, draftVocab int) error {
	if targetVocab != draftVocab {
		return fmt.Errorf("spec: the draft's vocabulary has %d tokens, the target's %d", draftVocab, targetVocab)
	}
	const key = "tokenizer.ggml.tokens"
	tt, ok1 := target.Strings(key)
	dt, ok2 := draft.Strings(key)
	if !ok1 || !ok2 {
		return fmt.Errorf("spec: the target or the draft has no %s to compare", key)
	}
	if len(tt) != len(dt) {
		return fmt.Errorf("spec: the draft's tokenizer has %d tokens, the target's %d", len(dt), len(tt))
	}
	for i := range tt {
		if tt[i] != dt[i] {
			return fmt.Errorf("spec: token %d is %q in the draft, %q in the target", i, dt[i], tt[i])
		}
	}
	return nil
}

// ModelProposer drafts with a smaller model of the same vocabulary, on a
// session of its own that follows the sequence (its KV cache keeps the
// prefix it shares with the last proposal). For a sampled request it
// samples its drafts from its own distribution under the request's
// pipeline, with a stream seeded from the request's seed; for a greedy
// one it drafts its own greedy picks. It is not safe for concurrent use.
type ModelProposer struct {
	s         *model.Session
	smp       *sample.Sampler
	threshold float64
	evaluated int
	hist      []uint32
	step      Stepper // nil: the session's own Eval
}

// Stepper evaluates tokens on a draft session in a step it may share with
// other sequences (an engine's batched scheduler for the draft model, so
// that concurrent serves draft together), and calls judge with the logits
// after them before the step's scratch is reused. A step's logits do not
// depend on what shares it (model.Batch), so neither do the drafts.
type Stepper func(ctx context.Context, s *model.Session, tokens []uint32, judge func(logits []float32)) error

// StepWith has mp evaluate through st rather than its session's Eval,
// and returns mp.
func (mp *ModelProposer) StepWith(st Stepper) *ModelProposer {
	mp.step = st
	return mp
}

// eval evaluates tokens on the draft's session and calls judge (nil:
// none) with the logits after them.
func (mp *ModelProposer) eval(ctx context.Context, tokens []uint32, judge func([]float32)) error {
	if judge == nil {
		judge = func([]float32) {}
	}
	if mp.step != nil {
		return mp.step(ctx, mp.s, tokens, judge)
	}
	logits, err := mp.s.Eval(ctx, tokens)
	if err != nil {
		return err
	}
	judge(logits)
	return nil
}

// draftSeed separates the draft's random stream from the target's.
const draftSeed = 0x9e3779b97f4a7c15

// NewModelProposer drafts on s (a session of the draft model, which the
// proposer uses but does not own) under the request's sampling parameters
// p, stopping where the draft's top probability falls below threshold
// (0: DefaultThreshold; negative: never).
func NewModelProposer(s *model.Session, p sample.Params, threshold float64) *ModelProposer {
	if threshold == 0 {
		threshold = DefaultThreshold
	}
	p.Seed ^= draftSeed
	return &ModelProposer{s: s, smp: sample.New(p), threshold: threshold}
}

// Evaluated is how many tokens the draft model has evaluated (its work).
func (mp *ModelProposer) Evaluated() int { return mp.evaluated }

// Prefill implements Prefiller: the draft evaluates the prompt (past
// the prefix its session already holds), so that the first round
// evaluates only the tokens generated since.
func (mp *ModelProposer) Prefill(ctx context.Context, prompt []uint32) error {
	s := mp.s
	if len(prompt) >= s.Context() {
		return nil // Propose will propose nothing: no room for a draft
	}
	reused := s.CommonPrefix(prompt)
	s.Truncate(reused)
	if reused == len(prompt) {
		return nil
	}
	if err := mp.eval(ctx, prompt[reused:], nil); err != nil {
		return fmt.Errorf("spec: draft prefill: %w", err)
	}
	mp.evaluated += len(prompt) - reused
	return nil
}

// Propose implements Proposer.
func (mp *ModelProposer) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	s := mp.s
	// The draft's context may be shorter than the target's: where the
	// sequence no longer fits, it proposes nothing.
	k = min(k, s.Context()-len(seq))
	if k <= 0 || len(seq) == 0 {
		return nil, nil
	}
	reused := min(s.CommonPrefix(seq), len(seq)-1)
	s.Truncate(reused)
	mp.hist = append(mp.hist[:0], seq[gen:]...)
	var d Draft
	sure := false
	judge := func(logits []float32) { d, sure = mp.judge(logits) }
	if err := mp.eval(ctx, seq[reused:], judge); err != nil {
		return nil, fmt.Errorf("spec: draft: %w", err)
	}
	mp.evaluated += len(seq) - reused
	var drafts []Draft
	for {
		if !sure {
			return drafts, nil
		}
		drafts = append(drafts, d)
		mp.hist = append(mp.hist, d.Token)
		if len(drafts) == k {
			return drafts, nil
		}
		if err := mp.eval(ctx, []uint32{d.Token}, judge); err != nil {
			return nil, fmt.Errorf("spec: draft: %w", err)
		}
		mp.evaluated++
	}
}

// judge picks a draft from the logits after the sequence (mp.hist its
// generated part), and reports whether the draft is sure enough of it to
// propose it.
func (mp *ModelProposer) judge(logits []float32) (Draft, bool) {
	var d Draft
	switch p := mp.smp.Params(); {
	case p.ArgMax():
		// One pass finds the pick and the top logit; a second weighs
		// the rest only until it rules the pick out. For a small draft,
		// these passes over the vocabulary cost as much as its forward
		// pass.
		var top float32
		d.Token, top = argMax(logits)
		return d, mp.threshold <= 0 || confident(logits, logits[d.Token]-top, top, mp.threshold)
	case p.Greedy():
		d.Token = mp.smp.Sample(logits, mp.hist)
		return d, mp.threshold <= 0 || softmaxAt(logits, d.Token) >= mp.threshold
	default:
		d.Q = mp.smp.Dist(nil, logits, mp.hist)
		d.Token = mp.smp.Draw(d.Q)
		var top float64
		for _, x := range d.Q {
			top = max(top, x.P)
		}
		return d, top >= mp.threshold
	}
}

// softmaxAt is the probability of id under the softmax of logits, to
// within a few parts in a million: logits more than softmaxSpan below the
// top are left out of the sum (each weighs under e^-16 of the top's), so
// that a vocabulary of logits costs comparisons, not exponentials. It
// only decides when drafting stops.
func softmaxAt(logits []float32, id uint32) float64 {
	top := float32(math.Inf(-1))
	for _, l := range logits {
		top = max(top, l)
	}
	var sum float64
	for _, l := range logits {
		if l > top-softmaxSpan {
			sum += math.Exp(float64(l - top))
		}
	}
	if logits[id] <= top-softmaxSpan {
		return 0
	}
	return math.Exp(float64(logits[id]-top)) / sum
}

// argMax is the first largest logit's id (the greedy sampler's pick
// with no penalty) and its value.
func argMax(logits []float32) (uint32, float32) {
	best, top := 0, float32(math.Inf(-1))
	for id, l := range logits {
		if l > top {
			best, top = id, l
		}
	}
	return uint32(best), top
}

// confident reports whether a token whose logit lies at rel (≤ 0) from
// the top logit top has a softmax probability of at least threshold, to
// softmaxAt's precision. p = e^rel / S with S the sum of e^(l−top), so p
// ≥ threshold while S ≤ e^rel / threshold: the sum stops as soon as it
// passes that bound, which for an unsure draft is after a few terms.
func confident(logits []float32, rel, top float32, threshold float64) bool {
	if rel <= -softmaxSpan {
		return false
	}
	bound := math.Exp(float64(rel)) / threshold
	floor := top - softmaxSpan
	var sum float64
	for _, l := range logits {
		if l > floor {
			if sum += math.Exp(float64(l - top)); sum > bound {
				return false
			}
		}
	}
	return true
}

// softmaxSpan is how far below the top logit softmaxAt still counts.
const softmaxSpan = 16
