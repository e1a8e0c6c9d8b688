package meters

import (
	"context"
	"errors"
	"sync"
)

// Serve keeps the selection's counters fresh until ctx is done: it runs
// their samplers (INA3221) and reads the counter now and then so that a
// wrapping counter (RAPL) is never left long enough to wrap unseen. Until
// Serve runs, a sampled counter's reads are stale and spans fall back to
// the estimator.
func (s *Selection) Serve(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(s.serves))
	for i, serve := range s.serves {
		wg.Go(func() { errs[i] = serve(ctx) })
	}
	if s.counter == nil {
		<-ctx.Done()
	} else {
		t := s.clock.NewTicker(keepalive)
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-t.C():
				if _, err := s.counter.Read(); err != nil {
					s.log.Debug("energy counter keepalive read failed", "counter", s.counter.Name(), "err", err)
				}
			}
		}
		t.Stop()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close releases the counters (NVML, the IOReport subscription).
func (s *Selection) Close() error {
	var errs []error
	s.once.Do(func() {
		for _, c := range s.closers {
			errs = append(errs, c())
		}
	})
	return errors.Join(errs...)
}
