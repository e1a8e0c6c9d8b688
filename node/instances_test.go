package node

import (
	"context"
	"errors"
	"testing"
	"time"
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
