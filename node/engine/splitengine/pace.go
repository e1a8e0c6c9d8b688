package splitengine

import (
	"math"
	"slices"
	"time"

	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// pace watches the serves' decoding steps against the steps the draft's
// prices were measured on (Measure), and says when they have drifted: a
// link whose latency changed, or a stage's node now busy with work of its
// own, changes what a round trip costs against a draft, and so the
// windows worth sending. Guarded by Engine.mu.
type pace struct {
	// base is the median step of each kind the measurement timed; nil
	// until a pipeline is measured (and on a new one), when nothing is
	// watched.
	base map[paceKey]time.Duration
	// drift is the running mean of log(step / base) over the last
	// paceSpan steps or so, seen the steps weighed since the base (or
	// since drift was last reported).
	drift float64
	seen  int
	// gap is the least time between two reports, last the last one's.
	gap  time.Duration
	last time.Time
}

// paceKey is a kind of step: its rows and what the last stage answers.
type paceKey struct {
	want stagewire.Output
	rows int
}

const (
	// paceSpan is the steps the running mean spans (its weight 1/paceSpan
	// on the newest), and the least steps weighed before a report: one
	// slow step (a stage's garbage collection) is not a drift.
	paceSpan = 32
	// paceDrift is the ratio of step to base, either way, that counts as
	// a drift: a third over (or under) its measured time. Four
	// measurements of one pipeline on a busy 2-core machine agreed within
	// 17% (in-process links) and 4% (1 ms links), and serves' steps kept
	// within 10% of them.
	paceDrift = 1.33
	// paceGap is the least time between two reports, and paceMaxGap what
	// it doubles to while measurements find the pipeline as it was (the
	// serves' steps slower for reasons of their own: long contexts).
	paceGap    = time.Minute
	paceMaxGap = time.Hour
)

// measured makes base the steps watched from now on: samples' medians.
// A base within paceDrift of the one it replaces at one row (the
// measurement found the pipeline unchanged) doubles the gap before the
// next report; another resets it.
func (p *pace) measured(samples map[paceKey][]time.Duration) {
	base := make(map[paceKey]time.Duration, len(samples))
	for k, s := range samples {
		if len(s) > 0 {
			s = slices.Clone(s)
			slices.Sort(s)
			base[k] = s[len(s)/2]
		}
	}
	one := paceKey{stagewire.OutToken, 1}
	old, had := p.base[one]
	now, has := base[one]
	switch {
	case p.gap == 0 || !had || !has || math.Abs(math.Log(float64(now)/float64(old))) >= math.Log(paceDrift):
		p.gap = paceGap
	default:
		p.gap = min(2*p.gap, paceMaxGap)
	}
	p.base, p.drift, p.seen = base, 0, 0
}

// reset stops watching until the next measurement: a new pipeline.
func (p *pace) reset() { p.base, p.drift, p.seen = nil, 0, 0 }

// observe weighs a serve's step of kind k that took took, at now, and
// says whether the steps have drifted from the base: paceSpan steps
// weighed, their running mean past paceDrift, and paceGap since the last
// report. After a report it weighs afresh.
func (p *pace) observe(k paceKey, took time.Duration, now time.Time) bool {
	base, ok := p.base[k]
	if !ok || base <= 0 || took <= 0 {
		return false
	}
	x := math.Log(float64(took) / float64(base))
	if p.seen == 0 {
		p.drift = x
	} else {
		p.drift += float64((x - p.drift) / paceSpan)
	}
	p.seen++
	if p.seen < paceSpan || math.Abs(p.drift) < math.Log(paceDrift) || !p.last.IsZero() && now.Sub(p.last) < p.gap {
		return false
	}
	p.last, p.drift, p.seen = now, 0, 0
	return true
}
