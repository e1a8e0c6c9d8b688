package spec

import (
	"context"
	"slices"
)

// Lookup is prompt lookup (n-gram) proposing: it finds the latest earlier
// occurrence of the sequence's last MaxN tokens (or fewer, down to MinN)
// and proposes what followed it. Text that repeats its prompt — code
// edits, quotations, summaries, structured output — drafts itself, with
// no second model. Proposals are deterministic (Draft.Q nil).
type Lookup struct {
	MinN, MaxN int // the n-gram lengths tried, longest first; 0: 1 and 3
}

// Propose implements Proposer.
func (l Lookup) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	return l.ProposeJudged(ctx, seq, gen, k, nil)
}

// ProposeJudged implements Judged: each draft's confidence is a band for
// how it was found — the length of the n-gram matched and whether it is
// the first token after the match — which the window learns the worth of
// as it does a draft model's confidences. A nil judge takes every draft.
func (l Lookup) ProposeJudged(_ context.Context, seq []uint32, _, k int, judge func(conf float64) (take, more bool)) ([]Draft, error) {
	lo, hi := l.MinN, l.MaxN
	if lo <= 0 {
		lo = 1
	}
	if hi <= 0 {
		hi = 3
	}
	for n := min(hi, len(seq)-1); n >= lo && k > 0; n-- {
		suffix := seq[len(seq)-n:]
		// The latest occurrence that has a token after it, other than
		// the suffix itself.
		for i := len(seq) - n - 1; i >= 0; i-- {
			if !slices.Equal(seq[i:i+n], suffix) {
				continue
			}
			next := seq[i+n : min(i+n+k, len(seq))]
			d := make([]Draft, 0, len(next))
			for j, t := range next {
				conf := lookupConf(n, j)
				take, more := true, true
				if judge != nil {
					take, more = judge(conf)
				}
				if !take {
					break
				}
				d = append(d, Draft{Token: t, Conf: conf})
				if !more {
					break
				}
			}
			return d, nil
		}
	}
	return nil, nil
}

// lookupConf is the confidence a lookup draft is counted under: a band
// for how it was found — its n-gram's length (1, 2, 3 or longer) and
// whether it is the first token after the match (j = 0) or a later one,
// which stands more often once the first has (the text is being copied).
// The bands' middles, the window's priors for them, rank the ways from
// a first token after a one-token match (0.19) to a later token after a
// three-token one (0.81); the window learns each one's worth.
func lookupConf(n, j int) float64 {
	b := 1 + 2*min(max(n, 1)-1, 2) // 1, 3, 5
	if j > 0 {
		b++
	}
	return (float64(b) + 0.5) / calBands
}
