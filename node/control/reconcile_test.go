package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func startReconciler(t *testing.T, rt Runtime, cfg ReconcilerConfig) *Reconciler {
	t.Helper()
	if cfg.IntentIDs == nil {
		cfg.IntentIDs = counterIDs()
	}
	r := NewReconciler(rt, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitFor(t, "serving", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.base != nil
	})
	return r
}

func modelRef(s string) *nodev1.OwnerControlModelRef {
	return &nodev1.OwnerControlModelRef{CanonicalModelRef: s}
}

func stateOf(r *Reconciler, ref string) ModelState {
	for _, s := range r.States() {
		if s.CanonicalRef == ref {
			return s
		}
	}
	return ModelState{}
}

func waitState(t *testing.T, r *Reconciler, ref, want string) {
	t.Helper()
	waitFor(t, ref+" "+want, func() bool { return stateOf(r, ref).State == want })
}

func submit(t *testing.T, r *Reconciler, in Intent) Ack {
	t.Helper()
	a, err := r.Submit(context.Background(), in)
	if err != nil {
		t.Fatalf("Submit %v: %v", in.Kind, err)
	}
	return a
}

func TestLoadAcksWithoutWaiting(t *testing.T) {
	rt := newFakeRuntime("m")
	rt.loadGate = make(chan struct{})
	r := startReconciler(t, rt, ReconcilerConfig{})
	a := submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("m")})
	if a.State != StateLoading || a.IntentID != "intent-1" {
		t.Fatalf("ack %+v", a)
	}
	waitState(t, r, "m", StateLoading)
	close(rt.loadGate)
	waitState(t, r, "m", StateLoaded)
	// Loading a loaded model is acknowledged as loaded and loads nothing.
	if a := submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("m")}); a.State != StateLoaded || a.Target.GetInstanceId() == "" {
		t.Fatalf("second load: %+v", a)
	}
	waitFor(t, "second intent handled", func() bool { return stateOf(r, "m").IntentID == "intent-2" })
	if _, loads := rt.state("m"); loads != 1 {
		t.Fatalf("%d loads", loads)
	}
}

func TestLoadFailureIsFinal(t *testing.T) {
	rt := newFakeRuntime("m")
	rt.failLoads["m"] = 1
	r := startReconciler(t, rt, ReconcilerConfig{RetryMin: time.Millisecond})
	submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("m")})
	waitState(t, r, "m", StateFailed)
	if s := stateOf(r, "m"); s.Err == nil {
		t.Fatal("a failed load keeps its reason")
	}
	time.Sleep(20 * time.Millisecond)
	if _, loads := rt.state("m"); loads != 1 {
		t.Fatalf("a load intent retried: %d loads", loads)
	}
}

// TestEnsureRetries: an ensured model survives failed loads, and is
// loaded again if it goes away.
func TestEnsureRetries(t *testing.T) {
	rt := newFakeRuntime("m")
	rt.failLoads["m"] = 3
	r := startReconciler(t, rt, ReconcilerConfig{RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond, EnsureCheck: 5 * time.Millisecond})
	submit(t, r, Intent{Kind: IntentEnsure, Model: modelRef("m")})
	waitState(t, r, "m", StateLoaded)
	inst, loads := rt.state("m")
	if loads != 4 || inst == "" {
		t.Fatalf("%d loads, instance %q; want 3 failures then a success", loads, inst)
	}
	// The instance dies behind the reconciler's back: ensure notices.
	if err := rt.Unload(context.Background(), inst); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload", func() bool { again, _ := rt.state("m"); return again != "" && again != inst })
	// An unload supersedes the ensure: it is not reloaded again.
	submit(t, r, Intent{Kind: IntentUnload, Model: modelRef("m")})
	waitState(t, r, "m", StateUnloaded)
	time.Sleep(30 * time.Millisecond)
	if inst, _ := rt.state("m"); inst != "" {
		t.Fatal("the superseded ensure reloaded the model")
	}
}

func TestUnloadByInstance(t *testing.T) {
	rt := newFakeRuntime("m")
	r := startReconciler(t, rt, ReconcilerConfig{})
	submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("m")})
	waitState(t, r, "m", StateLoaded)
	inst, _ := rt.state("m")
	a := submit(t, r, Intent{Kind: IntentUnload, Model: &nodev1.OwnerControlModelRef{InstanceId: &inst}})
	if a.State != StateUnloading || a.Target.GetCanonicalModelRef() != "m" {
		t.Fatalf("ack %+v", a)
	}
	waitState(t, r, "m", StateUnloaded)
}

