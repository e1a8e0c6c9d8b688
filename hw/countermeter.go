package hw

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ErrSpanClosed is returned by a second Close of the same span.
var ErrSpanClosed = errors.New("hw: span already closed")

// maxPlausibleWatts bounds what a single node can draw; a delta implying
// more is a counter glitch (a missed wrap, a reset), not a measurement.
const maxPlausibleWatts = 10_000

// CounterMeter grades spans by a live [Counter] under the mesh/1 §3.3
// rules. A span is HwShunt only when it is at least the counter's minimum
// window long, both of its readings are good and continuous, the counter
// covers the devices the serve ran on, and the liveness signal of every
// part the serve depends on advanced between them; otherwise it is billed
// by the estimator over its own length and graded Estimator. Every figure
// carries the estimator's figure for the same span.
//
// Only a counter that was seen live and that covers the whole request
// belongs in a CounterMeter; choosing one is the caller's job (see
// hw/meters).
type CounterMeter struct {
	c     Counter
	est   PowerModel
	clock Clock
	log   *slog.Logger
	l     *ledger // every span, so that overlapping ones share (share.go)

	mu     sync.Mutex
	warned map[string]bool
}

// NewCounterMeter returns a meter over c that falls back to est. A nil log
// discards.
func NewCounterMeter(c Counter, est PowerModel, clock Clock, log *slog.Logger) *CounterMeter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CounterMeter{c: c, est: est, clock: clock, log: log, warned: map[string]bool{}, l: &ledger{c: c, est: est, clock: clock}}
}

// Name is the counter's name.
func (m *CounterMeter) Name() string { return m.c.Name() }

// MinWindow is the counter's minimum window.
func (m *CounterMeter) MinWindow() time.Duration { return m.c.MinWindow() }

// Counter returns the counter the meter grades by.
func (m *CounterMeter) Counter() Counter { return m.c }

// Model returns the fallback power model.
func (m *CounterMeter) Model() PowerModel { return m.est }

var _ WorkMeter = (*CounterMeter)(nil)

// Open starts a span for a serve that may have used anything the counter
// reads: every part must advance across it. It reads the counter and
// starts the span's clock after the read, and never fails: a failed read
// leaves a span that the estimator bills.
func (m *CounterMeter) Open() (Span, error) {
	return m.open(m.c.Domains(), true, false), nil
}

// OpenFor starts a span for a serve on uses (zero: [AnyDevice]). A serve
// on a device the counter does not cover is billed by the estimator; the
// parts it does not depend on (a GPU's, for a serve on the CPU) need not
// advance.
func (m *CounterMeter) OpenFor(uses Domain) (Span, error) {
	if uses == 0 {
		uses = AnyDevice
	}
	return m.open(uses, false, false), nil
}

// OpenWork implements WorkMeter: OpenFor, for a serve whose engine reports
// its work, by which the span shares the energy of intervals it overlaps.
func (m *CounterMeter) OpenWork(uses Domain) (WorkSpan, error) {
	if uses == 0 {
		uses = AnyDevice
	}
	return m.open(uses, false, true), nil
}

func (m *CounterMeter) open(uses Domain, every, weighted bool) *counterSpan {
	sh, e := m.l.openShare(weighted)
	return &counterSpan{m: m, sh: sh, uses: uses, every: every, open: e.r, openErr: e.err, start: e.t}
}

type counterSpan struct {
	m       *CounterMeter
	sh      *share
	uses    Domain
	every   bool // every part must advance: the serve's devices are unknown
	open    Reading
	openErr error
	start   time.Time
	closed  bool
}

// AddWork implements WorkRecorder.
func (s *counterSpan) AddWork(units uint64) { s.m.l.addWork(s.sh, units) }

// SoFarUJ implements LiveSpan: the larger of the counter's delta so far
// and the estimator's figure for the time elapsed, or the estimator's
// alone where the delta is no measurement — of the span's share of each,
// where it overlaps others (share.go). Early in a span a counter may show
// a whole update period's energy over a few microseconds, so
// plausibility is judged over at least the counter's window.
func (s *counterSpan) SoFarUJ() uint64 {
	measured, ok, est := s.m.l.soFar(s.sh)
	if s.openErr != nil || !ok {
		return est
	}
	return max(est, measured)
}

