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
