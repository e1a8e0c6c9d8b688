package hw

import (
	"fmt"
	"math"
	"time"
)

// PowerModel models a node's power draw as a constant. It bills a span its
// own duration times that power, so a short span is never billed zero.
type PowerModel struct {
	// Watts is the modelled power while serving.
	Watts float64 `json:"watts"`
	// Source says where the figure came from ("config", "calibrated ...",
	// "default ..."), for the meters report.
	Source string `json:"source"`
}

// UJ is the modelled energy of a span lasting d, rounded up to whole
// microjoules and at least 1 µJ for any positive span.
func (e PowerModel) UJ(d time.Duration) uint64 {
	if d <= 0 || !(e.Watts > 0) {
		return 0
	}
	uj := math.Ceil(e.Watts * float64(d) / 1e3) // W × ns = nJ; /1e3 = µJ
	if uj >= math.MaxUint64 {
		return math.MaxUint64
	}
	return max(uint64(uj), 1)
}

// String formats the estimator for reports.
func (e PowerModel) String() string {
	if e.Source == "" {
		return fmt.Sprintf("%.1f W", e.Watts)
	}
	return fmt.Sprintf("%.1f W (%s)", e.Watts, e.Source)
}

// EstimatorMeter bills every span by a [PowerModel] and grades it
// Estimator: the honest meter of a node with no live counter.
type EstimatorMeter struct {
	est   PowerModel
	clock Clock
	l     *ledger // every span, so that overlapping ones share (share.go)
}

// NewEstimatorMeter returns a meter that bills by est, timing spans on clock.
func NewEstimatorMeter(est PowerModel, clock Clock) *EstimatorMeter {
	return &EstimatorMeter{est: est, clock: clock, l: &ledger{est: est, clock: clock}}
}

var _ WorkMeter = (*EstimatorMeter)(nil)

// Open starts a span; it never fails.
func (m *EstimatorMeter) Open() (Span, error) { return m.open(false), nil }

// OpenFor implements DeviceMeter: the estimator covers nothing, so the
// devices change nothing.
func (m *EstimatorMeter) OpenFor(Domain) (Span, error) { return m.open(false), nil }

// OpenWork implements WorkMeter: overlapping spans split the estimator's
// figure of each interval by the work their serves report.
func (m *EstimatorMeter) OpenWork(Domain) (WorkSpan, error) { return m.open(true), nil }

func (m *EstimatorMeter) open(weighted bool) *estimatorSpan {
	sh, e := m.l.openShare(weighted)
	return &estimatorSpan{m: m, sh: sh, start: e.t}
}

// MinWindow is zero: an estimate resolves any span length.
func (m *EstimatorMeter) MinWindow() time.Duration { return 0 }

// Name is "estimator".
func (m *EstimatorMeter) Name() string { return "estimator" }

// Model returns the power model the meter bills by.
func (m *EstimatorMeter) Model() PowerModel { return m.est }

type estimatorSpan struct {
	m      *EstimatorMeter
	sh     *share
	start  time.Time
	closed bool
}

// AddWork implements WorkRecorder.
func (s *estimatorSpan) AddWork(units uint64) { s.m.l.addWork(s.sh, units) }

// SoFarUJ implements LiveSpan: the estimate of the time elapsed (the
// span's share of it, where it overlaps others).
func (s *estimatorSpan) SoFarUJ() uint64 {
	_, _, est := s.m.l.soFar(s.sh)
	return est
}

// Close bills the span's length, or its shares where it overlapped others.
func (s *estimatorSpan) Close() (Energy, error) {
	if s.closed {
		return Energy{}, ErrSpanClosed
	}
	s.closed = true
	e := s.m.l.closeShare(s.sh)
	if s.sh.shared {
		return Estimated(s.sh.est), nil
	}
	return Estimated(s.m.est.UJ(e.t.Sub(s.start))), nil
}
