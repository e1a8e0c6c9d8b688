package spec

import (
	"context"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/sample"
)

// Draft is one proposed token.
type Draft struct {
	Token uint32
	// Q is the distribution the proposer drew Token from, after the
	// request's sampling pipeline; nil for a deterministic proposal
	// (one-hot on Token). It is the proposer's, valid until it proposes
	// again (a distribution over the vocabulary is too large to make
	// anew for every draft).
	Q []sample.Prob
	// Conf is the proposer's confidence in Token, by which a Window
	// learns what its drafts are worth: a draft model's probability for
	// its pick (its top probability, for a sampled draft); for prompt
	// lookup, a band for how the draft was found (lookupConf).
	Conf float64
}

// q is the probability the proposal gave its token: Q's entry for it, 1
// for a deterministic proposal.
func (d Draft) q(id uint32) float64 {
	if d.Q == nil {
		if id == d.Token {
			return 1
		}
		return 0
	}
	for _, x := range d.Q {
		if x.ID == id {
			return x.P
		}
	}
	return 0
}

// Proposer drafts the tokens likely to follow a sequence.
type Proposer interface {
	// Propose drafts at most k tokens to follow seq, the sequence so far:
	// the prompt, then from seq[gen] on the tokens generated (the
	// penalties' history). It may propose fewer, or none, where it is
	// unsure.
	Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error)
}

// Judged is a Proposer that reports its confidence in each draft and
// drafts under its caller's rule: a Window, which has learnt how often
// drafts of each confidence stand in the request and what a draft and a
// verified row cost, decides draft by draft whether to propose it and
// whether to draft on (Window.Draft).
type Judged interface {
	Proposer
	// ProposeJudged is Propose with judge deciding, for each draft in
	// turn given its confidence, whether to propose it (take) and
	// whether to draft another after it (more).
	ProposeJudged(ctx context.Context, seq []uint32, gen, k int, judge func(conf float64) (take, more bool)) ([]Draft, error)
}

// Holder is a Proposer that keeps its drafts to the grammar the output is
// held to (ModelProposer.Hold); a window's drafts are verified under the
// grammar whether or not its proposer is one (Allowed, Masks).
type Holder interface {
	Proposer
	Hold(con *grammar.Constraint)
}

// Prefiller is a Proposer with work of its own to do on the prompt (a
// draft model's prefill). Done beside the target's prefill, it is prompt
// work, batched as the prompt is; left to the first round, the first
// draft waits on it.
type Prefiller interface {
	// Prefill takes in the prompt ahead of the first Propose, whose seq
	// begins with it.
	Prefill(ctx context.Context, prompt []uint32) error
}

// Prefill has p take in the prompt if it is a Prefiller and w expects to
// speculate, the prompt's catch-up counted (Window.Limit): a draft too
// dear for any window to pay at the outset is left idle, w counting the
// prompt as what a probe would first catch the draft up on, so that it is
// paid for only if a probe is.
func Prefill(ctx context.Context, p Proposer, w *Window, prompt []uint32) error {
	pf, ok := p.(Prefiller)
	if !ok || w == nil {
		return nil
	}
	if !w.Starts(len(prompt)) {
		w.behind += len(prompt)
		return nil
	}
	return pf.Prefill(ctx, prompt)
}