// Close stops the span's clock before the closing read, then grades.
func (s *counterSpan) Close() (Energy, error) {
	if s.closed {
		return Energy{}, ErrSpanClosed
	}
	s.closed = true
	m := s.m
	ev := m.l.closeShare(s.sh)
	r, err, d := ev.r, ev.err, ev.t.Sub(s.start)
	est := m.est.UJ(d)
	if s.sh.shared {
		return s.grade(r, err, d, s.sh.est, func() Energy {
			measured := s.sh.measured
			return Modelled(s.sh.est, &measured)
		})
	}
	return s.grade(r, err, d, est, func() Energy { return Measured(r.UJ-s.open.UJ, est) })
}

// grade applies the rules of mesh/1 §3.3 to the span closed at r (err)
// after d: good gives its figure when it passes them, est the
// estimator's figure when it does not.
func (s *counterSpan) grade(r Reading, err error, d time.Duration, est uint64, good func() Energy) (Energy, error) {
	m := s.m

	covers := m.c.Domains()
	var stalled string
	if s.openErr == nil && err == nil {
		stalled = s.stalled(r)
	}
	switch {
	case !covers.Covers(s.uses):
		// The counters chosen at start-up cover what the meter guessed a
		// request uses; a backend on a device it did not see (CUDA with
		// NVML missing) is not in the figure (mesh/1 §3.3).
		m.fallback("uncovered:"+s.uses.String(), "the serve ran on a device the counter does not cover", nil,
			"uses", s.uses.String(), "covers", covers.String())
	case s.openErr != nil:
		m.fallback("open-read", "opening read failed", s.openErr)
	case err != nil:
		m.fallback("close-read", "closing read failed", err)
	case d < m.c.MinWindow():
		// The normal case for a short serve, not a fault: no warning.
		m.log.Debug("span shorter than the counter's window: estimator",
			"counter", m.c.Name(), "span", d, "window", m.c.MinWindow())
	case r.Epoch != s.open.Epoch:
		m.fallback("epoch", "counter lost continuity during the span", nil)
	case stalled != "":
		// Seen live at start-up is not live for ever: a part that did not
		// advance across a whole window has frozen, or its sensor is stuck
		// (whose last value would still be integrated into UJ). A counter
		// that is not live grades nothing (mesh/1 §3.3), and a combined
		// figure is only as live as each part the serve depends on.
		m.fallback("frozen:"+stalled, "a part the serve depends on did not advance during the span", nil, "part", stalled)
	case r.UJ < s.open.UJ:
		m.fallback("backwards", "counter went backwards during the span", nil)
	case float64(r.UJ-s.open.UJ) > maxPlausibleWatts*d.Seconds()*1e6:
		m.fallback("implausible", "counter delta implies an impossible power", nil)
	case s.sh.bad != "":
		// A serve batched with others is billed its shares of each
		// interval it overlapped; one interval without a measurement
		// leaves its share unknown.
		m.fallback("shared:"+s.sh.bad, "an interval the serve shared had no measurement: "+s.sh.bad, nil)
	default:
		return good(), nil
	}
	return Estimated(est), nil
}

// stalled names the first part the serve depends on whose liveness signal
// did not advance from the opening reading to r, or "" when each did. A
// change in the set of parts counts as a stall of the first one missing.
func (s *counterSpan) stalled(r Reading) string {
	open, cur := PartsOf(s.m.c, s.open), PartsOf(s.m.c, r)
	for i, p := range open {
		if !s.every && !Depends(s.uses, p.Domains) {
			continue
		}
		if i >= len(cur) || cur[i].Name != p.Name || cur[i].Live <= p.Live {
			return p.Name
		}
	}
	return ""
}

// fallback logs why a span fell back to the estimator: a warning the first
// time for each kind of reason, debug after that.
func (m *CounterMeter) fallback(kind, msg string, err error, attrs ...any) {
	m.mu.Lock()
	first := !m.warned[kind]
	m.warned[kind] = true
	m.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	attrs = append([]any{"counter", m.c.Name()}, attrs...)
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	m.log.Log(context.Background(), level, "energy span billed by the estimator: "+msg, attrs...)
}
