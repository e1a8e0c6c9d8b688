package node

import (
	"context"
	"errors"
	"fmt"

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
// the model and the planner (errors wrap stageplan.ErrPin, or are a
// *stageplan.NoFitError); a plan that fits is loaded, downstream first,
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
	for _, p := range pins {
		if _, err := ParsePin(p); err != nil {
			return SplitStatus{}, fmt.Errorf("%w: %w", stageplan.ErrPin, err)
		}
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
