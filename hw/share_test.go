package hw_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

// near reports whether got is want within tol µJ (the fake counter
// truncates each reading to whole µJ).
func near(got, want, tol uint64) bool {
	return got+tol >= want && got <= want+tol
}

func measured(t *testing.T, e hw.Energy) uint64 {
	t.Helper()
	m, ok := e.MeasuredUJ()
	if !ok {
		t.Fatalf("%v has no measurement", e)
	}
	return m
}

// TestSharedSpansSumToTheMeter: three serves whose spans overlap split each
// interval's energy — by the work reported where every open span reports
// work, equally where one does not — and their figures add up to the
// counter's delta from the first opening to the last closing, exactly, as
// their estimates add up to the estimator's figures of the intervals.
// Each is ModelBased: a measurement apportioned by a rule.
func TestSharedSpansSumToTheMeter(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30) // 30 µJ a ms
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
	first, _ := c.Read()
	const ms = time.Millisecond

	a, _ := m.OpenWork(hw.DomainCPU)
	clk.Advance(100 * ms) // [0, 100]: a alone
	b, _ := m.OpenWork(hw.DomainCPU)
	a.AddWork(1)
	clk.Advance(200 * ms) // [100, 300]: work 1 : 3
	b.AddWork(3)
	cs, _ := m.OpenFor(hw.DomainCPU) // an engine that reports no work
	a.AddWork(5)
	b.AddWork(5)
	clk.Advance(100 * ms) // [300, 400]: equal thirds, c reports nothing
	ea, _ := a.Close()
	b.AddWork(2)
	clk.Advance(100 * ms) // [400, 500]: halves
	eb, _ := b.Close()
	clk.Advance(100 * ms) // [500, 600]: c alone
	ec, _ := cs.Close()
	last, _ := c.Read()

	for _, tc := range []struct {
		name      string
		e         hw.Energy
		want, est uint64
	}{
		{"a", ea, 3_000_000 + 1_500_000 + 1_000_000, 1_000_000 + 500_000 + 333_334},
		{"b", eb, 4_500_000 + 1_000_000 + 1_500_000, 1_500_000 + 333_333 + 500_000},
		{"c", ec, 1_000_000 + 1_500_000 + 3_000_000, 333_333 + 500_000 + 1_000_000},
	} {
		if tc.e.Provenance() != hw.ModelBased || !near(measured(t, tc.e), tc.want, 2) || tc.e.EstimatedUJ() != tc.est {
			t.Errorf("%s: %v, want ModelBased %d µJ (est %d)", tc.name, tc.e, tc.want, tc.est)
		}
	}
	if sum := measured(t, ea) + measured(t, eb) + measured(t, ec); sum != last.UJ-first.UJ {
		t.Errorf("the receipts add up to %d µJ, the counter measured %d", sum, last.UJ-first.UJ)
	}
	if sum := ea.EstimatedUJ() + eb.EstimatedUJ() + ec.EstimatedUJ(); sum != 6_000_000 {
		t.Errorf("the estimates add up to %d µJ, want 10 W × 600 ms", sum)
	}
}

// TestSharedSpansRandomSum: random arrivals, work and lengths; the figures
// of the serves that overlapped add up to the counter's delta exactly.
func TestSharedSpansRandomSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 4))
	for round := range 20 {
		clk := hwtest.NewClock(epoch)
		c := hwtest.NewCounter("fake", hw.DomainCPU, time.Millisecond, clk, 7+rng.Float64()*40)
		m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 13}, clk, nil)
		start, _ := c.Read()
		var open []hw.WorkSpan
		var sum uint64
		for opened := 0; opened < 12 || len(open) > 0; {
			switch {
			case opened < 12 && (len(open) == 0 || rng.IntN(3) == 0):
				s, _ := m.OpenWork(hw.DomainCPU)
				open = append(open, s)
				opened++
			case rng.IntN(2) == 0:
				i := rng.IntN(len(open))
				clk.Advance(time.Millisecond) // every span at least the window
				e, err := open[i].Close()
				if err != nil {
					t.Fatal(err)
				}
				sum += e.UJ()
				if e.Provenance() == hw.Estimator {
					t.Fatalf("round %d: a serve was graded %v", round, e)
				}
				open = append(open[:i], open[i+1:]...)
			default:
				for _, s := range open {
					s.AddWork(uint64(rng.IntN(1000)))
				}
				clk.Advance(time.Duration(1+rng.IntN(40)) * time.Millisecond)
			}
		}
		end, _ := c.Read()
		if sum != end.UJ-start.UJ {
			t.Fatalf("round %d: the receipts add up to %d µJ, the counter measured %d", round, sum, end.UJ-start.UJ)
		}
	}
}

