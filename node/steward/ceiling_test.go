package steward

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
)

// stepMeter meters a span as prefill plus step for every token its engine
// has produced: an engine whose prompt costs prefill and whose every
// decode step costs step. Its spans can be read while open (hw.LiveSpan).
type stepMeter struct {
	prefill, step uint64

	mu     sync.Mutex
	tokens uint64 // produced in the open span
	reads  int
}

// produced is the fake engine's onToken: one more step of work.
func (m *stepMeter) produced() {
	m.mu.Lock()
	m.tokens++
	m.mu.Unlock()
}

func (m *stepMeter) energy() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.prefill + m.tokens*m.step
}

func (m *stepMeter) Open() (hw.Span, error) {
	m.mu.Lock()
	m.tokens = 0
	m.mu.Unlock()
	return stepSpan{m}, nil
}

func (m *stepMeter) MinWindow() time.Duration { return 0 }
func (m *stepMeter) Name() string             { return "step" }

type stepSpan struct{ m *stepMeter }

func (s stepSpan) SoFarUJ() uint64 {
	s.m.mu.Lock()
	s.m.reads++
	s.m.mu.Unlock()
	return s.m.energy()
}

func (s stepSpan) Close() (hw.Energy, error) { return hw.Estimated(s.m.energy()), nil }

// ceilingServe serves a 16-token generation on a fake engine whose router
// estimate is tiny (10 µJ/token) and whose metered energy is prefill plus
// step per token, under ceiling, on a grant's debit.
func ceilingServe(t *testing.T, prefill, step, ceiling uint64) (*Steward, *stepMeter, *fakeDebit, []uint32, *Served, error) {
	t.Helper()
	meter := &stepMeter{prefill: prefill, step: step}
	eng := newFake(receipt.F2, 10)
	eng.tokens = promptOf(16)
	eng.onToken = meter.produced
	debit := &fakeDebit{}
	s := newSteward(t, Config{Backends: []Backend{{Name: "fake", Engine: eng}}, Meter: meter,
		Authorizer: &fakeAuthorizer{debit: debit}})
	var emitted []uint32
	served, err := s.Serve(t.Context(), genRequest(4, 16, receipt.F0, ceiling), promptOf(4), func(tok uint32) error {
		emitted = append(emitted, tok)
		return nil
	})
	return s, meter, debit, emitted, served, err
}

// TestCeilingStopsBeforePassing: a generation whose metered energy grows
// by a step per token, admitted on an estimate far below its real cost, is
// stopped as soon as its energy and one more step would pass its joule
// ceiling; the stop is not a failure: the tokens emitted are sealed and
// committed to, the grant is debited what was metered, and the error is
// ErrCeilingReached, not ErrIncomplete.
func TestCeilingStopsBeforePassing(t *testing.T) {
	// Readings after tokens 1..5: 1100, 2100, 3100, 4100, 5100; with a
	// step of 1000 the fifth would pass 5500 at the sixth.
	s, meter, debit, emitted, served, err := ceilingServe(t, 100, 1000, 5500)
	if !errors.Is(err, ErrCeilingReached) || errors.Is(err, ErrIncomplete) {
		t.Fatalf("err = %v, want ErrCeilingReached and not ErrIncomplete", err)
	}
	var se *ServeError
	if !errors.As(err, &se) || se.Stage != StageMeter || !strings.Contains(err.Error(), "5100 uJ metered after 5 tokens") {
		t.Fatalf("err = %v, want a ServeError at the meter naming the figures", err)
	}
	if served == nil || len(served.Output) != 5 || len(emitted) != 5 {
		t.Fatalf("served %v, emitted %d tokens; want 5 of each", served, len(emitted))
	}
	r := served.Receipt.Receipt
	if r.TokensOut != 5 || r.TokensAccepted != 5 || r.Energy.UJ() != 5100 {
		t.Fatalf("receipt: out %d accepted %d energy %v; want 5, 5, 5100 µJ", r.TokensOut, r.TokensAccepted, r.Energy)
	}
	if len(debit.settled) != 1 || debit.settled[0].UJ() != 5100 || r.GrantID == nil {
		t.Fatalf("debited %v, receipt grant %v; want the metered 5100 µJ once", debit.settled, r.GrantID)
	}
	if r.Energy.UJ() > 5500+meter.step {
		t.Fatalf("metered %d µJ: more than the ceiling and one step", r.Energy.UJ())
	}
	if d, err := s.Disclose(&r, promptOf(4), emitted); err != nil || !d.Opens(&r) {
		t.Fatalf("the output commitment does not open on the 5 tokens emitted: %v", err)
	}
	if r.CutShort != receipt.CutCeiling {
		t.Fatalf("cut_short %q, want %q", r.CutShort, receipt.CutCeiling)
	}
}

// TestCeilingFits: a generation whose metered energy reaches its ceiling
// exactly on its last allowed token is not cut, and one that ends well
// inside it reads the meter once per token but the last.
func TestCeilingFits(t *testing.T) {
	for _, ceiling := range []uint64{100 + 16*1000, 1_000_000} {
		_, meter, debit, emitted, served, err := ceilingServe(t, 100, 1000, ceiling)
		if err != nil || len(served.Output) != 16 || len(emitted) != 16 {
			t.Fatalf("ceiling %d: %v, %d tokens; want all 16", ceiling, err, len(emitted))
		}
		if got := served.Receipt.Receipt.Energy.UJ(); got != 16100 || debit.settled[0].UJ() != 16100 {
			t.Fatalf("ceiling %d: metered %d, debited %v", ceiling, got, debit.settled)
		}
		if meter.reads != 15 {
			t.Fatalf("ceiling %d: %d readings for 16 tokens, want 15 (none after the last)", ceiling, meter.reads)
		}
	}
}

// TestCeilingPrefill: a prompt whose evaluation alone passes the ceiling
// is stopped at its first token, the first reading: the overspend past one
// step is the prompt's, which only the router's estimate bounds.
func TestCeilingPrefill(t *testing.T) {
	_, _, _, emitted, served, err := ceilingServe(t, 10_000, 1000, 5000)
	if !errors.Is(err, ErrCeilingReached) || served == nil || len(emitted) != 1 || served.Receipt.Receipt.Energy.UJ() != 11_000 {
		t.Fatalf("err %v, %d tokens; want a stop at the first token", err, len(emitted))
	}
}

// TestCeilingWatch: the step is the dearest gap between two readings (the
// first reading, which includes the prompt, is no step), and before any is
// seen the engine's modelled figure; a reading that goes down does not
// give energy back.
func TestCeilingWatch(t *testing.T) {
	tests := []struct {
		name     string
		modelled uint64
		readings []uint64
		stopAt   int // index of the reading that stops; -1 none
	}{
		{"modelled step before any is seen", 600, []uint64{500}, 0},
		{"first reading is no step", 10, []uint64{900, 920, 930}, -1},
		{"steady steps", 10, []uint64{100, 300, 500, 700, 900}, 4},
		{"a burst sets the step", 10, []uint64{100, 200, 200, 600, 610}, 4},
		{"a reading that goes down is no step", 10, []uint64{100, 300, 250, 400}, -1},
	}
	for _, tt := range tests {
		w := ceilingWatch{ceiling: 1000, step: tt.modelled}
		got := -1
		for i, r := range tt.readings {
			if w.passes(r) {
				got = i
				break
			}
		}
		if got != tt.stopAt {
			t.Errorf("%s: stops at reading %d, want %d (step %d)", tt.name, got, tt.stopAt, w.step)
		}
	}
}
