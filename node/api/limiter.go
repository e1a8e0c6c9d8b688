package api

import (
	"context"
	"errors"
)

var errQueueFull = errors.New("api: queue full")

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

func (l *limiter) acquire(ctx context.Context) (func(), error) {
	select {
	case l.admitted <- struct{}{}:
	default:
		return nil, errQueueFull
	}
	select {
	case l.running <- struct{}{}:
		return func() { <-l.running; <-l.admitted }, nil
	case <-ctx.Done():
		<-l.admitted
		return nil, ctx.Err()
	}
}

// admittedCount is how many generations are running or queued.
func (l *limiter) admittedCount() int { return len(l.admitted) }
