package api

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
	// edge, when set, is called as the admitted reach the slots or fill
	// the queue, and as they fall back from either (Config.LoadChanged).
	edge func()
	// count is the admitted, counted apart from the channel: each change
	// returns a value of its own, so a crossing is called once, where
	// releases that read the channel's length together had each seen
	// the same edge.
	count atomic.Int32
	// held is which generation holds each slot, by slot id (nil: idle),
	// for GET /slots. A ticket that gets a running place takes the
	// lowest idle id, so that ids stay in 0 … slots−1 as llama-server's.
	mu   sync.Mutex
	held []*slotUse
}

func newLimiter(running, queued int, edge func()) *limiter {
	return &limiter{admitted: make(chan struct{}, running+queued), running: make(chan struct{}, running), edge: edge,
		held: make([]*slotUse, running)}
}

// atEdge reports whether n admitted is where the load changes as peers
// see it: every slot taken, or the queue full.
func (l *limiter) atEdge(n int) bool { return n == cap(l.running) || n == cap(l.admitted) }

// ticket is one admitted generation: a place among the running and queued
// ones, and, once run returns nil, a running slot.
type ticket struct {
	l       *limiter
	running bool
	use     *slotUse // the slot it holds once running
}

// admit takes a place, or fails at once with errQueueFull. A generation
// is prepared while it holds a place and no slot, so that preparing it
// delays no running generation while the queue still bounds how many
// wait.
func (l *limiter) admit() (*ticket, error) {
	select {
	case l.admitted <- struct{}{}:
		if n := l.count.Add(1); l.edge != nil && l.atEdge(int(n)) {
			l.edge()
		}
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
		t.take()
		return nil
	default:
	}
	select {
	case t.l.running <- struct{}{}:
		t.take()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return errQueueWait
	}
}

// take marks t running in the lowest idle slot. The running channel has
// let it in, so one is idle.
func (t *ticket) take() {
	t.running = true
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	for id, u := range t.l.held {
		if u == nil {
			t.use = &slotUse{id: id, task: -1}
			t.l.held[id] = t.use
			return
		}
	}
}

// release gives back the slot, if run took one, and the place.
func (t *ticket) release() {
	if t.running {
		t.l.mu.Lock()
		if t.use != nil {
			t.l.held[t.use.id] = nil
		}
		t.l.mu.Unlock()
		<-t.l.running
	}
	n := t.l.count.Add(-1)
	<-t.l.admitted
	if t.l.edge != nil && t.l.atEdge(int(n)+1) {
		t.l.edge()
	}
}

// slots is how many generations run at once.
func (l *limiter) slots() int { return cap(l.running) }

// admittedCount is how many generations are running or queued.
func (l *limiter) admittedCount() int { return len(l.admitted) }

// runningCount is how many generations hold a slot.
func (l *limiter) runningCount() int { return len(l.running) }
