package hw

import (
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Sharing the machine's energy among overlapping spans
//
// Serves batched together run at once, so their spans overlap, and a
// counter's delta over each would bill every one of them the whole
// machine. So a meter's spans are kept in one ledger: each opening and
// closing of a span reads the counter (the read the span needs anyway)
// and ends an interval, over which the set of open spans did not change.
// The interval's energy — the counter's delta, and the estimator's figure
// for its length — is split among the spans open throughout it:
//
//   - by the work each did in it, where every one of them reports work
//     (opened by WorkMeter.OpenWork for an engine that reports it: the GGUF
//     engine counts each token it evaluates, weighted by the model's
//     weight bytes, at the end of the step that evaluated it), and some
//     was done;
//   - equally otherwise (an engine that reports nothing, or an interval in
//     which no step ended).
//
// The split is in whole microjoules, by largest remainder, so the shares of
// an interval add up to its energy exactly, and the receipts of serves
// that overlapped add up to the counter's delta from the first opening to
// the last closing. A span that was open alone from its opening to its
// closing gets exactly what it would get without the ledger: its own
// delta, graded HwShunt under the window, coverage and liveness rules, or
// the estimator's figure for its length. A span that shared an interval
// gets a share: a measurement apportioned by a rule is a model fed by a
// measurement, so it is graded ModelBased (mesh/1 §3.3), with the share as
// its measured figure, when the span passes the same rules a lone span
// must for HwShunt (its own length at least the window, its devices
// covered, every part it depends on advancing from its opening to its
// closing) and every interval it shared had a good delta (both reads
// succeeded, in one epoch, not backwards, not an impossible power over
// at least the window); else it is Estimator, billed its share of the
// estimator's figures.

// WorkMeter is a Meter whose spans can be told the work their serve did,
// so that overlapping spans split the energy by it (see above).
type WorkMeter interface {
	DeviceMeter
	// OpenWork starts a span for a serve on uses (as OpenFor does) whose
	// engine reports its work to the span (WithWork).
	OpenWork(uses Domain) (WorkSpan, error)
}

// WorkSpan is a span its serve's engine reports work to.
type WorkSpan interface {
	LiveSpan
	WorkRecorder
}

// ledger is the open spans of one meter and the reading that started the
// current interval.
type ledger struct {
	c     Counter // nil: the estimator alone
	est   PowerModel
	clock Clock

	mu      sync.Mutex
	open    []*share // in opening order
	last    Reading
	lastErr error
	lastT   time.Time
}

// share is one span's account in the ledger.
type share struct {
	weighted bool   // its engine reports work
	work     uint64 // reported in the current interval

	shared   bool   // an interval it was in had another span open
	measured uint64 // its shares of the counter's deltas
	bad      string // why a delta it shared is no measurement ("" if none)
	est      uint64 // its shares of the estimator's figures
}

// AddWork implements WorkRecorder.
func (l *ledger) addWork(s *share, units uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.work += units
}

// event is a reading that ends an interval: the counter's (err when it
// failed) at t.
type event struct {
	r   Reading
	err error
	t   time.Time
}

// read takes a reading for an event: with l.mu held, so that events and
// their readings are in one order. closing stops the clock before the
// read, as a closing span's is stopped; an opening span's clock starts
// after it.
func (l *ledger) read(closing bool) event {
	var e event
	if closing {
		e.t = l.clock.Now()
	}
	if l.c != nil {
		e.r, e.err = l.c.Read()
	}
	if !closing {
		e.t = l.clock.Now()
	}
	return e
}

// openShare adds a span at an event of its own, which it returns (its
// opening reading and time).
func (l *ledger) openShare(weighted bool) (*share, event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.read(false)
	l.settle(e.r, e.err, e.t)
	s := &share{weighted: weighted}
	l.open = append(l.open, s)
	return s, e
}

// closeShare removes s at an event of its own, which it returns (the
// closing reading and time); s's account is final.
func (l *ledger) closeShare(s *share) event {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.read(true)
	l.settle(e.r, e.err, e.t)
	if i := slices.Index(l.open, s); i >= 0 {
		l.open = slices.Delete(l.open, i, i+1)
	}
	return e
}

// settle ends the current interval at reading r (err) at t, splitting its
// energy among the open spans, and starts the next.
func (l *ledger) settle(r Reading, err error, t time.Time) {
	if len(l.open) > 0 {
		delta, bad := l.delta(r, err, t)
		weights := l.weights()
		est := splitUJ(l.est.UJ(t.Sub(l.lastT)), weights)
		meas := splitUJ(delta, weights)
		for i, s := range l.open {
			s.est += est[i]
			if bad != "" {
				s.bad = bad
			} else {
				s.measured += meas[i]
			}
			if len(l.open) > 1 {
				s.shared = true
			}
			s.work = 0
		}
	}
	l.last, l.lastErr, l.lastT = r, err, t
}

// delta is the counter's energy over the current interval, ending at r,
// or why it is no measurement.
func (l *ledger) delta(r Reading, err error, t time.Time) (uint64, string) {
	switch {
	case l.c == nil:
		return 0, "no counter"
	case l.lastErr != nil || err != nil:
		return 0, "a read failed"
	case r.Epoch != l.last.Epoch:
		return 0, "the counter lost continuity"
	case r.UJ < l.last.UJ:
		return 0, "the counter went backwards"
	case float64(r.UJ-l.last.UJ) > maxPlausibleWatts*max(t.Sub(l.lastT), l.c.MinWindow()).Seconds()*1e6:
		// Judged over at least the window, as SoFarUJ judges: a short
		// interval may hold a whole update's energy.
		return 0, "the counter's delta implies an impossible power"
	}
	return r.UJ - l.last.UJ, ""
}

// weights are the open spans' weights for the current interval: their
// work where every one reports work and some was done, else 1 each.
func (l *ledger) weights() []uint64 {
	w := make([]uint64, len(l.open))
	var total uint64
	all := true
	for i, s := range l.open {
		w[i] = s.work
		total += s.work
		all = all && s.weighted
	}
	if !all || total == 0 {
		for i := range w {
			w[i] = 1
		}
	}
	return w
}

// soFar is s's energy so far, measured (ok false when there is no
// measurement to give) and estimated: its settled shares plus its share,
// by the work so far, of the interval still open.
func (l *ledger) soFar(s *share) (measured uint64, ok bool, est uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.open, s)
	if i < 0 {
		return s.measured, s.bad == "", s.est
	}
	e := l.read(false)
	weights := l.weights()
	est = s.est + splitUJ(l.est.UJ(e.t.Sub(l.lastT)), weights)[i]
	delta, bad := l.delta(e.r, e.err, e.t)
	if bad != "" || s.bad != "" {
		return 0, false, est
	}
	return s.measured + splitUJ(delta, weights)[i], true, est
}

// splitUJ splits total among weights in proportion, in whole units, by
// largest remainder (ties to the earlier): the parts add up to total.
func splitUJ(total uint64, weights []uint64) []uint64 {
	out := make([]uint64, len(weights))
	var sum uint64
	for _, w := range weights {
		sum += w
	}
	if sum == 0 || total == 0 {
		return out
	}
	rems := make([]uint64, len(weights))
	left := total
	for i, w := range weights {
		// total·w / sum in 128 bits: w ≤ sum, so the quotient fits.
		hi, lo := bits.Mul64(total, w)
		out[i], rems[i] = bits.Div64(hi, lo, sum)
		left -= out[i]
	}
	order := make([]int, len(weights))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rems[a] > rems[b]:
			return -1
		case rems[a] < rems[b]:
			return 1
		}
		return 0
	})
	for _, i := range order[:left] {
		out[i]++
	}
	return out
}
