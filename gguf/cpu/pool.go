package cpu

import (
	"sync"
	"sync/atomic"
)

// job is one parallel kernel: do runs task t on worker w (0 ≤ w < threads),
// which indexes the worker's scratch. Kernels are structs held by the
// Backend, so handing one to the pool allocates nothing.
type job interface {
	do(w, t int)
}

// pool is a fixed set of worker goroutines that run the tasks of one job
// at a time, the calling goroutine taking part as worker 0. Tasks are
// handed out by an atomic counter, so uneven tasks balance themselves.
type pool struct {
	threads int
	wake    []chan struct{} // one per helper (workers 1 … threads-1)
	done    sync.WaitGroup
	exited  sync.WaitGroup

	// The current job; written by run before it wakes the helpers (the
	// channel send orders it) and read by them until they call done.Done.
	j    job
	n    int
	next atomic.Int64
}

func newPool(threads int) *pool {
	p := &pool{threads: threads, wake: make([]chan struct{}, threads-1)}
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		p.exited.Add(1)
		go p.helper(i + 1)
	}
	return p
}

func (p *pool) helper(w int) {
	defer p.exited.Done()
	for range p.wake[w-1] {
		p.work(w)
		p.done.Done()
	}
}

func (p *pool) work(w int) {
	for {
		t := int(p.next.Add(1) - 1)
		if t >= p.n {
			return
		}
		p.j.do(w, t)
	}
}

// run runs tasks 0 … n-1 of j and returns when all are done. Calls must
// not overlap (the Backend's mutex sees to it).
func (p *pool) run(n int, j job) {
	if n <= 0 {
		return
	}
	helpers := min(len(p.wake), n-1)
	if helpers == 0 {
		for t := range n {
			j.do(0, t)
		}
		return
	}
	p.j, p.n = j, n
	p.next.Store(0)
	p.done.Add(helpers)
	for i := range helpers {
		p.wake[i] <- struct{}{}
	}
	p.work(0)
	p.done.Wait()
	p.j = nil
}

// close stops the helpers and waits for them to exit.
func (p *pool) close() {
	for _, c := range p.wake {
		close(c)
	}
	p.exited.Wait()
}

// split returns the bounds of part t of n items cut into parts of size
// chunk.
func split(t, chunk, n int) (lo, hi int) {
	lo = t * chunk
	return lo, min(lo+chunk, n)
}

// ceilDiv is ⌈a / b⌉ for positive b.
func ceilDiv(a, b int) int { return (a + b - 1) / b }
