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

// Devices passes on where the wrapped engine runs.
func (c clockedEngine) Devices() hw.Domain { return engine.DevicesOf(c.Engine) }

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

// onDevices is an engine that says which devices it runs on, as the GGUF
// engine does for its backend.
type onDevices struct {
	engine.Engine
	devices hw.Domain
}

func (e onDevices) Devices() hw.Domain { return e.devices }

// recordingMeter records the devices each span was opened for.
type recordingMeter struct {
	*hw.CounterMeter
	uses []hw.Domain
}

func (m *recordingMeter) OpenFor(uses hw.Domain) (hw.Span, error) {
	m.uses = append(m.uses, uses)
	return m.CounterMeter.OpenFor(uses)
}

// TestServeGradedByBackendDevices: the devices a backend runs on reach the
// meter with each serve, and a serve on a device no counter covers is
// graded Estimator (issue #17 item 2: CUDA with NVML missing, where the
// meter's start-up guess saw only the CPU).
func TestServeGradedByBackendDevices(t *testing.T) {
	model := hw.PowerModel{Watts: 10, Source: "test"}
	rapl := func(c *hwtest.Clock) hw.Counter {
		return hwtest.NewCounter("rapl", hw.DomainCPU|hw.DomainDRAM, 10*time.Millisecond, c, 20)
	}
	raplNVML := func(c *hwtest.Clock) hw.Counter {
		return hw.Combine(rapl(c), hwtest.NewCounter("nvml", hw.DomainGPU, 10*time.Millisecond, c, 70))
	}
	tests := []struct {
		name     string
		counter  func(*hwtest.Clock) hw.Counter
		wrap     func(engine.Engine) engine.Engine
		uses     hw.Domain
		prov     hw.Provenance
		measured uint64
	}{
		{"cpu backend, RAPL", rapl, func(e engine.Engine) engine.Engine { return onDevices{e, hw.DomainCPU} },
			hw.DomainCPU, hw.HwShunt, 320_000},
		{"cuda backend, RAPL alone (NVML missing)", rapl, func(e engine.Engine) engine.Engine { return onDevices{e, hw.DomainCPU | hw.DomainGPU} },
			hw.DomainCPU | hw.DomainGPU, hw.Estimator, 0},
		{"cuda backend, RAPL and NVML", raplNVML, func(e engine.Engine) engine.Engine { return onDevices{e, hw.DomainCPU | hw.DomainGPU} },
			hw.DomainCPU | hw.DomainGPU, hw.HwShunt, 1_440_000},
		{"the reference engine: the CPU", rapl, func(e engine.Engine) engine.Engine { return e },
			hw.DomainCPU, hw.HwShunt, 320_000},
		{"an engine that does not say", raplNVML, func(e engine.Engine) engine.Engine { return struct{ engine.Engine }{e} },
			hw.AnyDevice, hw.Estimator, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := hwtest.NewClock(time.Unix(1_800_000_000, 0))
			m := &recordingMeter{CounterMeter: hw.NewCounterMeter(tt.counter(clock), model, clock, nil)}
			ref := engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F2, UJPerToken: 1})
			s := newSteward(t, Config{
				Meter:    m,
				Backends: []Backend{{Name: "gpu", Engine: tt.wrap(clockedEngine{ref, clock, time.Millisecond})}},
			})
			// A ceiling far above the work: the grade, not the ceiling, is tested.
			served, err := s.Serve(t.Context(), genRequest(8, 16, receipt.F1, 100_000_000), promptOf(8), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.uses) != 1 || m.uses[0] != tt.uses {
				t.Fatalf("the meter was opened for %v, want once for %v", m.uses, tt.uses)
			}
			e := served.Receipt.Receipt.Energy
			got, hasM := e.MeasuredUJ()
			if e.Provenance() != tt.prov || hasM != (tt.measured > 0) || got != tt.measured || e.EstimatedUJ() != 160_000 {
				t.Fatalf("energy %v, want %v measured %d", e, tt.prov, tt.measured)
			}
		})
	}
}
