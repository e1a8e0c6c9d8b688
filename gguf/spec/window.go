package spec

// Window sizes a request's speculation round by round: as many drafts as
// maximise the expected speedup for the acceptance seen so far and the
// draft's cost, and none — plain decoding, with a probe now and then —
// while no size pays. Its state is counts of proposed and accepted
// drafts, so its decisions are a function of the request's own history
// (replay repeats them), never of timings.
type Window struct {
	max  int
	cost float64 // c: a drafted token's cost relative to a target pass
	row  float64 // v: a verified row's cost over a one-token pass's

	proposed, accepted int // decayed counts, with a prior
	idle               int // plain rounds since speculation stopped paying
	probes             int // probes since it last paid
	maxProbes          int // negative: probe for ever
	fixed              int // > 0: every round asks for this many
}

// Fixed is a window of k drafts every round, whatever they yield: for
// measuring what speculation does where the adaptive window would not
// speculate.
func Fixed(k int) *Window {
	w := NewWindow(k, 0, 0)
	w.fixed = k
	return w
}

// Window defaults.
const (
	// DefaultMaxWindow is the most drafts per round.
	DefaultMaxWindow = 8
	// DefaultRowCost is what one more row of a verified window costs,
	// relative to a one-token pass: the weights are read once for all
	// rows, but each row is still multiplied through them. 0.25 is what
	// the CPU backend's batched decode of a 1B model measures (make
	// bench-batch: 8 rows take 2.6 times one row's step); a model small
	// enough to be compute-bound costs more (make bench-spec).
	DefaultRowCost = 0.25
	// probeEvery is how many plain rounds pass before a round drafts
	// one token again, to see whether acceptance has come back.
	probeEvery = 16
	// decayAt halves the counts once this many drafts are counted, so
	// the estimate follows the text's recent predictability.
	decayAt = 64
	// minGain is the least expected speedup worth speculating for: the
	// estimate is rough, and a round that does not pay is slower.
	minGain = 1.05
)

// NewWindow sizes rounds of at most max drafts (0: DefaultMaxWindow) for
// a proposer whose drafted token costs cost target passes (c: a draft
// model's weight bytes over the target's; about 0 for prompt lookup), on
// a target whose window costs row more per extra row (negative: 0;
// 0: DefaultRowCost). Both are fixed when the models load, never timed.
func NewWindow(max int, cost, row float64) *Window {
	if max <= 0 {
		max = DefaultMaxWindow
	}
	switch {
	case row == 0:
		row = DefaultRowCost
	case row < 0:
		row = 0
	}
	// The prior: 7 of 10 accepted, optimistic enough to try a window.
	return &Window{max: max, cost: cost, row: row, proposed: 10, accepted: 7, maxProbes: -1}
}

// Rate is the acceptance estimate: the share of drafts accepted,
// smoothed by the prior and decayed toward recent rounds.
func (w *Window) Rate() float64 { return float64(w.accepted) / float64(w.proposed) }

// Size is the drafts to ask for in the next round; 0 decodes plainly.
func (w *Window) Size() int {
	if w.fixed > 0 {
		return w.fixed
	}
	k, gain := w.best()
	if gain > minGain {
		w.idle, w.probes = 0, 0
		return k
	}
	if w.idle < probeEvery || w.maxProbes >= 0 && w.probes >= w.maxProbes {
		w.idle++
		return 0
	}
	w.idle = 0
	w.probes++
	return 1
}

// Speculates reports whether w would speculate now, by size or probe,
// without counting a round: whether a proposer's prompt work is worth
// doing.
func (w *Window) Speculates() bool {
	if w.fixed > 0 {
		return true
	}
	if _, gain := w.best(); gain > minGain {
		return true
	}
	return w.maxProbes < 0 || w.probes < w.maxProbes
}

// LimitProbes makes w give up after n probes in a row that do not bring
// speculation back (negative: never give up, the default), and returns w. A draft model
// catches up on every token since it last drafted before it probes, so
// its probes cost as much as drafting all along; prompt lookup's cost
// nothing.
func (w *Window) LimitProbes(n int) *Window {
	w.maxProbes = n
	return w
}

// best is the window size with the largest expected speedup, and that
// speedup: E(k) / (k·(c+v) + 1), where E(k) = 1 + a + … + a^k is the
// tokens a round of k drafts yields when each stands with probability a
// (the drafts up to the first rejected, and the target's own token), and
// the round costs the target's pass, k drafted tokens and k more rows.
func (w *Window) best() (int, float64) {
	a := w.Rate()
	bestK, bestGain := 0, 1.0
	e, pow := 1.0, 1.0
	for k := 1; k <= w.max; k++ {
		// Explicit conversions round each product, so no platform fuses
		// them differently (the decision must replay anywhere).
		pow = float64(pow * a)
		e += pow
		if gain := e / float64(float64(k)*float64(w.cost+w.row)+1); gain > bestGain {
			bestK, bestGain = k, gain
		}
	}
	return bestK, bestGain
}

// Declined counts a round whose proposer drafted fewer tokens than asked
// (a draft model below its threshold) as one more rejected draft: the
// round paid for drafting a token it did not get, and a proposer that
// often declines yields less per round than its acceptance says. A
// proposer that costs nothing (cost 0: prompt lookup finding no match)
// paid nothing, and its refusals are not counted.
func (w *Window) Declined() {
	if w.cost > 0 {
		w.Record(1, 0)
	}
}

// Record counts a round's drafts and how many the target accepted.
func (w *Window) Record(proposed, accepted int) {
	w.proposed += proposed
	w.accepted += accepted
	if w.proposed >= decayAt {
		w.proposed, w.accepted = w.proposed/2, w.accepted/2
	}
}
