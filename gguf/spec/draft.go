package spec

import (
	"context"
	"fmt"
	"sync"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/detmath"
	"github.com/meshnode/meshnode/gguf/grammar"
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
	// qs are the sampled drafts' distributions (Draft.Q), reused from
	// one proposal to the next; nq of them hold this proposal's.
	qs [][]sample.Prob
	nq int
	// held, while set (Hold), keeps the drafts to the output's grammar:
	// the constraint where the output is, and a clone of it that follows
	// the proposal's drafts; heldOut marks a proposal the grammar ended.
	held, heldAt *grammar.Constraint
	heldOut      bool
}

// Hold keeps mp's drafts to con, the constraint of the output they follow
// (nil: none), which must be where the output is whenever mp proposes
// (each proposal walks a clone of it): each draft is picked among the
// tokens the grammar allows after the drafts before it, as the target's
// verified rows pick, and drafting stops where the grammar ends. A draft
// model left free writes its own text where the grammar forces the
// output's (JSON's keys and punctuation), and its drafts fall there.
func (mp *ModelProposer) Hold(con *grammar.Constraint) { mp.held = con }

// Stepper evaluates tokens on a draft session in a step it may share with
// other sequences (an engine's batched scheduler for the draft model, so
// that concurrent serves draft together), and calls judge with the logits
// after them before the step's scratch is reused. A step's logits do not
// depend on what shares it (model.Batch), so neither do the drafts.
type Stepper func(ctx context.Context, s *model.Session, tokens []uint32, judge func(Logits)) error

// Logits is a draft step's logits row, for its judge: read whole (Row),
// or, for a greedy draft, only its likeliest token and that token's
// probability (Top), which a backend that can finds on the device
// (model.TopProber): a small draft's step paid as much again for copying
// its row back and summing its softmax on the host.
type Logits interface {
	Row() []float32
	Top() (id uint32, p float64)
}

// BatchLogits is logits row J of sequence I of B's last step.
type BatchLogits struct {
	B    *model.Batch
	I, J int
}

// Row implements Logits.
func (l BatchLogits) Row() []float32 { return l.B.LogitsAt(l.I, l.J) }

// Top implements Logits: on the device where the backend can.
func (l BatchLogits) Top() (uint32, float64) {
	if id, p, ok := l.B.TopProbAt(l.I, l.J); ok {
		return id, p
	}
	return topProb(l.Row())
}

// StepWith has mp evaluate through st rather than its session's Eval,
// and returns mp.
func (mp *ModelProposer) StepWith(st Stepper) *ModelProposer {
	mp.step = st
	return mp
}

// eval evaluates tokens on the draft's session and calls judge (nil:
// none) with the logits after them.
func (mp *ModelProposer) eval(ctx context.Context, tokens []uint32, judge func(Logits)) error {
	if judge == nil {
		judge = func(Logits) {}
	}
	if mp.step != nil {
		return mp.step(ctx, mp.s, tokens, judge)
	}
	if err := mp.s.EvalDeferred(ctx, tokens); err != nil {
		return err
	}
	judge(sessionLogits{mp.s})
	return nil
}

// sessionLogits is the row after a draft session's last EvalDeferred,
// read only as far as its judge asks.
type sessionLogits struct{ s *model.Session }

func (l sessionLogits) Row() []float32 { return l.s.LastLogits() }

func (l sessionLogits) Top() (uint32, float64) {
	if id, p, ok := l.s.LastTopProb(); ok {
		return id, p
	}
	return topProb(l.Row())
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

// SetThreshold has mp stop drafting wherever its confidence in a draft
// falls below t, whatever the window would judge (a request's
// speculative.p_min; NewModelProposer's threshold).
func (mp *ModelProposer) SetThreshold(t float64) { mp.threshold = t }

// Evaluated is how many tokens the draft model has evaluated (its work).
func (mp *ModelProposer) Evaluated() int { return mp.evaluated }

// EvaluatedSince is how many tokens p's draft model has evaluated since
// *seen, which it advances: the draft's work a serve reports to its meter
// round by round. 0 for a proposer that evaluates no model (prompt
// lookup).
func EvaluatedSince(p Proposer, seen *int) int {
	mp, ok := p.(*ModelProposer)
	if !ok || mp.evaluated <= *seen {
		return 0
	}
	n := mp.evaluated - *seen
	*seen = mp.evaluated
	return n
}

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

// Forget drops the draft's cached sequence: its next Prefill evaluates
// the whole prompt (a serve that asked for no prompt cache).
func (mp *ModelProposer) Forget() { mp.s.Truncate(0) }

// Propose implements Proposer: drafting stops where the draft's top
// probability falls below its threshold (DefaultThreshold if none was
// set).
func (mp *ModelProposer) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	return mp.ProposeJudged(ctx, seq, gen, k, nil)
}

