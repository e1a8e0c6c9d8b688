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
// ModelProposer drafting on its own (Propose, outside a Window's rule)
// stops: past it, a draft is more likely wrong than worth its cost.
// Under a Window (Window.Draft) a draft's confidence is priced by how
// often drafts of that confidence have stood, and the draft's and a
// verified row's costs, instead.
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
// p. Threshold 0 drafts under the rule of the Window that asks
// (ProposeJudged; DefaultThreshold for a bare Propose); a positive
// threshold stops wherever the draft's top probability falls below it,
// whatever the window; a negative one never stops.
func NewModelProposer(s *model.Session, p sample.Params, threshold float64) *ModelProposer {
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

// Propose implements Proposer: drafting stops where the draft's top
// probability falls below its threshold (DefaultThreshold if none was
// set).
func (mp *ModelProposer) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	return mp.ProposeJudged(ctx, seq, gen, k, nil)
}

// ProposeJudged implements Judged. A proposer made with a threshold of
// its own keeps to it, and ignores judge.
func (mp *ModelProposer) ProposeJudged(ctx context.Context, seq []uint32, gen, k int, judge func(conf float64) (take, more bool)) ([]Draft, error) {
	floor := mp.threshold // confidences below it need not be told apart
	switch {
	case mp.threshold != 0 || judge == nil:
		if floor == 0 {
			floor = DefaultThreshold
		}
		judge = func(conf float64) (bool, bool) {
			sure := floor < 0 || conf >= floor
			return sure, sure
		}
	default:
		floor = 1.0 / calBands
	}
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
	pick := func(logits []float32) { d = mp.pick(logits, floor) }
	if err := mp.eval(ctx, seq[reused:], pick); err != nil {
		return nil, fmt.Errorf("spec: draft: %w", err)
	}
	mp.evaluated += len(seq) - reused
	var drafts []Draft
	for {
		take, more := judge(d.Conf)
		if !take {
			return drafts, nil
		}
		drafts = append(drafts, d)
		mp.hist = append(mp.hist, d.Token)
		if !more || len(drafts) == k {
			return drafts, nil
		}
		if err := mp.eval(ctx, []uint32{d.Token}, pick); err != nil {
			return nil, fmt.Errorf("spec: draft: %w", err)
		}
		mp.evaluated++
	}
}

// pick drafts from the logits after the sequence (mp.hist its generated
// part), with its confidence: the draft's top probability, or 0 where it
// is below floor (negative: never).
func (mp *ModelProposer) pick(logits []float32, floor float64) Draft {
	var d Draft
	switch p := mp.smp.Params(); {
	case p.ArgMax():
		// One pass finds the pick and the top logit; a second sums the
		// softmax only until the pick falls below floor. For a small
		// draft, these passes over the vocabulary cost as much as its
		// forward pass.
		var top float32
		d.Token, top = argMax(logits)
		d.Conf = confidence(logits, logits[d.Token]-top, top, floor)
	case p.Greedy():
		d.Token = mp.smp.Sample(logits, mp.hist)
		d.Conf = softmaxAt(logits, d.Token)
	default:
		d.Q = mp.smp.Dist(nil, logits, mp.hist)
		d.Token = mp.smp.Draw(d.Q)
		for _, x := range d.Q {
			d.Conf = max(d.Conf, x.P)
		}
	}
	return d
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

// confidence is the softmax probability of a token whose logit lies at
// rel (≤ 0) from the top logit top, to softmaxAt's precision, or 0 where
// it is below floor. p = e^rel / S with S the sum of e^(l−top), so p ≥
// floor while S ≤ e^rel / floor: the sum stops as soon as it passes that
// bound, which for an unsure draft is after a few terms.
func confidence(logits []float32, rel, top float32, floor float64) float64 {
	if rel <= -softmaxSpan {
		return 0
	}
	num := expNeg(float64(rel))
	bound := math.Inf(1)
	if floor > 0 {
		bound = num / floor
	}
	low := top - softmaxSpan
	var sum float64
	for _, l := range logits {
		if l > low {
			if sum += expNeg(float64(l - top)); sum > bound {
				return 0
			}
		}
	}
	return num / sum
}

// expNeg is e^x for x in [−softmaxSpan, 0] to a relative 2e-7: a
// reduction to r = x − n·ln 2, |r| ≤ ln 2 / 2, a degree-6 Taylor
// polynomial for e^r and 2^n put in the exponent's bits. It takes under
// half math.Exp's time (BenchmarkExpNeg), which matters where a small
// draft model's confidence sums a vocabulary of them per drafted token
// (confidence need only tell bands of 1/8 apart). Each product is rounded on its own
// (explicit conversions), so no platform fuses them differently.
func expNeg(x float64) float64 {
	ni := int64(float64(x*math.Log2E) - 0.5) // x ≤ 0: to the nearest
	n := float64(ni)
	r := float64(x - float64(n*math.Ln2))
	p := float64(1.0 / 720)
	p = float64(float64(p*r) + 1.0/120)
	p = float64(float64(p*r) + 1.0/24)
	p = float64(float64(p*r) + 1.0/6)
	p = float64(float64(p*r) + 0.5)
	p = float64(float64(p*r) + 1)
	p = float64(float64(p*r) + 1)
	return math.Float64frombits(math.Float64bits(p) + uint64(ni)<<52)
}

// softmaxSpan is how far below the top logit softmaxAt still counts.
const softmaxSpan = 16
