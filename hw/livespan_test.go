package hw_test

import (
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

// soFar opens a span on m, lets d pass and reads it without closing it.
func soFar(t *testing.T, m hw.Meter, clk *hwtest.Clock, d time.Duration) (uint64, hw.Span) {
	t.Helper()
	s, err := m.Open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	live, ok := s.(hw.LiveSpan)
	if !ok {
		t.Fatalf("%s opens a %T, which cannot be read while open", m.Name(), s)
	}
	clk.Advance(d)
	return live.SoFarUJ(), s
}

// TestLiveSpanErrsHigh: a counter span read while open gives the larger of
// the counter's delta and the estimator's figure, the estimator's where
// the counter's delta is no measurement, and never ends the span.
func TestLiveSpanErrsHigh(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		watts  float64 // the counter's
		during func(c *hwtest.Counter)
		want   uint64 // over 20 ms, the estimator at 10 W
	}{
		{"counter above the estimator", 30, nil, 600_000},
		{"estimator above the counter", 5, nil, 200_000},
		{"counter read fails", 30, func(c *hwtest.Counter) { c.Fail(boom) }, 200_000},
		{"counter reset", 30, func(c *hwtest.Counter) { c.Reset() }, 200_000},
		{"impossible power", 30, func(c *hwtest.Counter) { c.SetWatts(1e9) }, 200_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := hwtest.NewClock(epoch)
			c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, tt.watts)
			m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
			s, err := m.Open()
			if err != nil {
				t.Fatal(err)
			}
			if tt.during != nil {
				tt.during(c)
			}
			clk.Advance(20 * time.Millisecond)
			if got := s.(hw.LiveSpan).SoFarUJ(); got != tt.want {
				t.Errorf("SoFarUJ after 20 ms = %d µJ, want %d", got, tt.want)
			}
			c.Fail(nil)
			if _, err := s.Close(); err != nil {
				t.Errorf("Close after SoFarUJ: %v", err)
			}
		})
	}
	t.Run("opening read failed", func(t *testing.T) {
		clk := hwtest.NewClock(epoch)
		c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30)
		m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
		c.Fail(boom)
		s, err := m.Open()
		if err != nil {
			t.Fatal(err)
		}
		c.Fail(nil) // readable again, but the span has nothing to take a delta from
		clk.Advance(20 * time.Millisecond)
		if got := s.(hw.LiveSpan).SoFarUJ(); got != 200_000 {
			t.Errorf("SoFarUJ = %d, want the estimator's 200000", got)
		}
	})
}

// TestEstimatorLiveSpan: an estimator span read while open bills the time
// so far, and closing it later bills the whole span.
func TestEstimatorLiveSpan(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	m := hw.NewEstimatorMeter(hw.PowerModel{Watts: 10}, clk)
	got, s := soFar(t, m, clk, 20*time.Millisecond)
	if got != 200_000 {
		t.Fatalf("SoFarUJ after 20 ms at 10 W = %d, want 200000", got)
	}
	clk.Advance(10 * time.Millisecond)
	e, err := s.Close()
	if err != nil || e.UJ() != 300_000 {
		t.Fatalf("Close after 30 ms: %v %v, want 300000 µJ", e, err)
	}
}
