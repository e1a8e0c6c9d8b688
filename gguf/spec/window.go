package spec

// Window sizes a request's speculation round by round: as many drafts as
// maximise the expected speedup for the acceptance seen so far and the
// draft's cost, and none — plain decoding, with a probe now and then —
// while no size pays. Its state is counts of proposed and accepted
// drafts and of rounds, so its decisions are a function of the request's
// own history (replay repeats them), never of timings.
//
// Probes. Once no size pays, a round drafts a short window (probeSize
// drafts) after probeEvery plain rounds, then after twice as many, up to
// maxProbeGap; a probe whose drafts all stand brings the next one back to
// probeEvery. A probe halves the counts first — what was measured before
// the pause says less about the text now — so that a few probes that
// stand bring speculation back, and a few that fall keep it off. Probes
// are held to a budget: what they cost since speculation stopped paying,
// in target passes, stays within probeBudget of the plain rounds since —
// a probe's drafts and rows, k·(c+v), and for a draft model its catch-up
// on every token since it last ran, c each (counted as drafted tokens;
// the catch-up is one batched step, which costs less). So a proposer
// whose catch-up alone costs more than the budget (c ≥ probeBudget: any
// draft model but one far smaller than its target) never probes, and
// prompt lookup, which costs nothing to catch up, probes at most every
// maxProbeGap rounds once acceptance stays low.
type Window struct {
	max  int
	min  int     // the fewest drafts a round verifies (Bound); fewer: none
	cost float64 // c: a drafted token's cost relative to a target pass
	row  float64 // v: a verified row's cost over a one-token pass's
	// steps, where measured, are each window's pass in one-token
	// passes: steps[k] for k drafts (k+1 rows). Kernels take rows in
	// groups (eight float rows, four-row bands), so one row past a group
	// costs a pass of its own; past len(steps), rows cost v each.
	steps []float64

	proposed, accepted int // decayed counts, with a prior
	fixed              int // > 0: every round asks for this many

	// While no size pays: plain rounds since it stopped paying (off) and
	// what the probes cost since, in target passes (spent); plain rounds
	// since the last probe (idle) and due before the next (gap); tokens
	// the proposer has not seen since it last drafted (behind), which a
	// draft model catches up on before it probes; and whether the last
	// round was a probe whose outcome is not yet known.
	off     int
	spent   float64
	idle    int
	gap     int
	behind  int
	probing bool

	// left is the most tokens the request may still generate, where
	// Limit has been told (limited).
	left    int
	limited bool

	// judging: the proposer lets the window judge its drafts one by one
	// (Judged, and it called the judge), so a round is offered the whole
	// window and the judge ends it where one more draft stops paying.
	judging bool

	cal calibration // how often drafts of each confidence stand

	// catchUp is what a draft model's round costs more when its first
	// step catches up on two tokens rather than one, in target passes
	// (Prices.CatchUp over Cost, or for a sampled serve the u of its
	// draft name; 0: not priced: prompt lookup, windows priced by the
	// files). A round whose drafts all stand leaves its last draft
	// unevaluated, so the round after it catches up on that draft and
	// the target's token.
	catchUp float64
	// first is what a draft model's first step of a round costs more
	// than its later ones, in target passes (Prices.First, or for a
	// sampled serve the f of its draft name, Prices.SampledFirst; 0: not
	// priced).
	first float64
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
	// probeEvery is how many plain rounds pass before the first probe
	// once speculation stops paying (and after a probe that stands).
	probeEvery = 16
	// maxProbeGap bounds the plain rounds between probes as the gap
	// doubles: acceptance that comes back is seen within so many.
	maxProbeGap = 256
	// probeSize is a probe's drafts.
	probeSize = 2
	// probeBudget is the most the probes since speculation stopped
	// paying may cost, as a share of the plain rounds since: well within
	// the 5% that speculation may lose where acceptance is low.
	probeBudget = 0.02
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
	w := &Window{max: max, cost: cost, row: row, gap: probeEvery}
	return w.Expect(DefaultPrior)
}

// DefaultPrior is the acceptance a window expects before it has seen any
// (7 of 10): optimistic enough to try a window.
const DefaultPrior = 0.7

// CopyPrior is the acceptance a window expects of a draft that is a
// copy of the target's weights in other types (a more quantised copy):
// its pick is the target's but where rounding tips a close call.
const CopyPrior = 0.9

// Expect replaces the prior, 7 of 10 drafts accepted, by a of 10, and
// returns w.
func (w *Window) Expect(a float64) *Window {
	w.proposed, w.accepted = 10, int(float64(a*10)+0.5)
	return w
}

// Limit tells w the most tokens the request may generate, and returns
// w. A draft model that has not taken in the prompt (or has fallen
// behind) must catch up before it drafts, and w starts it only where the
// target passes it expects to save over those tokens, n·(1 − 1/gain),
// pay for the catch-up, c per token as the probes count it: a short
// request with a dear draft decodes plainly rather than pay the draft's
// prefill and the rounds it takes to learn that the draft does not pay.
// A limit of 0 or less leaves w unlimited.
func (w *Window) Limit(n int) *Window {
	w.left, w.limited = max(n, 0), n > 0
	return w
}

// catchUpPays says whether speculating at gain pays for what the
// proposer has to catch up on first (see Limit): always where nothing is
// behind, the proposer costs nothing, or no limit is known.
func (w *Window) catchUpPays(gain float64) bool {
	if w.behind == 0 || w.cost == 0 || !w.limited {
		return true
	}
	// Explicit conversions: the decision must replay anywhere.
	save := float64(float64(w.left) * float64(1-1/gain))
	return save >= float64(w.cost*float64(w.behind))
}

