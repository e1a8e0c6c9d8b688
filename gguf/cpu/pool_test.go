package cpu

import (
	"sync/atomic"
	"testing"
	"time"
)

// countJob records how often each task ran and on which workers.
type countJob struct {
	runs    []atomic.Int32
	workers [8]atomic.Int32
}

func (c *countJob) do(w, t int) {
	c.runs[t].Add(1)
	c.workers[w].Add(1)
}

// TestPoolRunsEveryTaskOnce runs jobs of many sizes back to back (helpers
// polling) and after idle gaps (helpers parked), for several thread
// counts, and checks each task ran exactly once and run returned only
// after all had.
func TestPoolRunsEveryTaskOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4} {
		p := newPool(threads)
		for i, n := range []int{1, 2, 3, 7, 64, 1000, 5, 0, 17} {
			if i == 4 {
				time.Sleep(2 * spinFor) // let the helpers park
			}
			c := &countJob{runs: make([]atomic.Int32, n)}
			p.run(n, c)
			for task := range n {
				if got := c.runs[task].Load(); got != 1 {
					t.Fatalf("threads %d, n %d: task %d ran %d times", threads, n, task, got)
				}
			}
			total := int32(0)
			for w := range c.workers {
				total += c.workers[w].Load()
				if w >= threads && c.workers[w].Load() != 0 {
					t.Fatalf("threads %d: worker %d ran tasks", threads, w)
				}
			}
			if total != int32(n) {
				t.Fatalf("threads %d, n %d: %d runs", threads, n, total)
			}
		}
		p.close()
	}
}

// TestPoolHelpersShare checks that helpers take part: with tasks long
// enough to outlast a wake-up, more than one worker runs some.
func TestPoolHelpersShare(t *testing.T) {
	p := newPool(2)
	defer p.close()
	slow := &sleepJob{}
	for range 20 {
		p.run(8, slow)
	}
	if slow.workers[1].Load() == 0 {
		t.Fatal("the helper never ran a task")
	}
}

type sleepJob struct{ workers [2]atomic.Int32 }

func (s *sleepJob) do(w, _ int) {
	s.workers[w].Add(1)
	time.Sleep(200 * time.Microsecond)
}
