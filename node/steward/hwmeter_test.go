package steward

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// clockedEngine advances a fake clock by perToken for every token the
// engine emits, so a meter on that clock sees a span of known length.
type clockedEngine struct {
	engine.Engine
	clock    *hwtest.Clock
	perToken time.Duration
}

func (c clockedEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	return c.Engine.Serve(ctx, req, prompt, func(tok uint32) error {
		c.clock.Advance(c.perToken)
		return emit(tok)
	})
}

// TestServeWithHWMeters runs the steward over the hw package's own meters:
// the estimator bills the span's length, a live counter grades a span at
// least its minimum window HwShunt and a shorter one Estimator (§3.3), and
// the receipt carries whichever figure the meter gave.
func TestServeWithHWMeters(t *testing.T) {
	model := hw.PowerModel{Watts: 10, Source: "test"}
	tests := []struct {
		name     string
		meter    func(*hwtest.Clock) hw.Meter
		tokens   uint32
		prov     hw.Provenance
		measured uint64
		estimate uint64
	}{
		{"estimator", func(c *hwtest.Clock) hw.Meter { return hw.NewEstimatorMeter(model, c) },
			16, hw.Estimator, 0, 160_000},
		{"live counter over its window", func(c *hwtest.Clock) hw.Meter {
			return hw.NewCounterMeter(hwtest.NewCounter("rapl", hw.DomainCPU, 10*time.Millisecond, c, 20), model, c, nil)
		}, 16, hw.HwShunt, 320_000, 160_000},
		{"live counter under its window", func(c *hwtest.Clock) hw.Meter {
			return hw.NewCounterMeter(hwtest.NewCounter("rapl", hw.DomainCPU, 10*time.Millisecond, c, 20), model, c, nil)
		}, 4, hw.Estimator, 0, 40_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := hwtest.NewClock(time.Unix(1_800_000_000, 0))
			ref := engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F2, UJPerToken: 1})
			s := newSteward(t, Config{
				Meter:    tt.meter(clock),
				Backends: []Backend{{Name: "cpu", Engine: clockedEngine{ref, clock, time.Millisecond}}},
			})
			// A ceiling the spans fit: the steward stops a serve whose
			// metered energy would pass its ceiling.
			served, err := s.Serve(t.Context(), genRequest(8, tt.tokens, receipt.F1, 1_000_000), promptOf(8), nil)
			if err != nil {
				t.Fatal(err)
			}
			e := served.Receipt.Receipt.Energy
			m, hasM := e.MeasuredUJ()
			if e.Provenance() != tt.prov || e.EstimatedUJ() != tt.estimate || hasM != (tt.measured > 0) || m != tt.measured {
				t.Fatalf("energy %v, want %v measured %d estimated %d", e, tt.prov, tt.measured, tt.estimate)
			}
			if _, err := receipt.Open(served.Receipt.Envelope, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
