package steward

import (
	"errors"
	"testing"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// splitEngine is a fake whose serve ran in three stages: layers [0, 2)
// here, [2, 3) and [3, 4) on nodes 2 and 3, which report the parts given.
func splitEngine(t *testing.T, req receipt.ServeRequest, parts ...hw.Energy) *fakeEngine {
	t.Helper()
	id, err := req.ID()
	if err != nil {
		t.Fatal(err)
	}
	w := receipt.Weights{Digest: receipt.Sum([]byte("split weights")), Precision: "q8_0"}
	e := newFake(receipt.F3, 10)
	e.weights = func(int) (receipt.Weights, bool) { return w, true }
	sp := &engine.Split{Lo: 0, Hi: 2, Tokens: 28}
	for i, p := range parts {
		sealer, err := receipt.NewSealer(testKey(t, byte(2+i)))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := sealer.SignStageReport(receipt.StageReport{RequestID: id, Weights: w.Digest,
			Lo: uint32(2 + i), Hi: uint32(3 + i), Tokens: 28, Energy: p})
		if err != nil {
			t.Fatal(err)
		}
		sp.Reports = append(sp.Reports, rep)
	}
	e.outcome = func(o *engine.Outcome) { o.Split = sp }
	return e
}

// TestSplitServe: a split serve's receipt carries the head's own report
// (its metered span, signed by the steward) and the stages', its energy
// is their total graded as the weakest part, and the grant is debited
// the total.
func TestSplitServe(t *testing.T) {
	req := genRequest(24, 4, receipt.F2, 1_000_000)
	e := splitEngine(t, req, hw.Measured(300, 280), hw.Modelled(200, nil))
	meter := &fakeMeter{energy: hw.Measured(500, 450)}
	debit := &fakeDebit{}
	s := newSteward(t, Config{Backends: []Backend{{Name: "split", Engine: e}}, Meter: meter,
		Authorizer: &fakeAuthorizer{debit: debit}})
	served, err := s.Serve(t.Context(), req, promptOf(24), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt
	want := hw.Modelled(930, nil) // ModelBased, the weakest; a part has no measurement
	if r.Energy != want || len(r.Stages) != 3 {
		t.Fatalf("energy %v with %d stages, want %v with 3", r.Energy, len(r.Stages), want)
	}
	head := r.Stages[0]
	if head.Node != s.DID() || head.Energy != meter.energy || head.Lo != 0 || head.Hi != 2 || head.Tokens != 28 {
		t.Fatalf("stage 0's report %+v", head.StageReport)
	}
	if got := debit.settled; len(got) != 1 || got[0] != want {
		t.Fatalf("debited %v, want the total %v", got, want)
	}
	opened, err := receipt.Open(served.Receipt.Envelope, s.sealer.Public())
	if err != nil || len(opened.Receipt.Stages) != 3 {
		t.Fatalf("sealed split receipt does not open: %v", err)
	}
	// All parts hardware-graded: the total is HwShunt.
	e2 := splitEngine(t, req, hw.Measured(300, 280), hw.Measured(200, 190))
	s2 := newSteward(t, Config{Backends: []Backend{{Name: "split", Engine: e2}}, Meter: meter})
	served, err = s2.Serve(t.Context(), req, promptOf(24), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := served.Receipt.Receipt.Energy; got != hw.Measured(1000, 920) {
		t.Fatalf("all-hardware total %v", got)
	}
}

// TestSplitServeRefused: a split serve whose stage reports do not hold
// (a range missing) is not sealed, and its grant is debited the ceiling,
// as for a meter that cannot say what the serve cost.
func TestSplitServeRefused(t *testing.T) {
	req := genRequest(24, 4, receipt.F2, 1_000_000)
	e := splitEngine(t, req, hw.Measured(300, 280), hw.Measured(200, 190))
	inner := e.outcome
	e.outcome = func(o *engine.Outcome) {
		inner(o)
		o.Split.Reports = o.Split.Reports[1:] // layer 2's report lost
	}
	debit := &fakeDebit{}
	s := newSteward(t, Config{Backends: []Backend{{Name: "split", Engine: e}}, Meter: &fakeMeter{energy: hw.Measured(500, 450)},
		Authorizer: &fakeAuthorizer{debit: debit}})
	served, err := s.Serve(t.Context(), req, promptOf(24), nil)
	var se *ServeError
	if served != nil || !errors.Is(err, receipt.ErrStageRange) || !errors.As(err, &se) || se.Stage != StageMeter {
		t.Fatalf("served %v, %v; want ErrStageRange at the meter", served != nil, err)
	}
	if got := debit.settled; len(got) != 1 || got[0] != hw.Estimated(req.JouleCeilingUJ) {
		t.Fatalf("debited %v, want the ceiling", got)
	}
}
