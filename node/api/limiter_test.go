package api

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestLimiterEdgesOnce: however admissions and releases interleave,
// each crossing of the edges (every slot taken, the queue full) calls
// edge once: a full limiter emptied by releases at once calls it twice
// on the way up and twice on the way down, never more.
func TestLimiterEdgesOnce(t *testing.T) {
	var calls atomic.Int32
	l := newLimiter(2, 1, func() { calls.Add(1) })
	for round := range 50000 {
		calls.Store(0)
		var tickets []*ticket
		for range 3 {
			tk, err := l.admit()
			if err != nil {
				t.Fatal(err)
			}
			tickets = append(tickets, tk)
		}
		var start, done sync.WaitGroup
		start.Add(1)
		for _, tk := range tickets {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				tk.release()
			}()
		}
		start.Done()
		done.Wait()
		if n := calls.Load(); n != 4 {
			t.Fatalf("round %d: %d calls, want 4", round, n)
		}
	}
}
