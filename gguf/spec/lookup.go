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
func (l Lookup) Propose(_ context.Context, seq []uint32, _, k int) ([]Draft, error) {
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
			d := make([]Draft, len(next))
			for j, t := range next {
				d[j] = Draft{Token: t}
			}
			return d, nil
		}
	}
	return nil, nil
}
