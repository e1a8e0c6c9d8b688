package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var startReconciler = controltest.StartReconciler

func stateOf(r *control.Reconciler, ref string) control.ModelState {
	for _, s := range r.States() {
		if s.CanonicalRef == ref {
			return s
		}
	}
	return control.ModelState{}
}

func waitState(t *testing.T, r *control.Reconciler, ref, want string) {
	t.Helper()
	waitFor(t, ref+" "+want, func() bool { return stateOf(r, ref).State == want })
}

func submit(t *testing.T, r *control.Reconciler, in control.Intent) control.Ack {
	t.Helper()
	a, err := r.Submit(context.Background(), in)
	if err != nil {
		t.Fatalf("Submit %v: %v", in.Kind, err)
	}
	return a
}

func TestLoadAcksWithoutWaiting(t *testing.T) {
	rt := controltest.NewRuntime("m")
	gate := make(chan struct{})
	rt.GateLoads(gate)
	r := startReconciler(t, rt, control.ReconcilerConfig{})
	a := submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")})
	if a.State != control.StateLoading || a.IntentID != "intent-1" {
		t.Fatalf("ack %+v", a)
	}
	waitState(t, r, "m", control.StateLoading)
	close(gate)
	waitState(t, r, "m", control.StateLoaded)
	// Loading a loaded model is acknowledged as loaded and loads nothing.
	if a := submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")}); a.State != control.StateLoaded || a.Target.GetInstanceId() == "" {
		t.Fatalf("second load: %+v", a)
	}
	waitFor(t, "second intent handled", func() bool { return stateOf(r, "m").IntentID == "intent-2" })
	if _, loads := rt.State("m"); loads != 1 {
		t.Fatalf("%d loads", loads)
	}
}

func TestLoadFailureIsFinal(t *testing.T) {
	rt := controltest.NewRuntime("m")
	rt.FailLoads("m", 1)
	r := startReconciler(t, rt, control.ReconcilerConfig{RetryMin: time.Millisecond})
	submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")})
	waitState(t, r, "m", control.StateFailed)
	if s := stateOf(r, "m"); s.Err == nil {
		t.Fatal("a failed load keeps its reason")
	}
	time.Sleep(20 * time.Millisecond)
	if _, loads := rt.State("m"); loads != 1 {
		t.Fatalf("a load intent retried: %d loads", loads)
	}
}

// TestEnsureRetries: an ensured model survives failed loads, and is
// loaded again if it goes away.
func TestEnsureRetries(t *testing.T) {
	rt := controltest.NewRuntime("m")
	rt.FailLoads("m", 3)
	r := startReconciler(t, rt, control.ReconcilerConfig{RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond, EnsureCheck: 5 * time.Millisecond})
	submit(t, r, control.Intent{Kind: control.IntentEnsure, Model: modelRef("m")})
	waitState(t, r, "m", control.StateLoaded)
	inst, loads := rt.State("m")
	if loads != 4 || inst == "" {
		t.Fatalf("%d loads, instance %q; want 3 failures then a success", loads, inst)
	}
	// The instance dies behind the reconciler's back: ensure notices.
	if err := rt.Unload(context.Background(), inst); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload", func() bool { again, _ := rt.State("m"); return again != "" && again != inst })
	// An unload supersedes the ensure: it is not reloaded again.
	submit(t, r, control.Intent{Kind: control.IntentUnload, Model: modelRef("m")})
	waitState(t, r, "m", control.StateUnloaded)
	time.Sleep(30 * time.Millisecond)
	if inst, _ := rt.State("m"); inst != "" {
		t.Fatal("the superseded ensure reloaded the model")
	}
}

func TestUnloadByInstance(t *testing.T) {
	rt := controltest.NewRuntime("m")
	r := startReconciler(t, rt, control.ReconcilerConfig{})
	submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")})
	waitState(t, r, "m", control.StateLoaded)
	inst, _ := rt.State("m")
	a := submit(t, r, control.Intent{Kind: control.IntentUnload, Model: &nodev1.OwnerControlModelRef{InstanceId: &inst}})
	if a.State != control.StateUnloading || a.Target.GetCanonicalModelRef() != "m" {
		t.Fatalf("ack %+v", a)
	}
	waitState(t, r, "m", control.StateUnloaded)
}

