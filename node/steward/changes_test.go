package steward

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// weighted is the reference engine naming weights the test sets, with a
// hook that runs mid-serve.
type weighted struct {
	*engine.Reference
	mu          sync.Mutex
	w           *receipt.Weights
	duringServe func()
}

func (e *weighted) set(w *receipt.Weights) { e.mu.Lock(); e.w = w; e.mu.Unlock() }

func (e *weighted) Weights() (receipt.Weights, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.w == nil {
		return receipt.Weights{}, false
	}
	return *e.w, true
}

func (e *weighted) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	if e.duringServe != nil {
		e.duringServe()
	}
	return e.Reference.Serve(ctx, req, prompt, emit)
}

var (
	wA = receipt.Weights{Digest: receipt.Sum([]byte("weights A")), Precision: "fp16"}
	wB = receipt.Weights{Digest: receipt.Sum([]byte("weights B")), Precision: "fp16"}
)

func weightedFixture(t *testing.T, caveats ...grant.Caveat) (*fixture, *weighted) {
	e := &weighted{Reference: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F3, UJPerToken: 9}), w: &wA}
	return newFixtureOn(t, []Backend{{Name: "gpu", Engine: e}}, caveats...), e
}

func weightsChange(to receipt.Weights, plan *receipt.ContentID) change.Entry {
	return change.Entry{Weights: &change.Weights{To: to.Digest, Precision: to.Precision, Fidelity: receipt.F3, Plan: plan,
		ValidationResult: "eval 0.91", Reason: "quantised"}}
}

// TestChangeRecordGate: §6.5 at the steward. A recorded change puts its
// weights in effect from the next receipt; a backend whose engine names
// others is inadmissible, before any grant is decided; a serve whose
// engine still runs the old weights when the change lands is not sealed;
// refused entries are not recorded; the record is persisted, re-verified
// on restart and keeps gating.
func TestChangeRecordGate(t *testing.T) {
	f, e := weightedFixture(t)
	req := genRequest(8, 4, receipt.F2, 1_000)
	plan, err := f.s.RecordChange("gpu", change.Entry{Plan: &change.Plan{Precisions: []string{"fp16"}, FidelityFloor: receipt.F2,
		Validation: "eval suite ≥ 0.9", Foresees: "fp16 re-quantisations"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.serve(req, nil); err != nil {
		t.Fatalf("a plan alone gates nothing: %v", err)
	}
	first, err := f.s.RecordChange("gpu", weightsChange(wA, &plan.ID))
	if err != nil {
		t.Fatal(err)
	}
	if w := first.Entry.Weights; w.EffectiveFrom != 1 || w.From != nil || first.Entry.MadeAt != uint64(t0.Unix()) || first.Entry.Recipe != engine.ReferenceRecipe {
		t.Fatalf("first change %+v", first.Entry)
	}
	served, err := f.serve(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Coverage(&served.Receipt.Receipt); err != nil || got.ID != first.ID {
		t.Fatalf("coverage: %v", err)
	}

	// Refused entries leave no trace.
	records := f.j.Len()
	for name, c := range map[string]change.Entry{
		"to equals from":   weightsChange(wA, nil),
		"outside the plan": weightsChange(receipt.Weights{Digest: wB.Digest, Precision: "int8"}, &plan.ID),
		"unknown plan":     weightsChange(wB, &receipt.ContentID{1}),
	} {
		if _, err := f.s.RecordChange("gpu", c); !errors.Is(err, change.ErrRefused) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := f.s.RecordChange("nope", weightsChange(wB, nil)); err == nil {
		t.Error("recorded a change for a backend that does not exist")
	}
	// An entry the record's decoder would refuse on replay is never
	// journaled: recorded, it would stop the steward from starting again.
	for name, reason := range map[string]string{"reason not UTF-8": "re-quantis\xe9", "entry too large": strings.Repeat("x", 9<<10)} {
		c := weightsChange(wB, nil)
		c.Weights.Reason = reason
		if _, err := f.s.RecordChange("gpu", c); !errors.Is(err, change.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if f.j.Len() != records || len(f.s.ChangeRecord("gpu")) != 2 {
		t.Fatal("a refused entry was recorded")
	}

	// The engine moves to B before the change is recorded: inadmissible.
	e.set(&wB)
	meter := f.s.meter.(*fakeMeter)
	opened, records := meter.open, f.j.Len()
	_, err = f.serve(req, f.present(req))
	if !errors.Is(err, ErrNoAdmissibleBackend) || !strings.Contains(err.Error(), "weights not in effect") || meter.open != opened || f.j.Len() != records {
		t.Fatalf("serve on weights not in effect: %v", err)
	}
	// Recorded: B is in effect from the next receipt.
	second, err := f.s.RecordChange("gpu", weightsChange(wB, &plan.ID))
	if err != nil {
		t.Fatal(err)
	}
	if w := second.Entry.Weights; w.From == nil || *w.From != wA.Digest || w.EffectiveFrom != 2 {
		t.Fatalf("second change %+v", w)
	}
	served, err = f.serve(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Coverage(&served.Receipt.Receipt); err != nil || got.ID != second.ID {
		t.Fatalf("coverage after the change: %v", err)
	}

	// A change that lands mid-serve: the serve ran on the old weights and
	// is not sealed.
	e.duringServe = func() {
		e.duringServe = nil
		if _, err := f.s.RecordChange("gpu", weightsChange(wA, nil)); err != nil {
			t.Error(err)
		}
	}
	head := f.s.Head()
	_, err = f.serve(req, nil)
	var se *ServeError
	if !errors.As(err, &se) || se.Stage != StageCheck || !errors.Is(err, ErrWeightsNotInEffect) || f.s.Head() != head {
		t.Fatalf("seal on weights no longer in effect: %v", err)
	}

	// Restart: the record is re-verified and still gates (A is in effect,
	// the engine names B).
	f.restart()
	if len(f.s.ChangeRecord("gpu")) != 4 {
		t.Fatalf("record after restart: %d entries", len(f.s.ChangeRecord("gpu")))
	}
	if _, err := f.serve(req, nil); !errors.Is(err, ErrNoAdmissibleBackend) {
		t.Fatalf("after restart: %v", err)
	}
	e.set(&wA)
	if _, err := f.serve(req, nil); err != nil {
		t.Fatal(err)
	}
}

// TestModelInRouting: a ModelIn grant routes only to backends whose
// weights it lists, and names none that name no weights.
func TestModelInRouting(t *testing.T) {
	f, e := weightedFixture(t, grant.ModelIn(wA.Digest))
	req := genRequest(8, 4, receipt.F2, 1_000)
	if _, err := f.serve(req, f.present(req)); err != nil {
		t.Fatal(err)
	}
	e.set(&wB)
	if _, err := f.serve(req, f.present(req)); !errors.Is(err, ErrNoAdmissibleBackend) || !strings.Contains(err.Error(), "ModelIn") {
		t.Fatalf("other weights: %v", err)
	}
	e.set(nil)
	if _, err := f.serve(req, f.present(req)); !errors.Is(err, ErrNoAdmissibleBackend) {
		t.Fatalf("no weights: %v", err)
	}
	if _, err := f.serve(req, nil); err != nil {
		t.Fatalf("an ungranted serve is not held to the grant: %v", err)
	}
}
