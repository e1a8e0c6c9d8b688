// Package hwtest provides fakes for testing code that meters energy: a
// clock the test moves by hand and counters whose readings follow it.
package hwtest

import (
	"context"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
)

// Clock is a fake [hw.Clock]. Time moves only when the test calls Advance
// or a caller Sleeps (which advances at once), so code under test runs
// deterministically and instantly.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*ticker
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep advances the clock by d at once, unless ctx is already done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Advance moves the clock forward by d. Each ticker due on the way fires
// at its own time, in order, and Advance waits until its tick has been
// received (or the ticker stopped), so a sampler driven by the ticker has
// seen every tick before the next one.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due *ticker
		for _, t := range c.tickers {
			if !t.next.After(target) && (due == nil || t.next.Before(due.next)) {
				due = t
			}
		}
		if due == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		at := due.next
		c.now = at
		due.next = at.Add(due.period)
		c.mu.Unlock()
		select {
		case due.c <- at:
		case <-due.stopped:
		}
	}
}

// NewTicker returns a ticker that fires as Advance passes its times.
func (c *Clock) NewTicker(d time.Duration) hw.Ticker {
	if d <= 0 {
		panic("hwtest: non-positive ticker period")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &ticker{clock: c, c: make(chan time.Time), stopped: make(chan struct{}), period: d, next: c.now.Add(d)}
	c.tickers = append(c.tickers, t)
	return t
}

// Tickers reports how many tickers are running, so a test can wait for a
// sampler to start before advancing.
func (c *Clock) Tickers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tickers)
}

type ticker struct {
	clock   *Clock
	c       chan time.Time
	stopped chan struct{}
	once    sync.Once
	period  time.Duration
	next    time.Time
}

func (t *ticker) C() <-chan time.Time { return t.c }

func (t *ticker) Stop() {
	t.once.Do(func() {
		close(t.stopped)
		c := t.clock
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.tickers {
			if x == t {
				c.tickers = append(c.tickers[:i], c.tickers[i+1:]...)
				break
			}
		}
	})
}

// Counter is a fake [hw.Counter] drawing constant power on a [Clock].
// Its knobs may be changed between reads to script faults.
type Counter struct {
	name    string
	domains hw.Domain
	window  time.Duration
	clock   *Clock
	origin  time.Time

	mu      sync.Mutex
	watts   float64
	quantum time.Duration
	frozen  bool
	err     error
	epoch   uint64
	base    uint64 // energy banked before the last power change
	since   time.Time
}

// NewCounter returns a counter named name over domains with the given
// minimum window, drawing watts from now on.
func NewCounter(name string, domains hw.Domain, window time.Duration, clock *Clock, watts float64) *Counter {
	now := clock.Now()
	return &Counter{name: name, domains: domains, window: window, clock: clock, origin: now, since: now, watts: watts}
}

// Name returns the name given to NewCounter.
func (c *Counter) Name() string { return c.name }

// Domains returns the domains given to NewCounter.
func (c *Counter) Domains() hw.Domain { return c.domains }

// MinWindow returns the window given to NewCounter.
func (c *Counter) MinWindow() time.Duration { return c.window }

// Read returns the energy drawn so far, as published: frozen, quantised to
// whole multiples of the lump period, or failing, as scripted.
func (c *Counter) Read() (hw.Reading, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return hw.Reading{}, c.err
	}
	uj := c.energyAt(c.clock.Now())
	return hw.Reading{UJ: uj, Live: uj, Epoch: c.epoch}, nil
}

func (c *Counter) energyAt(t time.Time) uint64 {
	if c.frozen {
		t = c.since
	}
	if c.quantum > 0 {
		t = c.origin.Add(t.Sub(c.origin).Truncate(c.quantum))
		if t.Before(c.since) {
			t = c.since
		}
	}
	return c.base + uint64(c.watts*t.Sub(c.since).Seconds()*1e6)
}

// SetWatts changes the power drawn from now on.
func (c *Counter) SetWatts(w float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.base = c.energyAt(now)
	c.since, c.watts = now, w
}

// SetLumps makes the counter publish only at whole multiples of period
// since its creation (zero: continuously), like a counter republished in
// lumps.
func (c *Counter) SetLumps(period time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quantum = period
}

// Freeze stops the published value where it is now.
func (c *Counter) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.base = c.energyAt(now)
	c.since, c.frozen = now, true
}

// Fail makes every read return err (nil: reads succeed again).
func (c *Counter) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// Reset starts a new epoch, as a driver reload would.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
}
