package hw

import (
	"context"
	"time"
)

// Clock is the time source of meters, probes and samplers, injected so that
// tests control it (hwtest.Clock).
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, returning ctx.Err() then.
	Sleep(ctx context.Context, d time.Duration) error
	// NewTicker delivers the time every d, like [time.NewTicker].
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of [time.Ticker] samplers use.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// SystemClock is the real [Clock].
type SystemClock struct{}

// Now returns time.Now(), with its monotonic reading.
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx is done.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewTicker wraps [time.NewTicker].
func (SystemClock) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

type systemTicker struct{ t *time.Ticker }

func (s systemTicker) C() <-chan time.Time { return s.t.C }
func (s systemTicker) Stop()               { s.t.Stop() }