// ProposeJudged implements Judged. A proposer made with a threshold of
// its own keeps to it, and ignores judge.
func (mp *ModelProposer) ProposeJudged(ctx context.Context, seq []uint32, gen, k int, judge func(conf float64) (take, more bool)) ([]Draft, error) {
	if mp.threshold != 0 || judge == nil {
		floor := mp.threshold
		if floor == 0 {
			floor = DefaultThreshold
		}
		judge = func(conf float64) (bool, bool) {
			sure := floor < 0 || conf >= floor
			return sure, sure
		}
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
	mp.nq = 0
	mp.heldAt, mp.heldOut = nil, false
	if mp.held != nil {
		mp.heldAt = mp.held.Clone()
	}
	var d Draft
	pick := func(l Logits) { d = mp.pick(l) }
	if err := mp.eval(ctx, seq[reused:], pick); err != nil {
		return nil, fmt.Errorf("spec: draft: %w", err)
	}
	mp.evaluated += len(seq) - reused
	var drafts []Draft
	for {
		if mp.heldOut {
			return drafts, nil
		}
		take, more := judge(d.Conf)
		if !take {
			return drafts, nil
		}
		drafts = append(drafts, d)
		mp.hist = append(mp.hist, d.Token)
		if !more || len(drafts) == k {
			return drafts, nil
		}
		if c := mp.heldAt; c != nil && (c.Accept(d.Token) != nil || c.Done()) {
			return drafts, nil // nothing the grammar allows follows
		}
		if err := mp.eval(ctx, []uint32{d.Token}, pick); err != nil {
			return nil, fmt.Errorf("spec: draft: %w", err)
		}
		mp.evaluated++
	}
}

// pick drafts from the logits after the sequence (mp.hist its generated
// part), with its confidence: the draft's top probability.
func (mp *ModelProposer) pick(l Logits) Draft {
	var d Draft
	p := mp.smp.Params()
	var allowed []uint64
	if mp.heldAt != nil {
		var err error
		if allowed, err = mp.heldAt.Mask(); err != nil {
			mp.heldOut = true // no token fits: the verification meets it
			return d
		}
	}
	if allowed != nil {
		// Held: the pick among the allowed tokens; its confidence is
		// its probability over the whole vocabulary, as a free pick's.
		logits := l.Row()
		if p.Greedy() {
			d.Token = mp.smp.SampleAllowed(logits, mp.hist, allowed)
			d.Conf = probAt(logits, d.Token)
			return d
		}
		return mp.sampled(logits, allowed)
	}
	if p.ArgMax() {
		// One pass over the vocabulary finds the pick and its
		// probability (on the device where it can): for a small
		// draft, passes over the vocabulary cost as much as its
		// forward pass.
		d.Token, d.Conf = l.Top()
		return d
	}
	logits := l.Row()
	switch {
	case p.Greedy():
		d.Token = mp.smp.Sample(logits, mp.hist)
		d.Conf = probAt(logits, d.Token)
	default:
		d = mp.sampled(logits, nil)
	}
	return d
}

// sampled draws a draft from the draft's distribution under the
// request's pipeline over the tokens allowed (nil: all), which it keeps
// as the draft's Q (the rejection rule's q).
func (mp *ModelProposer) sampled(logits []float32, allowed []uint64) Draft {
	var d Draft
	if mp.nq == len(mp.qs) {
		mp.qs = append(mp.qs, nil)
	}
	d.Q = mp.smp.DistAllowed(mp.qs[mp.nq][:0], logits, mp.hist, allowed)
	mp.qs[mp.nq] = d.Q
	mp.nq++
	d.Token = mp.smp.Draw(d.Q)
	for _, x := range d.Q {
		d.Conf = max(d.Conf, x.P)
	}
	return d
}

// topProb is the greedy pick — the first largest logit's id, as the
// greedy sampler picks with no penalty — and its softmax probability
// (expSum's precision).
func topProb(logits []float32) (uint32, float64) {
	if len(logits) == 0 {
		return 0, 0
	}
	best := backend.ArgMax(logits)
	return uint32(best), 1 / expSum(logits, logits[best])
}

// probAt is the softmax probability of id among logits (expSum's
// precision): a penalised greedy draft's pick, which need not be the
// largest logit.
func probAt(logits []float32, id uint32) float64 {
	top := logits[0]
	for _, l := range logits {
		top = max(top, l)
	}
	d := top - logits[id]
	if !(d < softmaxSpan) {
		return 0
	}
	return detmath.Exp(-float64(d)) / expSum(logits, top)
}

// expSum is the sum of e^(l−top) over logits whose largest is top, to
// within 0.2%: each term is read from expTable at 1/256 of a nat, in four
// running sums (no one chain of additions waits on the last), leaving
// out logits more than softmaxSpan below the top (each weighs under
// e^-16 of the top's). A draft's confidence is only ever compared with a
// threshold or placed in a band of 1/8, and for a small draft model a
// vocabulary of math.Exp cost a third of its forward pass
// (BenchmarkTopProb).
func expSum(logits []float32, top float32) float64 {
	tab := expTable()
	term := func(l float32) float64 {
		if d := top - l; d < softmaxSpan {
			return tab[int(d*expSteps)]
		}
		return 0
	}
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(logits); i += 4 {
		s0 += term(logits[i])
		s1 += term(logits[i+1])
		s2 += term(logits[i+2])
		s3 += term(logits[i+3])
	}
	for ; i < len(logits); i++ {
		s0 += term(logits[i])
	}
	// The top's own term is e^0 = 1, not the table's middle of its step.
	return float64(s0+s1) + float64(s2+s3) - tab[0] + 1
}

// expSteps is expTable's steps per nat.
const expSteps = 256

// expTable holds e^-x at the middle of each step of 1/expSteps in [0,
// softmaxSpan): within e^(1/512) − 1 ≈ 0.2% of e^-x anywhere in the step.
var expTable = sync.OnceValue(func() *[softmaxSpan * expSteps]float64 {
	var t [softmaxSpan * expSteps]float64
	for i := range t {
		t[i] = detmath.Exp(-(float64(i) + 0.5) / expSteps)
	}
	return &t
})

// softmaxSpan is how far below the top logit expSum still counts.
const softmaxSpan = 16
