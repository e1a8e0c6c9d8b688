package conformance

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
)

// These tests hold the steward to §7 through its public API alone, on
// the reference backends.

func newReferenceSteward(t *testing.T, meter hw.Meter, backends []steward.Backend) *steward.Steward {
	t.Helper()
	key, err := identity.KeyFromSeed(ReferenceSeed())
	if err != nil {
		t.Fatal(err)
	}
	s, err := steward.New(steward.Config{Key: key, Meter: meter, Backends: backends})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestItem3Routing: §7.3.
func TestItem3Routing(t *testing.T) {
	s := newReferenceSteward(t, fixedMeter{hw.Estimated(1)}, ReferenceBackends())
	req := ReferenceRequest()
	served, err := s.Serve(t.Context(), req, ReferencePrompt(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := served.Route
	if len(rt.Candidates) != 3 || rt.Candidates[rt.Chosen].Backend != "ref-mid" || served.Receipt.Receipt.Route != rt.Justification {
		t.Fatalf("route %+v", rt)
	}
	for _, c := range rt.Candidates {
		if c.Admissible == (c.Reason != "") {
			t.Errorf("%s: admissible %v with reason %q", c.Backend, c.Admissible, c.Reason)
		}
		if c.Admissible && c.EstimateUJ < rt.Candidates[rt.Chosen].EstimateUJ {
			t.Errorf("%s is admissible and cheaper than the choice", c.Backend)
		}
	}
	// With a higher ceiling the cheapest admissible is still ref-mid;
	// with a higher floor nothing is admissible and the serve fails with
	// every reason.
	req.JouleCeilingUJ = 10_000
	if rt, _ := s.Route(req); rt.Candidates[rt.Chosen].Backend != "ref-mid" || !rt.Candidates[1].Admissible {
		t.Fatalf("higher ceiling: %+v", rt)
	}
	req.FidelityFloor, req.JouleCeilingUJ = receipt.F4, 1_000
	_, err = s.Serve(t.Context(), req, ReferencePrompt(), nil)
	var se *steward.ServeError
	if !errors.As(err, &se) || !errors.Is(err, steward.ErrNoAdmissibleBackend) || len(se.Route.Candidates) != 3 {
		t.Fatalf("no admissible backend: %v", err)
	}
}

// spanMeter records whether the engine ran inside its span.
type spanMeter struct {
	mu     sync.Mutex
	open   bool
	spans  int
	inside []bool
	energy hw.Energy
}

func (m *spanMeter) Open() (hw.Span, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.open, m.spans = true, m.spans+1
	return m, nil
}
func (m *spanMeter) MinWindow() time.Duration { return 0 }
func (m *spanMeter) Name() string             { return "span-check" }
func (m *spanMeter) Close() (hw.Energy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.open = false
	return m.energy, nil
}

type watchedEngine struct {
	engine.Engine
	m *spanMeter
}

func (w watchedEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	w.m.mu.Lock()
	w.m.inside = append(w.m.inside, w.m.open)
	w.m.mu.Unlock()
	return w.Engine.Serve(ctx, req, prompt, emit)
}

// TestItem4Metering: §7.4.
func TestItem4Metering(t *testing.T) {
	measured := uint64(5_100)
	m := &spanMeter{energy: hw.Measured(measured, 4_000)}
	backends := ReferenceBackends()
	backends[2].Engine = watchedEngine{backends[2].Engine, m}
	s := newReferenceSteward(t, m, backends)
	served, err := s.Serve(t.Context(), ReferenceRequest(), ReferencePrompt(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.spans != 1 || m.open || !slices.Equal(m.inside, []bool{true}) {
		t.Fatalf("the engine did not run inside exactly one span: spans %d inside %v", m.spans, m.inside)
	}
	r := served.Receipt.Receipt
	if got, ok := r.Energy.MeasuredUJ(); !ok || got != measured || r.Energy.Provenance() != hw.HwShunt {
		t.Fatalf("energy %v, want the meter's HwShunt reading", r.Energy)
	}
	// The coupling holds at the decoder: the same core claiming HwShunt
	// without its reading is refused.
	var core map[string]any
	if err := cbor.Unmarshal(served.Receipt.Core, &core); err != nil {
		t.Fatal(err)
	}
	delete(core, "measured_uj")
	em, _ := cbor.CoreDetEncOptions().EncMode()
	forged, _ := em.Marshal(core)
	if _, err := receipt.DecodeCore(forged); !errors.Is(err, hw.ErrCoupling) {
		t.Fatalf("HwShunt without measured_uj decoded: %v", err)
	}
}

// TestItem5Seal: §7.5.
func TestItem5Seal(t *testing.T) {
	s := newReferenceSteward(t, fixedMeter{hw.Estimated(1_000)}, ReferenceBackends())
	served, err := s.Serve(t.Context(), ReferenceRequest(), ReferencePrompt(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := receipt.Open(served.Receipt.Envelope, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := sealed.Receipt
	if r.Steward != s.DID() || sealed.Envelope[0] != 0xd2 {
		t.Fatalf("envelope kid %s, tag %#x", r.Steward, sealed.Envelope[0])
	}
	if uj, ok := r.UJPerAcceptedToken(); !ok || uj != 1_000/uint64(r.TokensAccepted) {
		t.Fatalf("uj_per_accepted_token %d, %v", uj, ok)
	}
}

// TestItem6Chain: §7.6.
func TestItem6Chain(t *testing.T) {
	s := newReferenceSteward(t, fixedMeter{hw.Estimated(1_000)}, ReferenceBackends())
	var log [][]byte
	for range 3 {
		served, err := s.Serve(t.Context(), ReferenceRequest(), ReferencePrompt(), nil)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, served.Receipt.Envelope)
	}
	if head, err := receipt.VerifyLog(log, receipt.Head{}, nil); err != nil || head != s.Head() {
		t.Fatalf("log: %+v, %v", head, err)
	}
	log[1] = slices.Clone(log[1])
	log[1][len(log[1])/2] ^= 0x01
	var le *receipt.LinkError
	if _, err := receipt.VerifyLog(log, receipt.Head{}, nil); !errors.As(err, &le) || le.Index != 1 {
		t.Fatalf("altered envelope 1: %v", err)
	}
}
