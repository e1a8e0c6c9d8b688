package api

import (
	"context"
	"errors"
	"time"
)

var (
	errQueueFull = errors.New("api: queue full")
	errQueueWait = errors.New("api: waited too long for a slot")
)

// limiter admits up to `running` generations at once and lets `queued`
// more wait; beyond that it refuses at once, so an overloaded node answers
// 429 instead of stalling every client.
type limiter struct {
	admitted chan struct{} // running + queued
	running  chan struct{}
}

func newLimiter(running, queued int) *limiter {
	return &limiter{admitted: make(chan struct{}, running+queued), running: make(chan struct{}, running)}
}

// ticket is one admitted generation: a place among the running and queued
// ones, and, once run returns nil, a running slot.
type ticket struct {
	l       *limiter
	running bool
}

// admit takes a place, or fails at once with errQueueFull. A generation
// is prepared while it holds a place and no slot, so that preparing it
// delays no running generation while the queue still bounds how many
// wait.
func (l *limiter) admit() (*ticket, error) {
	select {
	case l.admitted <- struct{}{}:
		return &ticket{l: l}, nil
	default:
		return nil, errQueueFull
	}
}

// run waits for a running slot, until ctx ends or expired delivers
// (errQueueWait; nil waits for ever).
func (t *ticket) run(ctx context.Context, expired <-chan time.Time) error {
	select {
	case t.l.running <- struct{}{}:
		t.running = true
		return nil
	default:
	}
	select {
	case t.l.running <- struct{}{}:
		t.running = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return errQueueWait
	}
}

// release gives back the slot, if run took one, and the place.
func (t *ticket) release() {
	if t.running {
		<-t.l.running
	}
	<-t.l.admitted
}

// slots is how many generations run at once.
func (l *limiter) slots() int { return cap(l.running) }

// admittedCount is how many generations are running or queued.
func (l *limiter) admittedCount() int { return len(l.admitted) }

// runningCount is how many generations hold a slot.
func (l *limiter) runningCount() int { return len(l.running) }
