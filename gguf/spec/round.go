package spec

import "context"

// The parts of a speculative round every decoder shares (Generate, the
// GGUF engine's scheduler, a split model's head): drafting, the window
// verified, and what the round keeps.

// Draft asks p for up to k drafts after seq, whose first prompt tokens are
// the prompt, and counts a round that paid for a draft it did not get as
// declined. A Judged proposer drafts under w's rule (judge): each draft is
// weighed by how often drafts of its confidence have stood in this
// request; another proposer drafts as it sees fit, and a round that
// drafted fewer than k counts as declined.
func (w *Window) Draft(ctx context.Context, p Proposer, seq []uint32, prompt, k int) ([]Draft, error) {
	if j, ok := p.(Judged); ok {
		r := w.round()
		drafts, err := j.ProposeJudged(ctx, seq, prompt, k, r.judge)
		if err != nil {
			return nil, err
		}
		if r.declined {
			w.Declined()
		}
		if r.judged {
			w.judging = true
		}
		return w.enough(drafts), nil
	}
	drafts, err := p.Propose(ctx, seq, prompt, k)
	if err != nil {
		return nil, err
	}
	if len(drafts) < k {
		w.Declined()
	}
	return w.enough(drafts), nil
}

// enough is drafts, or none where they are fewer than the request's
// fewest (Bound): such a round decodes plainly, its drafting paid for
// nothing, as a declined draft is counted.
func (w *Window) enough(drafts []Draft) []Draft {
	if len(drafts) > 0 && len(drafts) < w.min {
		w.Declined()
		return nil
	}
	return drafts
}

// judgeRound is one round's rule for a Judged proposer's drafts.
type judgeRound struct {
	w        *Window
	all      bool    // a fixed window: every draft it asks for
	stood    float64 // the probability that every draft so far stands
	taken    int     // drafts proposed so far
	gain     float64 // the speedup the window expects: what a target pass is worth in tokens
	declined bool    // a draft was drafted and not proposed
	judged   bool    // the proposer asked the judge (one with a threshold of its own does not)
}

func (w *Window) round() *judgeRound {
	_, gain := w.best()
	return &judgeRound{w: w, all: w.fixed > 0, stood: 1, gain: max(gain, 1)}
}

// judge weighs the next draft, of confidence conf. With s the probability
// that it and every draft before it stand (the calibration's estimate for
// conf, its prior at least the window's acceptance rate, times the
// drafts' before), proposing it costs a verified row (v target passes,
// or what that row adds to the measured step: Window.rowAt) for s
// tokens, and drafting one more after it costs a drafted token and the
// next row (c + v) for about s·s' tokens, s' its own
// chance, taken to be this one's (confidence runs in stretches). Each is
// done while it yields at least what the window's expected speedup says
// a target pass yields. A round's first draft is proposed whatever its
// estimate while its band has been tested less than calExplore times:
// what a band is worth is learnt only by verifying its drafts, and a
// row is the cheapest way to learn it (a quantised copy of the target,
// unsure of itself, is right as often when unsure).
func (r *judgeRound) judge(conf float64) (take, more bool) {
	r.judged = true
	if r.all {
		return true, true
	}
	w := r.w
	a := w.cal.stands(conf, w.Rate())
	s := float64(r.stood * a)
	if s < float64(w.rowAt(r.taken)*r.gain) && !(r.taken == 0 && w.cal.unexplored(conf)) {
		r.declined = true
		return false, false
	}
	r.stood = s
	r.taken++
	return true, float64(s*a) >= float64(float64(w.cost+w.rowAt(r.taken))*r.gain)
}

// Tokens is the window a round verifies: the token generated last, which
// the target has not evaluated yet, then the drafts.
func Tokens(last uint32, drafts []Draft) []uint32 {
	window := make([]uint32, 0, len(drafts)+1)
	window = append(window, last)
	for _, d := range drafts {
		window = append(window, d.Token)
	}
	return window
}

// Keep records a verified round whose first accepted drafts stood, and
// returns the tokens it yields: those drafts, then the target's next.
func (w *Window) Keep(drafts []Draft, accepted int, next uint32) []uint32 {
	w.Record(len(drafts), accepted)
	w.left = max(0, w.left-accepted-1)
	w.cal.record(drafts, accepted)
	kept := make([]uint32, 0, accepted+1)
	for _, d := range drafts[:accepted] {
		kept = append(kept, d.Token)
	}
	return append(kept, next)
}
