package hw

import (
	"errors"
	"testing"
)

func TestNewEnergyCoupling(t *testing.T) {
	m := uint64(42)
	tests := []struct {
		name     string
		p        Provenance
		measured *uint64
		wantErr  bool
		wantUJ   uint64
	}{
		{"hwshunt with measurement", HwShunt, &m, false, 42},
		{"hwshunt without measurement", HwShunt, nil, true, 0},
		{"estimator without measurement", Estimator, nil, false, 7},
		{"estimator with measurement", Estimator, &m, true, 0},
		{"modelbased with measurement", ModelBased, &m, false, 42},
		{"modelbased without measurement", ModelBased, nil, false, 7},
		{"unknown provenance", Provenance(9), nil, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEnergy(tt.p, tt.measured, 7)
			if tt.wantErr {
				if !errors.Is(err, ErrCoupling) {
					t.Fatalf("NewEnergy error = %v, want ErrCoupling", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewEnergy: %v", err)
			}
			if e.Provenance() != tt.p || e.UJ() != tt.wantUJ || e.EstimatedUJ() != 7 {
				t.Fatalf("got %v (uj %d), want provenance %v uj %d", e, e.UJ(), tt.p, tt.wantUJ)
			}
		})
	}
}

func TestConstructorsHoldCoupling(t *testing.T) {
	if _, ok := Estimated(5).MeasuredUJ(); ok {
		t.Fatal("Estimated carries a measurement")
	}
	if _, ok := Measured(5, 6).MeasuredUJ(); !ok {
		t.Fatal("Measured lacks a measurement")
	}
	var zero Energy
	if zero.Provenance() != Estimator || zero.UJ() != 0 {
		t.Fatalf("zero Energy = %v, want a zero Estimator figure", zero)
	}
}

func TestProvenanceNames(t *testing.T) {
	for _, p := range []Provenance{Estimator, ModelBased, HwShunt} {
		got, err := ParseProvenance(p.String())
		if err != nil || got != p {
			t.Fatalf("ParseProvenance(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParseProvenance("Guess"); err == nil {
		t.Fatal("ParseProvenance accepted an unknown name")
	}
}
