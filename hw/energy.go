package hw

import (
	"errors"
	"fmt"
)

// Provenance grades how an energy figure was obtained (mesh/1 §3.3).
type Provenance uint8

const (
	// Estimator: a modelled figure; no measurement is implied.
	Estimator Provenance = iota
	// ModelBased: derived from a model that may be fed by a measurement.
	ModelBased
	// HwShunt: a hardware reading (a shunt or a live vendor energy
	// counter covering the whole request).
	HwShunt
)

// String returns the name mesh/1 receipts use for p.
func (p Provenance) String() string {
	switch p {
	case Estimator:
		return "Estimator"
	case ModelBased:
		return "ModelBased"
	case HwShunt:
		return "HwShunt"
	}
	return fmt.Sprintf("Provenance(%d)", uint8(p))
}

// ParseProvenance is the inverse of [Provenance.String].
func ParseProvenance(s string) (Provenance, error) {
	switch s {
	case "Estimator":
		return Estimator, nil
	case "ModelBased":
		return ModelBased, nil
	case "HwShunt":
		return HwShunt, nil
	}
	return 0, fmt.Errorf("hw: unknown energy provenance %q", s)
}

// ErrCoupling is returned when an energy figure would break the mesh/1 §3.3
// coupling between provenance and measurement.
var ErrCoupling = errors.New("hw: energy provenance coupling violated")

// Energy is a two-part integer-microjoule record with its provenance.
// The zero value is a zero Estimator figure. Build others with [Measured],
// [Estimated] or [Modelled]; the fields are unexported so that a figure
// that could not be sealed cannot be built.
type Energy struct {
	measured    uint64
	hasMeasured bool
	estimated   uint64
	provenance  Provenance
}

// Measured is a hardware reading (HwShunt) of measuredUJ, with the
// estimator's figure for the same span alongside.
func Measured(measuredUJ, estimatedUJ uint64) Energy {
	return Energy{measured: measuredUJ, hasMeasured: true, estimated: estimatedUJ, provenance: HwShunt}
}

// Estimated is an estimate with no measurement (Estimator).
func Estimated(estimatedUJ uint64) Energy {
	return Energy{estimated: estimatedUJ, provenance: Estimator}
}

// Modelled is a ModelBased figure; measuredUJ may be nil.
func Modelled(estimatedUJ uint64, measuredUJ *uint64) Energy {
	e := Energy{estimated: estimatedUJ, provenance: ModelBased}
	if measuredUJ != nil {
		e.measured, e.hasMeasured = *measuredUJ, true
	}
	return e
}

// NewEnergy builds a figure from its parts, as a decoder does, and refuses
// one that breaks the coupling: HwShunt needs a measurement, Estimator must
// have none.
func NewEnergy(p Provenance, measuredUJ *uint64, estimatedUJ uint64) (Energy, error) {
	switch p {
	case HwShunt:
		if measuredUJ == nil {
			return Energy{}, fmt.Errorf("%w: HwShunt without a measurement", ErrCoupling)
		}
		return Measured(*measuredUJ, estimatedUJ), nil
	case Estimator:
		if measuredUJ != nil {
			return Energy{}, fmt.Errorf("%w: Estimator with a measurement", ErrCoupling)
		}
		return Estimated(estimatedUJ), nil
	case ModelBased:
		return Modelled(estimatedUJ, measuredUJ), nil
	}
	return Energy{}, fmt.Errorf("%w: unknown provenance %d", ErrCoupling, uint8(p))
}

// Provenance returns how the figure was obtained.
func (e Energy) Provenance() Provenance { return e.provenance }

// MeasuredUJ returns the hardware reading, if there is one.
func (e Energy) MeasuredUJ() (uint64, bool) { return e.measured, e.hasMeasured }

// EstimatedUJ returns the estimate, always present.
func (e Energy) EstimatedUJ() uint64 { return e.estimated }

// UJ is energy.uj() of mesh/1 §6.2: the measurement if present, else the
// estimate.
func (e Energy) UJ() uint64 {
	if e.hasMeasured {
		return e.measured
	}
	return e.estimated
}

// String formats the figure for logs.
func (e Energy) String() string {
	if e.hasMeasured {
		return fmt.Sprintf("%d µJ measured (est %d µJ, %s)", e.measured, e.estimated, e.provenance)
	}
	return fmt.Sprintf("%d µJ estimated (%s)", e.estimated, e.provenance)
}
