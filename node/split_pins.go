package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/stageplan"
)

// ErrNotSplit marks a pin command for a model this node does not serve
// split.
var ErrNotSplit = errors.New("not a split model served by this node")

// ErrRepin marks new pins that plan but whose stages did not load; the
// model keeps the plan it had.
var ErrRepin = errors.New("split: the new plan did not load")

// SetSplitPins places the split model name under pins ("NODE:LO-HI",
// NODE an endpoint id or "self"; none clears the owner's pins and the
// planner places every stage) while it serves. Pins are checked against
// the model and the planner (errors wrap stageplan.ErrPin, with
// model.Config.CheckStage's reason for a range the model cannot be loaded
// as, or stageplan.ErrUnsplittable, or are a *stageplan.NoFitError); a plan that fits is loaded, downstream first,
// and replaces the one serving. On any error nothing changes. The pins
// hold until the node stops: the config's apply again at the next start.
func (n *Node) SetSplitPins(ctx context.Context, name string, pins []string) (SplitStatus, error) {
	sm := n.splitModel(canonicalModelName(name))
	if sm == nil {
		return SplitStatus{}, fmt.Errorf("model %q: %w", name, ErrNotSplit)
	}
	if len(pins) > MaxPins {
		return SplitStatus{}, fmt.Errorf("%w: %d pins, at most %d", stageplan.ErrPin, len(pins), MaxPins)
	}
	var ranges []stageplan.Pin
	for _, p := range pins {
		pin, err := ParsePin(p)
		if err != nil {
			return SplitStatus{}, fmt.Errorf("%w: %w", stageplan.ErrPin, err)
		}
		ranges = append(ranges, stageplan.Pin{Host: pin.Node, Lo: pin.Lo, Hi: pin.Hi})
	}
	// Ranges the model cannot be loaded as are refused here, with the
	// model's reason, before any peer is asked.
	if err := stageplan.CheckSplit(sm.costs, ranges); err != nil {
		return SplitStatus{}, fmt.Errorf("model %q: %w", name, err)
	}
	if pins == nil {
		pins = []string{}
	}
	r := repin{pins: pins, done: make(chan error, 1)}
	select {
	case sm.repins <- r:
	case <-sm.closed:
		return SplitStatus{}, fmt.Errorf("model %q: %w", name, ErrNotSplit)
	case <-ctx.Done():
		return SplitStatus{}, ctx.Err()
	}
	// The placement owns the outcome from here: it answers even when ctx
	// ends, so that the answer is never lost.
	select {
	case err := <-r.done:
		if err != nil {
			return SplitStatus{}, fmt.Errorf("model %q: %w", name, err)
		}
		return *sm.status(), nil
	case <-ctx.Done():
		return SplitStatus{}, fmt.Errorf("model %q: still placing: %w", name, ctx.Err())
	}
}

// SetSplitPins implements control.SplitPinner over Node.SetSplitPins:
// pins the planner refuses or cannot fit, and a model not served split,
// are the owner's to change (control.ErrBadPins, control.ErrNotSplit).
func (r *ownerRuntime) SetSplitPins(ctx context.Context, model string, pins []string) (control.SplitPlan, error) {
	st, err := r.n.SetSplitPins(ctx, model, pins)
	var nofit *stageplan.NoFitError
	switch {
	case errors.Is(err, stageplan.ErrPin) || errors.Is(err, stageplan.ErrUnsplittable) || errors.As(err, &nofit):
		return control.SplitPlan{}, fmt.Errorf("%w: %w", control.ErrBadPins, err)
	case errors.Is(err, ErrNotSplit):
		return control.SplitPlan{}, fmt.Errorf("%w: %w", control.ErrNotSplit, err)
	case err != nil:
		return control.SplitPlan{}, err
	}
	plan := control.SplitPlan{Model: canonicalModelName(model), State: st.State, Pins: st.Pins}
	for _, s := range st.Stages {
		plan.Stages = append(plan.Stages, control.SplitStage{Node: s.Node, Layers: s.Layers, MemoryBytes: s.MemoryBytes})
	}
	return plan, nil
}