// TestLoneSpanAsBefore: a serve alone from its opening to its closing gets
// its own delta, HwShunt, and its own estimate, even when others came
// before and after it.
func TestLoneSpanAsBefore(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30)
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
	x, _ := m.OpenWork(hw.DomainCPU)
	y, _ := m.OpenWork(hw.DomainCPU)
	clk.Advance(50 * time.Millisecond)
	x.Close()
	y.Close()
	s, _ := m.OpenWork(hw.DomainCPU)
	s.AddWork(10)
	clk.Advance(37 * time.Millisecond)
	e, _ := s.Close()
	if e.Provenance() != hw.HwShunt || !near(measured(t, e), 1_110_000, 1) || e.EstimatedUJ() != 370_000 {
		t.Errorf("a lone serve: %v, want HwShunt 1110000 µJ (est 370000)", e)
	}
}

// TestSharedSpanGradeRules: a shared figure is ModelBased only under the
// rules a lone one needs for HwShunt, judged per serve: its own span at
// least the window, its devices covered, its parts advancing across its
// own span, and a good delta in every interval it shared; otherwise it is
// Estimator, billed its share of the estimates.
func TestSharedSpanGradeRules(t *testing.T) {
	const ms = time.Millisecond
	boom := errors.New("boom")
	t.Run("short span", func(t *testing.T) {
		clk := hwtest.NewClock(epoch)
		c := hwtest.NewCounter("fake", hw.DomainCPU, 50*ms, clk, 30)
		m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
		long, _ := m.OpenWork(hw.DomainCPU)
		clk.Advance(40 * ms)
		short, _ := m.OpenWork(hw.DomainCPU)
		clk.Advance(20 * ms) // equal halves: no work reported
		es, _ := short.Close()
		clk.Advance(40 * ms)
		el, _ := long.Close()
		if es.Provenance() != hw.Estimator || es.EstimatedUJ() != 100_000 {
			t.Errorf("a 20 ms serve under a 50 ms window: %v, want Estimator at half of 20 ms at 10 W", es)
		}
		if el.Provenance() != hw.ModelBased || !near(measured(t, el), 2_700_000, 2) {
			t.Errorf("the 100 ms serve beside it: %v, want ModelBased 2700000", el)
		}
	})
	t.Run("uncovered device", func(t *testing.T) {
		clk := hwtest.NewClock(epoch)
		c := hwtest.NewCounter("fake", hw.DomainCPU, 10*ms, clk, 30)
		m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
		cpu, _ := m.OpenWork(hw.DomainCPU)
		gpu, _ := m.OpenWork(hw.DomainCPU | hw.DomainGPU)
		clk.Advance(100 * ms)
		eg, _ := gpu.Close()
		ec, _ := cpu.Close()
		if eg.Provenance() != hw.Estimator || ec.Provenance() != hw.ModelBased {
			t.Errorf("GPU serve %v (want Estimator), CPU serve %v (want ModelBased)", eg, ec)
		}
	})
	t.Run("a read fails in a shared interval", func(t *testing.T) {
		clk := hwtest.NewClock(epoch)
		c := hwtest.NewCounter("fake", hw.DomainCPU, 10*ms, clk, 30)
		m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
		a, _ := m.OpenWork(hw.DomainCPU)
		clk.Advance(20 * ms)
		c.Fail(boom)
		b, _ := m.OpenWork(hw.DomainCPU) // its opening read fails
		c.Fail(nil)
		clk.Advance(20 * ms)
		eb, _ := b.Close()
		clk.Advance(20 * ms)
		ea, _ := a.Close()
		if ea.Provenance() != hw.Estimator || eb.Provenance() != hw.Estimator {
			t.Errorf("serves sharing an interval with no measurement: %v, %v; want Estimator", ea, eb)
		}
		lone, _ := m.OpenWork(hw.DomainCPU)
		clk.Advance(20 * ms)
		if e, _ := lone.Close(); e.Provenance() != hw.HwShunt {
			t.Errorf("a lone serve after them: %v, want HwShunt", e)
		}
	})
	t.Run("frozen", func(t *testing.T) {
		clk := hwtest.NewClock(epoch)
		c := hwtest.NewCounter("fake", hw.DomainCPU, 10*ms, clk, 30)
		m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
		a, _ := m.OpenWork(hw.DomainCPU)
		clk.Advance(20 * ms)
		b, _ := m.OpenWork(hw.DomainCPU)
		c.Freeze()
		clk.Advance(20 * ms)
		eb, _ := b.Close()
		ea, _ := a.Close()
		if eb.Provenance() != hw.Estimator {
			t.Errorf("a serve across which the counter froze: %v, want Estimator", eb)
		}
		if ea.Provenance() != hw.ModelBased {
			t.Errorf("a serve across which it advanced (before freezing): %v, want ModelBased", ea)
		}
	})
}

