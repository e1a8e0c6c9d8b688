package placement

import (
	"math"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
)

// Grade is the provenance grade of an energy figure (docs/meters.md), in
// the order of trust: a figure is only as good as the weakest receipt it
// came from.
type Grade uint8

const (
	// GradeUnknown: the host says nothing about its figures' grade.
	GradeUnknown Grade = iota
	GradeEstimator
	GradeModelBased
	GradeHwShunt
)

// GradeOf is the grade of a receipt's energy provenance.
func GradeOf(p hw.Provenance) Grade {
	switch p {
	case hw.HwShunt:
		return GradeHwShunt
	case hw.ModelBased:
		return GradeModelBased
	case hw.Estimator:
		return GradeEstimator
	}
	return GradeUnknown
}

func (g Grade) String() string {
	switch g {
	case GradeEstimator:
		return "Estimator"
	case GradeModelBased:
		return "ModelBased"
	case GradeHwShunt:
		return "HwShunt"
	}
	return "unknown"
}

// gradeFactor is what a claim of grade g is priced at, relative to a
// hardware reading: a modelled figure may be off either way, and the
// margin (above the herding band) makes a measured claim win over a
// modelled one of equal value.
func gradeFactor(g Grade) float64 {
	switch g {
	case GradeHwShunt:
		return 1
	case GradeModelBased:
		return 1.05
	}
	return 1.2
}

// Sample is one sealed serve as the window records it.
type Sample struct {
	PromptTokens, OutputTokens uint32
	// UJ is the receipt's energy: measured_uj when it has one, else
	// estimated_uj.
	UJ    uint64
	Grade Grade
	// Took is the serve's wall time, for the output rate.
	Took time.Duration
}

// WindowSize is how many recent receipts a model's figures come from.
const WindowSize = 32

// Window holds the last WindowSize serves of one model on this node, and
// turns them into the figures the node gossips.
type Window struct {
	mu      sync.Mutex
	samples [WindowSize]Sample
	n, next int
}

// Add records a serve.
func (w *Window) Add(s Sample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples[w.next] = s
	w.next = (w.next + 1) % WindowSize
	w.n = min(w.n+1, WindowSize)
}

// Energy is µJ per prompt and per output token, in thousandths, over the
// window: the least-squares fit of uj ≈ a·prompt + b·output (both at
// least 0), or one rate for both when the serves' proportions cannot tell
// the two apart. grade is the weakest of the receipts'; n how many there
// are (0: no figures).
func (w *Window) Energy() (promptMilli, outputMilli uint64, grade Grade, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		return 0, 0, GradeUnknown, 0
	}
	var sxx, sxy, syy, sxe, sye, se, st float64
	grade = GradeHwShunt
	for _, s := range w.samples[:w.n] {
		x, y, e := float64(s.PromptTokens), float64(s.OutputTokens), float64(s.UJ)
		sxx += x * x
		sxy += x * y
		syy += y * y
		sxe += x * e
		sye += y * e
		se += e
		st += x + y
		grade = min(grade, s.Grade)
	}
	a, b := fit(sxx, sxy, syy, sxe, sye, se, st)
	return milli(a), milli(b), grade, w.n
}

// fit solves the normal equations of the two-rate fit. It falls back to
// one rate for both (total energy over total tokens) when they are
// degenerate (every serve with the same proportions), and to one rate
// with the other 0 when the unconstrained fit makes one negative.
func fit(sxx, sxy, syy, sxe, sye, se, st float64) (a, b float64) {
	det := sxx*syy - sxy*sxy
	if det > 1e-9*sxx*syy && det > 0 {
		a = (sxe*syy - sye*sxy) / det
		b = (sye*sxx - sxe*sxy) / det
		switch {
		case a >= 0 && b >= 0:
			return a, b
		case a < 0 && syy > 0:
			return 0, max(0, sye/syy)
		case b < 0 && sxx > 0:
			return max(0, sxe/sxx), 0
		}
	}
	if st == 0 {
		return 0, 0
	}
	r := se / st
	return r, r
}

// TokensPerSecondMilli is one generation's output rate over the window,
// in thousandths of a token a second: output tokens over the time their
// serves took (0: none measured).
func (w *Window) TokensPerSecondMilli() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out uint64
	var took time.Duration
	for _, s := range w.samples[:w.n] {
		if s.OutputTokens > 0 && s.Took > 0 {
			out += uint64(s.OutputTokens)
			took += s.Took
		}
	}
	if took <= 0 {
		return 0
	}
	return milli(float64(out) / took.Seconds())
}

// milli is v in thousandths, saturating.
func milli(v float64) uint64 {
	v = math.Round(v * 1000)
	switch {
	case !(v > 0):
		return 0
	case v >= math.MaxUint64:
		return math.MaxUint64
	}
	return uint64(v)
}
