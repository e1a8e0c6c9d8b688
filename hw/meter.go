package hw

import "time"

// Meter measures the energy of a span of work. The steward opens a span
// immediately before an engine runs and closes it when the engine returns;
// an engine never reports its own energy.
type Meter interface {
	// Open starts a span. The span is timed from after the opening read.
	Open() (Span, error)
	// MinWindow is the shortest span over which the grading counter's
	// readings are not noise. A shorter span is billed by the estimator and
	// graded Estimator (mesh/1 §3.3).
	MinWindow() time.Duration
	// Name says which counter (or estimator) grades this meter's figures.
	Name() string
}

// Span is one open metering window.
type Span interface {
	// Close ends the span and returns its energy. Close is called once.
	Close() (Energy, error)
}

// LiveSpan is a Span that can say, without closing, how much energy it has
// metered so far, so that a steward can hold a serve to a joule ceiling
// while it runs. Both of this package's meters open live spans.
type LiveSpan interface {
	Span
	// SoFarUJ is the span's energy from its opening to now, in µJ. It errs
	// high, so that a ceiling is enforced early rather than late: the
	// larger of the counter's delta and the estimator's figure for the
	// time elapsed, and the estimator's alone where the counter cannot be
	// read or its delta is not a measurement (a lost epoch, a counter
	// going backwards, an impossible power). It is not graded: only Close
	// says what the span is billed.
	SoFarUJ() uint64
}
