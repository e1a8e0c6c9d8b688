package hw_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// serve opens a span, lets d pass and closes it.
func serve(t *testing.T, m hw.Meter, clk *hwtest.Clock, d time.Duration) hw.Energy {
	t.Helper()
	s, err := m.Open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	clk.Advance(d)
	e, err := s.Close()
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	return e
}

func TestCounterMeterWindowRule(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, 50*time.Millisecond, clk, 30) // 30 W measured
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)             // 10 W modelled

	tests := []struct {
		span         time.Duration
		wantGrade    hw.Provenance
		wantUJ       uint64
		wantEstimate uint64
	}{
		// 20 ms under a 50 ms floor: Estimator at the estimator's figure.
		{20 * time.Millisecond, hw.Estimator, 200_000, 200_000},
		// 60 ms: the counter's figure (30 W × 60 ms) and grade.
		{60 * time.Millisecond, hw.HwShunt, 1_800_000, 600_000},
		// Exactly the window is long enough.
		{50 * time.Millisecond, hw.HwShunt, 1_500_000, 500_000},
	}
	for _, tt := range tests {
		e := serve(t, m, clk, tt.span)
		if e.Provenance() != tt.wantGrade || e.UJ() != tt.wantUJ || e.EstimatedUJ() != tt.wantEstimate {
			t.Errorf("span %v: got %v, want %v of %d µJ (est %d)", tt.span, e, tt.wantGrade, tt.wantUJ, tt.wantEstimate)
		}
		if _, has := e.MeasuredUJ(); has != (tt.wantGrade == hw.HwShunt) {
			t.Errorf("span %v: measurement present = %v under grade %v", tt.span, has, tt.wantGrade)
		}
	}
}

func TestCounterMeterFallsBackOnFaults(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		during func(c *hwtest.Counter)
		before func(c *hwtest.Counter)
	}{
		{"opening read fails", nil, func(c *hwtest.Counter) { c.Fail(boom) }},
		{"closing read fails", func(c *hwtest.Counter) { c.Fail(boom) }, nil},
		{"counter reset during the span", func(c *hwtest.Counter) { c.Reset() }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := hwtest.NewClock(epoch)
			c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30)
			m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
			if tt.before != nil {
				tt.before(c)
			}
			s, err := m.Open()
			if err != nil {
				t.Fatalf("Open must not fail on a bad counter: %v", err)
			}
			if tt.before != nil {
				c.Fail(nil)
			}
			clk.Advance(100 * time.Millisecond)
			if tt.during != nil {
				tt.during(c)
			}
			e, err := s.Close()
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			if e.Provenance() != hw.Estimator || e.UJ() != 1_000_000 {
				t.Fatalf("got %v, want the estimator's 1000000 µJ graded Estimator", e)
			}
		})
	}
}

// stuckSensor is a counter whose energy goes on advancing while its
// liveness signal does not: a sensor stuck on its last value, which the
// sampler still integrates.
type stuckSensor struct {
	*hwtest.Counter
	live uint64
}

func (s stuckSensor) Read() (hw.Reading, error) {
	r, err := s.Counter.Read()
	r.Live = s.live
	return r, err
}

// TestCounterMeterNeedsLiveSignal: a counter proved live at start-up that
// stops advancing later grades nothing, even over a span longer than its
// window (§3.3: a counter that is not live produces no hardware figure).
func TestCounterMeterNeedsLiveSignal(t *testing.T) {
	tests := []struct {
		name    string
		counter func(c *hwtest.Counter) hw.Counter
		grade   hw.Provenance
		uj      uint64
	}{
		{"live", func(c *hwtest.Counter) hw.Counter { return c }, hw.HwShunt, 3_000_000},
		{"frozen since before the span", func(c *hwtest.Counter) hw.Counter { c.Freeze(); return c }, hw.Estimator, 1_000_000},
		{"stuck sensor, energy still integrated", func(c *hwtest.Counter) hw.Counter { return stuckSensor{c, 7} }, hw.Estimator, 1_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := hwtest.NewClock(epoch)
			c := tt.counter(hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30))
			m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
			if e := serve(t, m, clk, 100*time.Millisecond); e.Provenance() != tt.grade || e.UJ() != tt.uj {
				t.Fatalf("got %v, want %d µJ graded %v", e, tt.uj, tt.grade)
			}
		})
	}
}

func TestCounterMeterRejectsImplausibleDelta(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 50_000) // 50 kW: a glitch
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
	if e := serve(t, m, clk, time.Second); e.Provenance() != hw.Estimator {
		t.Fatalf("a 50 kW delta was graded %v", e)
	}
}