// Rate is the acceptance estimate: the share of drafts accepted,
// smoothed by the prior and decayed toward recent rounds.
func (w *Window) Rate() float64 { return float64(w.accepted) / float64(w.proposed) }

// Size is the drafts to ask for in the next round; 0 decodes plainly.
func (w *Window) Size() int {
	if w.fixed > 0 {
		return w.fixed
	}
	if w.probing {
		// The last probe drafted nothing, or was never verified.
		w.probeFailed()
	}
	k, gain := w.best()
	if gain > minGain && w.catchUpPays(gain) {
		w.off, w.spent, w.idle, w.gap, w.behind = 0, 0, 0, probeEvery, 0
		if w.judging {
			// best sizes rounds for the drafts' average acceptance; the
			// judge knows each draft's own.
			return w.max
		}
		return k
	}
	k = min(probeSize, w.max)
	// The probe's drafts and rows, and the catch-up: in Size's units,
	// target passes, with explicit conversions so that the decision
	// replays on any platform.
	price := float64(float64(k) * float64(w.cost+w.row))
	if len(w.steps) > 0 {
		price = float64(float64(float64(k)*w.cost) + float64(w.pass(k)-1))
	}
	price = price + float64(w.cost*float64(w.behind)) + w.first
	if w.idle < w.gap || float64(w.spent+price) > float64(probeBudget*float64(w.off)) {
		w.off++
		w.idle++
		w.behind++
		if w.left > 0 {
			w.left--
		}
		return 0
	}
	w.spent += price
	w.idle, w.behind = 0, 0
	w.proposed, w.accepted = max(1, w.proposed/2), w.accepted/2
	w.probing = true
	return k
}

// probeFailed doubles the gap before the next probe.
func (w *Window) probeFailed() {
	w.probing = false
	w.gap = min(2*w.gap, maxProbeGap)
}

// Speculates reports whether w would draft in its next round, without
// counting a round: whether a proposer's prompt work is worth doing
// now. A window that expects no size to pay leaves it to a probe's
// catch-up, which counts it (Prefill).
func (w *Window) Speculates() bool {
	if w.fixed > 0 {
		return true
	}
	_, gain := w.best()
	return gain > minGain && w.catchUpPays(gain)
}

// Starts reports whether w would have a draft model take in a prompt of
// n tokens (Prefill): whether it speculates with the prompt's catch-up
// counted (Limit).
func (w *Window) Starts(n int) bool {
	w.behind += n
	defer func() { w.behind -= n }()
	return w.Speculates()
}

// pass is a window of k drafts' target pass (k+1 rows), in one-token
// passes, where steps were measured (w.steps not empty): its measured
// step, or, past the largest window measured, that step and v a row.
// Without steps, the callers price a window as 1 + k·v in their own
// arithmetic, which the decisions of windows priced by the files'
// sizes (sampled serves, which must replay) were made with.
func (w *Window) pass(k int) float64 {
	if n := len(w.steps); k >= n {
		return float64(w.steps[n-1] + float64(float64(k-n+1)*w.row))
	}
	return w.steps[k]
}

// rowAt is what draft k (from 0) adds to its window's pass: its row (v,
// where no step was measured).
func (w *Window) rowAt(k int) float64 {
	if len(w.steps) == 0 {
		return w.row
	}
	return float64(w.pass(k+1) - w.pass(k))
}

// best is the window size with the largest expected speedup, and that
// speedup: E(k) / (k·c + P(k)), where E(k) = 1 + a + … + a^k is the
// tokens a round of k drafts yields when each stands with probability a
// (the drafts up to the first rejected, and the target's own token), and
// the round costs k drafted tokens and the target's pass over k+1 rows,
// P(k) (pass: 1 + k·v, or the step measured), the next round's
// two-token catch-up where all k stand, and the first step's extra (a
// sampled serve's window carries both in its draft name: u and f).
func (w *Window) best() (int, float64) {
	a := w.Rate()
	bestK, bestGain := 0, 1.0
	e, pow := 1.0, 1.0
	for k := 1; k <= w.max; k++ {
		// Explicit conversions round each product, so no platform fuses
		// them differently (the decision must replay anywhere).
		pow = float64(pow * a)
		e += pow
		den := float64(float64(k)*(w.cost+w.row)) + 1
		if len(w.steps) > 0 {
			den = float64(float64(float64(k)*w.cost) + w.pass(k))
		}
		// A round all of whose drafts stand (a^k) costs the next one's
		// two-token catch-up (zero, which adds exactly nothing, where
		// none is known); every round, its first step's extra.
		den += float64(w.catchUp * pow)
		den += w.first
		if gain := e / den; gain > bestGain {
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
//
// A probe that drafts fewer than asked has failed, whatever the rest
// yields.
func (w *Window) Declined() {
	if w.probing {
		w.probeFailed()
	}
	if w.cost > 0 {
		w.Record(1, 0)
	}
}

// Record counts a round's drafts and how many the target accepted.
func (w *Window) Record(proposed, accepted int) {
	if w.probing {
		if proposed > 0 && accepted == proposed {
			// The text may have turned predictable: look again soon.
			w.probing, w.gap = false, probeEvery
		} else {
			w.probeFailed()
		}
	}
	w.proposed += proposed
	w.accepted += accepted
	if w.proposed >= decayAt {
		w.proposed, w.accepted = w.proposed/2, w.accepted/2
	}
}
