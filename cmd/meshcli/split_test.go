package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
)

// pinner is a node serving "big" split over itself and node "b" or "c";
// it honours pins "b:2-4" and "c:2-4" only.
type pinner struct{ calls int }

func (p *pinner) SetSplitPins(_ context.Context, model string, pins []string) (control.SplitPlan, error) {
	p.calls++
	if model != "big" {
		return control.SplitPlan{}, fmt.Errorf("model %q: %w", model, control.ErrNotSplit)
	}
	peer := "b"
	for _, pin := range pins {
		if pin != "b:2-4" && pin != "c:2-4" {
			return control.SplitPlan{}, fmt.Errorf("%w: %s: layer 0 is the head's", control.ErrBadPins, pin)
		}
		peer = pin[:1]
	}
	return control.SplitPlan{Model: model, State: "serving", Pins: pins,
		Stages: []control.SplitStage{{Node: "a", Layers: "0-2", MemoryBytes: 1 << 20}, {Node: peer, Layers: "2-4", MemoryBytes: 2 << 20}}}, nil
}

// TestSplitPinCommands: split pin prints the new plan; unpin clears the
// pins; a refused pin is one line naming the reason; --endpoint is
// refused, since only the local facade carries the command.
func TestSplitPinCommands(t *testing.T) {
	p := &pinner{}
	n := controltest.Start(t, controltest.Options{Config: func(c *control.Config) { c.Splits = p }})
	c := newCLI(t, n.HTTP(t).URL)
	out := c.ok("split", "pin", "big", "c:2-4")
	for _, want := range []string{"Split big: serving", "Pinned: c:2-4", "2-4", "2.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("split pin lacks %q:\n%s", want, out)
		}
	}
	if out := c.ok("split", "unpin", "big", "--json"); !strings.Contains(out, `"node": "b"`) || strings.Contains(out, "pins") {
		t.Errorf("split unpin --json:\n%s", out)
	}
	if msg := c.fail("split", "pin", "big", "c:0-4"); !strings.Contains(msg, "BAD_REQUEST") || !strings.Contains(msg, "layer 0 is the head's") {
		t.Errorf("refused pin: %s", msg)
	}
	if msg := c.fail("split", "pin", "big"); !strings.Contains(msg, "NODE:LO-HI") {
		t.Errorf("no pin: %s", msg)
	}
	calls := p.calls
	if msg := c.fail("--endpoint", "ctl1.x", "split", "unpin", "big"); !strings.Contains(msg, "local node only") || p.calls != calls {
		t.Errorf("--endpoint: %s", msg)
	}
}