func TestSpanClosesOnce(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30)
	for _, m := range []hw.Meter{
		hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil),
		hw.NewEstimatorMeter(hw.PowerModel{Watts: 10}, clk),
	} {
		s, _ := m.Open()
		if _, err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Close(); !errors.Is(err, hw.ErrSpanClosed) {
			t.Fatalf("%s: second Close = %v, want ErrSpanClosed", m.Name(), err)
		}
	}
}

func TestEstimatorMeter(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	m := hw.NewEstimatorMeter(hw.PowerModel{Watts: 12.5}, clk)
	if m.MinWindow() != 0 || m.Name() != "estimator" {
		t.Fatalf("estimator meter: window %v name %q", m.MinWindow(), m.Name())
	}
	e := serve(t, m, clk, 2*time.Second)
	if e.Provenance() != hw.Estimator || e.UJ() != 25_000_000 {
		t.Fatalf("got %v, want 25000000 µJ Estimator", e)
	}
	if _, has := e.MeasuredUJ(); has {
		t.Fatal("an estimate carries a measurement")
	}
}

func TestPowerModelUJ(t *testing.T) {
	tests := []struct {
		watts float64
		d     time.Duration
		want  uint64
	}{
		{10, time.Second, 10_000_000},
		{10, 20 * time.Millisecond, 200_000},
		{15, time.Nanosecond, 1},       // never zero for a positive span
		{0.001, time.Microsecond, 1},   // rounds up, never down to zero
		{2.5, 3 * time.Microsecond, 8}, // 7.5 µJ rounds up
		{10, 0, 0},                     // no span, no energy
		{0, time.Second, 0},            // no model, no energy
		{1e30, time.Hour, 1<<64 - 1},   // saturates
	}
	for _, tt := range tests {
		if got := (hw.PowerModel{Watts: tt.watts}).UJ(tt.d); got != tt.want {
			t.Errorf("PowerModel{%v W}.UJ(%v) = %d, want %d", tt.watts, tt.d, got, tt.want)
		}
	}
}

func TestCombine(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	cpu := hwtest.NewCounter("rapl", hw.DomainCPU|hw.DomainDRAM, 10*time.Millisecond, clk, 20)
	gpu := hwtest.NewCounter("nvml", hw.DomainGPU, 100*time.Millisecond, clk, 100)
	c := hw.Combine(cpu, gpu)
	if c.Name() != "rapl+nvml" || c.MinWindow() != 100*time.Millisecond || c.Domains() != hw.DomainCPU|hw.DomainGPU|hw.DomainDRAM {
		t.Fatalf("combined: name %q window %v domains %v", c.Name(), c.MinWindow(), c.Domains())
	}
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 50}, clk, nil)
	if e := serve(t, m, clk, 50*time.Millisecond); e.Provenance() != hw.Estimator {
		t.Fatalf("50 ms under the combined 100 ms window graded %v", e)
	}
	if e := serve(t, m, clk, 200*time.Millisecond); e.Provenance() != hw.HwShunt || e.UJ() != 24_000_000 {
		t.Fatalf("200 ms span: got %v, want 24000000 µJ HwShunt (120 W × 0.2 s)", e)
	}
	gpu.Fail(errors.New("gpu lost"))
	if _, err := c.Read(); err == nil {
		t.Fatal("a combined read succeeded with a failing part")
	}
	if hw.Combine(cpu) != hw.Counter(cpu) {
		t.Fatal("Combine of one counter is not that counter")
	}
}

