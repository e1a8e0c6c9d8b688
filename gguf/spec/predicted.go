package spec

import (
	"context"
	"slices"
)

// Predicted proposes from a predicted output (OpenAI's predicted
// outputs): tokens the answer is expected to repeat in large part, such
// as a file being edited. While the answer so far is the prediction's
// start, it drafts the prediction's next tokens; once the answer strays
// (an edited line), it drafts what follows the prediction's best match
// of the answer's last tokens, found as Lookup finds one in the sequence
// (MinN to MaxN tokens, the match reaching furthest back), so the
// unchanged text after an edit is picked up again. Proposals are
// deterministic (Draft.Q nil). One serves one request: it remembers how
// much of the answer it has seen to follow the prediction.
type Predicted struct {
	Tokens     []uint32
	MinN, MaxN int // the n-gram lengths tried once the answer strays; 0: 1 and 3

	// aligned is how many of the answer's first tokens are known to be
	// the prediction's (a prefix of it); -1 once the answer strays.
	aligned int
}

// NewPredicted is a proposer of the predicted tokens.
func NewPredicted(tokens []uint32) *Predicted { return &Predicted{Tokens: tokens} }

// Propose implements Proposer.
func (p *Predicted) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	return p.ProposeJudged(ctx, seq, gen, k, nil)
}

// ProposeJudged implements Judged: a draft along the prediction's start
// is counted in the band of text being copied; one after a match, in
// the band Lookup counts that match in (lookupConf).
func (p *Predicted) ProposeJudged(_ context.Context, seq []uint32, gen, k int, judge func(conf float64) (take, more bool)) ([]Draft, error) {
	if k <= 0 || len(p.Tokens) == 0 {
		return nil, nil
	}
	out := seq[min(max(gen, 0), len(seq)):] // the answer so far
	if p.following(out) {
		next := p.Tokens[len(out):min(len(out)+k, len(p.Tokens))]
		return judged(next, func(j int) float64 { return lookupConf(1, lookupCopying, j) }, judge), nil
	}
	lo, hi := p.MinN, p.MaxN
	if lo <= 0 {
		lo = 1
	}
	if hi <= 0 {
		hi = 3
	}
	for n := min(hi, len(seq)); n >= lo; n-- {
		at, reach := matchIn(p.Tokens, seq, n)
		if at < 0 {
			continue
		}
		next := p.Tokens[at+n : min(at+n+k, len(p.Tokens))]
		return judged(next, func(j int) float64 { return lookupConf(n, reach, j) }, judge), nil
	}
	return nil, nil
}

// following reports whether the answer out is still the prediction's
// start, with a token of the prediction after it; it checks only the
// tokens it has not seen before.
func (p *Predicted) following(out []uint32) bool {
	switch {
	case p.aligned < 0:
		return false
	case len(out) < p.aligned:
		// A shorter answer than before: its tokens were seen, as the
		// answer only grows; recount from its length.
		p.aligned = len(out)
	case len(out) > len(p.Tokens) || !slices.Equal(out[p.aligned:], p.Tokens[p.aligned:len(out)]):
		p.aligned = -1
		return false
	default:
		p.aligned = len(out)
	}
	return p.aligned < len(p.Tokens)
}
