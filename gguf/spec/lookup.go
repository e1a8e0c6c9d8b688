package spec

import (
	"context"
	"slices"
)

// Lookup is prompt lookup (n-gram) proposing: it finds an earlier
// occurrence of the sequence's last MaxN tokens (or fewer, down to MinN)
// and proposes what followed it. Text that repeats its prompt — code
// edits, quotations, summaries, structured output — drafts itself, with
// no second model. Of the latest occurrences it takes the one whose
// match reaches furthest back (the latest of those): text being copied
// matches at length, and its continuation stands. Proposals are
// deterministic (Draft.Q nil).
type Lookup struct {
	MinN, MaxN int // the n-gram lengths tried, longest first; 0: 1 and 3
}

const (
	// lookupOccurrences bounds the occurrences of an n-gram weighed, the
	// latest first, so a round's work does not grow with the context.
	lookupOccurrences = 32
	// lookupReach caps how far back a match is followed.
	lookupReach = 16
	// lookupCopying is the reach from which a match is taken for text
	// being copied (lookupConf's top band).
	lookupCopying = 8
)

// Propose implements Proposer.
func (l Lookup) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	return l.ProposeJudged(ctx, seq, gen, k, nil)
}

// ProposeJudged implements Judged: each draft's confidence is a band for
// how it was found (lookupConf), which the window learns the worth of as
// it does a draft model's confidences. A nil judge takes every draft.
func (l Lookup) ProposeJudged(_ context.Context, seq []uint32, _, k int, judge func(conf float64) (take, more bool)) ([]Draft, error) {
	return l.draftFrom(seq, seq, k, judge), nil
}

// draftFrom drafts up to k tokens of src: what follows src's best match
// (matchIn) of seq's last MaxN tokens, or fewer, down to MinN. src is
// seq itself for prompt lookup, a predicted output for Predicted.
func (l Lookup) draftFrom(src, seq []uint32, k int, judge func(conf float64) (take, more bool)) []Draft {
	lo, hi := l.MinN, l.MaxN
	if lo <= 0 {
		lo = 1
	}
	if hi <= 0 {
		hi = 3
	}
	for n := min(hi, len(seq)); n >= lo && k > 0; n-- {
		at, reach := matchIn(src, seq, n)
		if at < 0 {
			continue
		}
		next := src[at+n : min(at+n+k, len(src))]
		return judged(next, func(j int) float64 { return lookupConf(n, reach, j) }, judge)
	}
	return nil
}

// judged is next as drafts, each of confidence conf(j), cut where judge
// (nil: take all) says.
func judged(next []uint32, conf func(j int) float64, judge func(conf float64) (take, more bool)) []Draft {
	d := make([]Draft, 0, len(next))
	for j, t := range next {
		c := conf(j)
		take, more := true, true
		if judge != nil {
			take, more = judge(c)
		}
		if !take {
			break
		}
		d = append(d, Draft{Token: t, Conf: c})
		if !more {
			break
		}
	}
	return d
}

// matchIn finds, among the latest lookupOccurrences occurrences in src
// of seq's last n tokens that have a token after them in src, the one
// whose match with seq's end reaches furthest back (up to lookupReach
// tokens; the latest of equals): its start in src and that reach. -1 if
// there is none. src is seq itself for prompt lookup (the suffix itself
// has no token after it, so it is never its own match).
func matchIn(src, seq []uint32, n int) (at, reach int) {
	end := len(seq) - n // the suffix's start
	suffix := seq[end:]
	at, seen := -1, 0
	for i := len(src) - n - 1; i >= 0 && seen < lookupOccurrences && reach < lookupReach; i-- {
		if !slices.Equal(src[i:i+n], suffix) {
			continue
		}
		seen++
		r := n
		for r < lookupReach && i-(r-n) > 0 && end-(r-n) > 0 && src[i-(r-n)-1] == seq[end-(r-n)-1] {
			r++
		}
		if r > reach {
			at, reach = i, r
		}
	}
	return at, reach
}

// lookupConf is the confidence a lookup draft is counted under: a band
// for how it was found — its n-gram's length (1, 2, 3 or longer), whether
// it is the first token after the match (j = 0) or a later one, which
// stands more often once the first has (the text is being copied), and
// whether the match reaches lookupCopying tokens back or more (reach),
// where the text is surely being copied. The bands' middles, the
// window's priors for them, rank the ways from a first token after a
// one-token match (0.19) to a later token after a three-token one (0.81)
// and a copy (0.94); the window learns each one's worth.
func lookupConf(n, reach, j int) float64 {
	b := 1 + 2*min(max(n, 1)-1, 2) // 1, 3, 5
	if j > 0 {
		b++
	}
	if reach >= lookupCopying {
		b = 7
	}
	return (float64(b) + 0.5) / calBands
}