func TestDrain(t *testing.T) {
	setup := func(t *testing.T, inFlight int, cfg control.ReconcilerConfig) (*controltest.Runtime, *control.Reconciler, *controltest.Drain, string) {
		rt := controltest.NewRuntime("m")
		r := startReconciler(t, rt, cfg)
		submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")})
		waitState(t, r, "m", control.StateLoaded)
		inst, _ := rt.State("m")
		d := controltest.NewDrain(inFlight)
		rt.SetDrain(inst, d)
		return rt, r, d, inst
	}
	t.Run("admitted work finishes", func(t *testing.T) {
		rt, r, d, _ := setup(t, 2, control.ReconcilerConfig{DrainTimeout: time.Minute})
		if a := submit(t, r, control.Intent{Kind: control.IntentDrain, Model: modelRef("m")}); a.State != control.StateDraining {
			t.Fatalf("ack %+v", a)
		}
		waitState(t, r, "m", control.StateDraining)
		d.Finish()
		time.Sleep(10 * time.Millisecond)
		if inst, _ := rt.State("m"); inst == "" {
			t.Fatal("unloaded with work in flight")
		}
		d.Finish()
		waitState(t, r, "m", control.StateUnloaded)
		if cancelled, _ := d.Flags(); cancelled {
			t.Fatal("work that finished in time was cancelled")
		}
	})
	t.Run("deadline force-cancels", func(t *testing.T) {
		rt, r, d, _ := setup(t, 1, control.ReconcilerConfig{})
		submit(t, r, control.Intent{Kind: control.IntentDrain, Model: modelRef("m"), DrainTimeout: 20 * time.Millisecond})
		waitState(t, r, "m", control.StateUnloaded)
		if cancelled, _ := d.Flags(); !cancelled {
			t.Fatal("the drain deadline did not cancel the work")
		}
		if inst, _ := rt.State("m"); inst != "" {
			t.Fatal("not unloaded")
		}
	})
	t.Run("default deadline and cap", func(t *testing.T) {
		_, r, d, _ := setup(t, 1, control.ReconcilerConfig{DrainTimeout: 15 * time.Millisecond, DrainTimeoutMax: 30 * time.Millisecond})
		// An hour is capped to DrainTimeoutMax.
		submit(t, r, control.Intent{Kind: control.IntentDrain, Model: modelRef("m"), DrainTimeout: time.Hour})
		waitState(t, r, "m", control.StateUnloaded)
		if cancelled, _ := d.Flags(); !cancelled {
			t.Fatal("the capped deadline did not fire")
		}
	})
	t.Run("default above the cap", func(t *testing.T) {
		// A drain naming no deadline takes the default, which the cap
		// bounds too (the cap was applied before the default, so such a
		// drain waited the whole minute).
		_, r, d, _ := setup(t, 1, control.ReconcilerConfig{DrainTimeout: time.Minute, DrainTimeoutMax: 30 * time.Millisecond})
		submit(t, r, control.Intent{Kind: control.IntentDrain, Model: modelRef("m")})
		waitState(t, r, "m", control.StateUnloaded)
		if cancelled, _ := d.Flags(); !cancelled {
			t.Fatal("the capped default deadline did not fire")
		}
	})
	t.Run("called off by a load", func(t *testing.T) {
		rt, r, d, inst := setup(t, 1, control.ReconcilerConfig{DrainTimeout: time.Minute})
		submit(t, r, control.Intent{Kind: control.IntentDrain, Model: modelRef("m")})
		waitState(t, r, "m", control.StateDraining)
		if a := submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")}); a.State != control.StateLoaded {
			t.Fatalf("load during a drain: %+v", a)
		}
		waitFor(t, "resume", func() bool { _, resumed := d.Flags(); return resumed })
		waitState(t, r, "m", control.StateLoaded)
		if now, _ := rt.State("m"); now != inst {
			t.Fatal("the called-off drain unloaded the model")
		}
	})
	t.Run("called off after the forced cancel", func(t *testing.T) {
		rt, r, d, inst := setup(t, 1, control.ReconcilerConfig{CancelGrace: time.Minute})
		d.IgnoreCancel() // the work outlives the cancel: the drain waits out its grace
		submit(t, r, control.Intent{Kind: control.IntentDrain, Model: modelRef("m"), DrainTimeout: time.Millisecond})
		waitFor(t, "the forced cancel", func() bool { cancelled, _ := d.Flags(); return cancelled })
		submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("m")})
		waitFor(t, "resume", func() bool { _, resumed := d.Flags(); return resumed })
		waitState(t, r, "m", control.StateLoaded)
		if now, loads := rt.State("m"); now != inst || loads != 1 {
			t.Fatalf("instance %q after %d loads, want %q after 1: the called-off drain unloaded the model", now, loads, inst)
		}
	})
}

func TestSubmitRefusals(t *testing.T) {
	rt := controltest.NewRuntime("a", "b")
	r := control.NewReconciler(rt, control.ReconcilerConfig{MaxModels: 1})
	_, err := r.Submit(context.Background(), control.Intent{Kind: control.IntentLoad, Model: modelRef("a")})
	wantCode(t, err, control.ErrUnavailable) // not served yet

	r = startReconciler(t, rt, control.ReconcilerConfig{MaxModels: 1})
	_, err = r.Submit(context.Background(), control.Intent{Kind: control.IntentLoad, Model: modelRef("nonesuch")})
	wantCode(t, err, control.ErrBadRequest)
	submit(t, r, control.Intent{Kind: control.IntentLoad, Model: modelRef("a")})
	_, err = r.Submit(context.Background(), control.Intent{Kind: control.IntentLoad, Model: modelRef("b")})
	wantCode(t, err, control.ErrUnavailable)

	broken := &brokenRuntime{Runtime: controltest.NewRuntime()}
	r = startReconciler(t, broken, control.ReconcilerConfig{})
	_, err = r.Submit(context.Background(), control.Intent{Kind: control.IntentLoad, Model: modelRef("x")})
	wantCode(t, err, control.ErrUnavailable)
}

type brokenRuntime struct{ *controltest.Runtime }

func (brokenRuntime) Resolve(*nodev1.OwnerControlModelRef) (control.Model, error) {
	return control.Model{}, errors.New("runtime wedged")
}
