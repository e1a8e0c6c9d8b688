package node

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/steward"
)

func TestGateDrain(t *testing.T) {
	g := newGate()
	ctx1, leave1, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, leave2, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := g.drain()
	if _, _, err := g.enter(context.Background()); !errors.Is(err, errDraining) {
		t.Fatalf("enter while draining: %v, want errDraining", err)
	}
	select {
	case <-d.Idle():
		t.Fatal("idle with work in flight")
	default:
	}
	leave2()
	d.Cancel() // forced: the remaining work's context ends
	select {
	case <-ctx1.Done():
	case <-time.After(time.Second):
		t.Fatal("Cancel did not cancel admitted work")
	}
	leave1()
	select {
	case <-d.Idle():
	case <-time.After(time.Second):
		t.Fatal("not idle after all work left")
	}
	d.Resume()
	if _, leave, err := g.enter(context.Background()); err != nil {
		t.Fatalf("enter after Resume: %v", err)
	} else {
		leave()
	}
}

func TestGateDrainIdleAtOnce(t *testing.T) {
	d := newGate().drain()
	select {
	case <-d.Idle():
	default:
		t.Fatal("a gate with nothing in flight is not idle when drained")
	}
}

// closeWatch is a reference model that reports when it is closed.
type closeWatch struct {
	*referenceModel
	closed chan struct{}
}

func (c *closeWatch) Close() error { close(c.closed); return nil }

// TestUnloadClosesLateWork: an unload whose caller stops waiting while the
// model's cancelled work is still stopping returns an error, and the model
// is closed once that work has stopped, not leaked.
func TestUnloadClosesLateWork(t *testing.T) {
	key, _ := identity.GenerateKey(nil)
	m := &closeWatch{referenceModel: newReferenceModel(DefaultFidelity, referenceUJPerToken), closed: make(chan struct{})}
	st, err := steward.New(steward.Config{Key: key, Meter: hw.NewEstimatorMeter(hw.PowerModel{Watts: 1}, hw.SystemClock{}),
		Backends: []steward.Backend{backendOf(m)}})
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{steward: st, log: slog.New(slog.DiscardHandler)}
	in, err := n.models.add(m)
	if err != nil {
		t.Fatal(err)
	}
	_, leave, err := in.gate.enter(context.Background()) // work that takes its time to stop
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (&ownerRuntime{n: n}).Unload(ctx, in.id); err == nil {
		t.Fatal("unload reported success with work still running")
	}
	select {
	case <-m.closed:
		t.Fatal("model closed while its work was running")
	default:
	}
	leave()
	select {
	case <-m.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("model never closed after its work stopped")
	}
	if _, ok := n.models.get(m.Name()); ok || len(st.Backends()) != 0 {
		t.Fatal("unloaded model still in service")
	}
}