func TestDomain(t *testing.T) {
	tests := []struct {
		have, need hw.Domain
		covers     bool
	}{
		{hw.DomainCPU, hw.DomainCPU, true},
		{hw.DomainGPU, hw.DomainCPU | hw.DomainGPU, false},
		{hw.DomainCPU | hw.DomainDRAM, hw.DomainCPU | hw.DomainGPU, false},
		{hw.DomainCPU | hw.DomainGPU | hw.DomainDRAM, hw.DomainCPU | hw.DomainGPU, true},
		{hw.DomainModule, hw.DomainCPU | hw.DomainGPU, true},
	}
	for _, tt := range tests {
		if got := tt.have.Covers(tt.need); got != tt.covers {
			t.Errorf("%v.Covers(%v) = %v", tt.have, tt.need, got)
		}
	}
	for _, d := range []hw.Domain{0, hw.DomainCPU, hw.DomainCPU | hw.DomainGPU | hw.DomainANE, hw.DomainModule | hw.DomainDRAM} {
		got, err := hw.ParseDomain(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDomain(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := hw.ParseDomain("cpu+tpu"); err == nil {
		t.Error("ParseDomain accepted tpu")
	}
}

// TestCombinedPartFrozen: a combined counter is only as live as each part
// a serve depends on. With the GPU part frozen, RAPL still advances, so
// summing the parts' signals would have graded the CPU's energy alone
// HwShunt (issue #17 item 1).
func TestCombinedPartFrozen(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	cpu := hwtest.NewCounter("rapl", hw.DomainCPU|hw.DomainDRAM, 10*time.Millisecond, clk, 45)
	gpu := hwtest.NewCounter("nvml", hw.DomainGPU, 100*time.Millisecond, clk, 70)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m := hw.NewCounterMeter(hw.Combine(cpu, gpu), hw.PowerModel{Watts: 115}, clk, log)
	r, err := m.Counter().Read()
	if err != nil || len(r.Parts) != 2 || r.Parts[0].Name != "rapl" || r.Parts[1].Name != "nvml" || r.Parts[1].Domains != hw.DomainGPU {
		t.Fatalf("combined reading %+v, %v: want one part per counter", r, err)
	}
	gpu.Freeze()
	open := func(uses hw.Domain) hw.Energy {
		s, err := m.OpenFor(uses)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		e, err := s.Close()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, tt := range []struct {
		name  string
		e     hw.Energy
		grade hw.Provenance
		uj    uint64
	}{
		{"Open: every part", serve(t, m, clk, time.Second), hw.Estimator, 115_000_000},
		{"a GPU serve", open(hw.DomainCPU | hw.DomainGPU), hw.Estimator, 115_000_000},
		{"a serve that does not say", open(0), hw.Estimator, 115_000_000},
		// The GPU is not in this serve: the figure needs only the CPU's
		// parts live (the frozen GPU adds nothing to it).
		{"a CPU serve", open(hw.DomainCPU), hw.HwShunt, 45_000_000},
	} {
		if tt.e.Provenance() != tt.grade || tt.e.UJ() != tt.uj {
			t.Errorf("%s: %v, want %d µJ %v", tt.name, tt.e, tt.uj, tt.grade)
		}
	}
	// One warning for the frozen part, said once; one for the serve that
	// did not say, which may have used a device (the ANE) nothing reads.
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 || strings.Count(logs.String(), "part=nvml") != 1 ||
		!strings.Contains(logs.String(), "uses=cpu+gpu+ane covers=cpu+gpu+dram") {
		t.Fatalf("want one warning naming the frozen part and one for the undeclared serve, got:\n%s", logs.String())
	}
}

// TestCounterMeterCoverage: a serve is graded by the devices it ran on.
// A counter that covers the CPU grades a CPU serve, and bills a serve on a
// GPU it does not read by the estimator, warning once (issue #17 item 2).
func TestCounterMeterCoverage(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("rapl", hw.DomainCPU|hw.DomainDRAM, 10*time.Millisecond, clk, 30)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, log)
	var dm hw.DeviceMeter = m
	for _, tt := range []struct {
		uses  hw.Domain
		grade hw.Provenance
		uj    uint64
	}{
		{hw.DomainCPU, hw.HwShunt, 3_000_000},
		{hw.DomainCPU | hw.DomainGPU, hw.Estimator, 1_000_000},
		{hw.DomainCPU | hw.DomainGPU, hw.Estimator, 1_000_000},
		{0, hw.Estimator, 1_000_000}, // unknown: anything
	} {
		s, _ := dm.OpenFor(tt.uses)
		clk.Advance(100 * time.Millisecond)
		e, err := s.Close()
		if err != nil || e.Provenance() != tt.grade || e.UJ() != tt.uj {
			t.Errorf("a serve on %v: %v, %v; want %d µJ %v", tt.uses, e, err, tt.uj, tt.grade)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 2 || !strings.Contains(logs.String(), "uses=cpu+gpu covers=cpu+dram") {
		t.Fatalf("want one warning per uncovered device set, got:\n%s", logs.String())
	}
}

func TestDepends(t *testing.T) {
	tests := []struct {
		uses, part hw.Domain
		want       bool
	}{
		{hw.DomainCPU, hw.DomainCPU, true},
		{hw.DomainCPU, hw.DomainGPU, false},
		{hw.DomainCPU, hw.DomainDRAM, true}, // every serve goes through memory
		{hw.DomainCPU | hw.DomainGPU, hw.DomainGPU, true},
		{hw.DomainCPU, hw.DomainModule, true},
		{0, hw.DomainGPU, true}, // unknown: anything
		{0, hw.DomainANE, true},
	}
	for _, tt := range tests {
		if got := hw.Depends(tt.uses, tt.part); got != tt.want {
			t.Errorf("Depends(%v, %v) = %v", tt.uses, tt.part, got)
		}
	}
}