// TestSharedLiveSpans: read while open, overlapping spans give their
// shares so far, which add up to no less than the counter's delta (the
// joule ceiling of each serve is held to its own share).
func TestSharedLiveSpans(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, 10*time.Millisecond, clk, 30)
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
	a, _ := m.OpenWork(hw.DomainCPU)
	b, _ := m.OpenWork(hw.DomainCPU)
	a.AddWork(1)
	b.AddWork(3)
	clk.Advance(100 * time.Millisecond)
	sa, sb := a.SoFarUJ(), b.SoFarUJ()
	if !near(sa, 750_000, 2) || !near(sb, 2_250_000, 2) {
		t.Errorf("so far: %d and %d µJ, want a quarter and three of 3000000", sa, sb)
	}
	ea, _ := a.Close()
	eb, _ := b.Close()
	if !near(ea.UJ(), 750_000, 2) || !near(eb.UJ(), 2_250_000, 2) {
		t.Errorf("closed: %v, %v", ea, eb)
	}
}

// TestSharedEstimatorSpans: on the estimator, overlapping serves split
// each interval's estimate, adding up to the estimate of their union; a
// lone serve is billed its own length.
func TestSharedEstimatorSpans(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	m := hw.NewEstimatorMeter(hw.PowerModel{Watts: 10}, clk)
	a, _ := m.OpenWork(hw.DomainCPU)
	clk.Advance(10 * time.Millisecond)
	b, _ := m.OpenWork(hw.DomainCPU)
	a.AddWork(1)
	b.AddWork(1)
	clk.Advance(10 * time.Millisecond)
	ea, _ := a.Close()
	clk.Advance(10 * time.Millisecond)
	eb, _ := b.Close()
	if ea.UJ() != 150_000 || eb.UJ() != 150_000 || ea.Provenance() != hw.Estimator || eb.Provenance() != hw.Estimator {
		t.Errorf("%v and %v, want 150000 µJ each, Estimator", ea, eb)
	}
	s, _ := m.Open()
	clk.Advance(7 * time.Millisecond)
	if e, _ := s.Close(); e.UJ() != 70_000 {
		t.Errorf("a lone serve: %v, want 70000", e)
	}
}

// TestSharedSpansConcurrent: serves opening, reporting work, reading and
// closing their spans from their own goroutines (as the steward's do)
// still add up to the counter's delta, exactly.
func TestSharedSpansConcurrent(t *testing.T) {
	clk := hwtest.NewClock(epoch)
	c := hwtest.NewCounter("fake", hw.DomainCPU, time.Millisecond, clk, 25)
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil)
	hold, _ := m.OpenWork(hw.DomainCPU) // open throughout: one contiguous stretch
	start, _ := c.Read()
	var mu sync.Mutex
	var sum uint64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			s, _ := m.OpenWork(hw.DomainCPU)
			for i := range 20 {
				s.AddWork(uint64(g*i + 1))
				clk.Advance(time.Millisecond)
				s.SoFarUJ()
			}
			e, err := s.Close()
			if err != nil || e.Provenance() != hw.ModelBased {
				t.Errorf("serve %d: %v, %v", g, e, err)
			}
			mu.Lock()
			sum += e.UJ()
			mu.Unlock()
		})
	}
	wg.Wait()
	e, _ := hold.Close()
	end, _ := c.Read()
	// hold's share runs from start, which its opening preceded by nothing.
	if sum+e.UJ() != end.UJ-start.UJ {
		t.Errorf("the receipts add up to %d µJ, the counter measured %d", sum+e.UJ(), end.UJ-start.UJ)
	}
}