func TestDrain(t *testing.T) {
	setup := func(t *testing.T, inFlight int, cfg ReconcilerConfig) (*fakeRuntime, *Reconciler, *fakeDrain, string) {
		rt := newFakeRuntime("m")
		r := startReconciler(t, rt, cfg)
		submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("m")})
		waitState(t, r, "m", StateLoaded)
		inst, _ := rt.state("m")
		d := newFakeDrain(inFlight)
		rt.mu.Lock()
		rt.drains[inst] = d
		rt.mu.Unlock()
		return rt, r, d, inst
	}
	t.Run("admitted work finishes", func(t *testing.T) {
		rt, r, d, _ := setup(t, 2, ReconcilerConfig{DrainTimeout: time.Minute})
		if a := submit(t, r, Intent{Kind: IntentDrain, Model: modelRef("m")}); a.State != StateDraining {
			t.Fatalf("ack %+v", a)
		}
		waitState(t, r, "m", StateDraining)
		d.finish()
		time.Sleep(10 * time.Millisecond)
		if inst, _ := rt.state("m"); inst == "" {
			t.Fatal("unloaded with work in flight")
		}
		d.finish()
		waitState(t, r, "m", StateUnloaded)
		if cancelled, _ := d.flags(); cancelled {
			t.Fatal("work that finished in time was cancelled")
		}
	})
	t.Run("deadline force-cancels", func(t *testing.T) {
		rt, r, d, _ := setup(t, 1, ReconcilerConfig{})
		submit(t, r, Intent{Kind: IntentDrain, Model: modelRef("m"), DrainTimeout: 20 * time.Millisecond})
		waitState(t, r, "m", StateUnloaded)
		if cancelled, _ := d.flags(); !cancelled {
			t.Fatal("the drain deadline did not cancel the work")
		}
		if inst, _ := rt.state("m"); inst != "" {
			t.Fatal("not unloaded")
		}
	})
	t.Run("default deadline and cap", func(t *testing.T) {
		_, r, d, _ := setup(t, 1, ReconcilerConfig{DrainTimeout: 15 * time.Millisecond, DrainTimeoutMax: 30 * time.Millisecond})
		// An hour is capped to DrainTimeoutMax.
		submit(t, r, Intent{Kind: IntentDrain, Model: modelRef("m"), DrainTimeout: time.Hour})
		waitState(t, r, "m", StateUnloaded)
		if cancelled, _ := d.flags(); !cancelled {
			t.Fatal("the capped deadline did not fire")
		}
	})
	t.Run("called off by a load", func(t *testing.T) {
		rt, r, d, inst := setup(t, 1, ReconcilerConfig{DrainTimeout: time.Minute})
		submit(t, r, Intent{Kind: IntentDrain, Model: modelRef("m")})
		waitState(t, r, "m", StateDraining)
		if a := submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("m")}); a.State != StateLoaded {
			t.Fatalf("load during a drain: %+v", a)
		}
		waitFor(t, "resume", func() bool { _, resumed := d.flags(); return resumed })
		waitState(t, r, "m", StateLoaded)
		if now, _ := rt.state("m"); now != inst {
			t.Fatal("the called-off drain unloaded the model")
		}
	})
}

func TestSubmitRefusals(t *testing.T) {
	rt := newFakeRuntime("a", "b")
	r := NewReconciler(rt, ReconcilerConfig{MaxModels: 1})
	_, err := r.Submit(context.Background(), Intent{Kind: IntentLoad, Model: modelRef("a")})
	wantCode(t, err, ErrUnavailable) // not served yet

	r = startReconciler(t, rt, ReconcilerConfig{MaxModels: 1})
	_, err = r.Submit(context.Background(), Intent{Kind: IntentLoad, Model: modelRef("nonesuch")})
	wantCode(t, err, ErrBadRequest)
	submit(t, r, Intent{Kind: IntentLoad, Model: modelRef("a")})
	_, err = r.Submit(context.Background(), Intent{Kind: IntentLoad, Model: modelRef("b")})
	wantCode(t, err, ErrUnavailable)

	broken := &brokenRuntime{fakeRuntime: newFakeRuntime()}
	r = startReconciler(t, broken, ReconcilerConfig{})
	_, err = r.Submit(context.Background(), Intent{Kind: IntentLoad, Model: modelRef("x")})
	wantCode(t, err, ErrUnavailable)
}

type brokenRuntime struct{ *fakeRuntime }

func (brokenRuntime) Resolve(*nodev1.OwnerControlModelRef) (Model, error) {
	return Model{}, errors.New("runtime wedged")
}
