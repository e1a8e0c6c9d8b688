package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// job is one parallel kernel: do runs task t on worker w (0 ≤ w < threads),
// which indexes the worker's scratch. Kernels are structs held by the
// Backend, so handing one to the pool allocates nothing.
type job interface {
	do(w, t int)
}

// spinFor is how long an idle helper keeps polling for the next job before
// it parks. The kernels of a forward pass follow each other within
// microseconds, while waking a parked goroutine takes tens of them (more on
// a busy machine), a good part of a kernel at decode sizes: so, like
// ggml's threads, helpers poll between kernels and park only when the
// model is idle.
const spinFor = 100 * time.Microsecond

// jobState is one job's task counters. The pool alternates between two, so
// a helper still leaving the previous job never sees the next one's
// counters reset under it.
type jobState struct {
	j    job
	n    int64
	next atomic.Int64 // the next task to hand out
	done atomic.Int64 // tasks finished
	refs atomic.Int32 // helpers inside this job
}

// pool is a fixed set of helper goroutines that run the tasks of one job
// at a time, the calling goroutine taking part as worker 0. Tasks are
// handed out by an atomic counter and run returns when the last is done,
// not when every helper has checked in: a helper that is slow to wake, or
// descheduled by the OS, holds up no more than a task it has taken.
type pool struct {
	threads int
	states  [2]jobState
	cur     atomic.Pointer[jobState]
	gen     atomic.Uint64

	sleeping []atomic.Bool   // per helper: parked, or about to be
	wake     []chan struct{} // per helper: a parked helper's wake-up
	quit     chan struct{}
	exited   sync.WaitGroup
}

func newPool(threads int) *pool {
	p := &pool{
		threads:  threads,
		sleeping: make([]atomic.Bool, threads),
		wake:     make([]chan struct{}, threads),
		quit:     make(chan struct{}),
	}
	for w := 1; w < threads; w++ {
		p.wake[w] = make(chan struct{}, 1)
		p.exited.Add(1)
		go p.helper(w)
	}
	return p
}

// run runs tasks 0 … n-1 of j and returns when all are done. Calls must
// not overlap (the Backend's mutex sees to it).
func (p *pool) run(n int, j job) {
	if n <= 0 {
		return
	}
	if n == 1 || p.threads == 1 {
		for t := range n {
			j.do(0, t)
		}
		return
	}
	g := p.gen.Load() + 1
	st := &p.states[g%2]
	for st.refs.Load() != 0 {
		runtime.Gosched() // a helper is still leaving the job before last
	}
	st.j, st.n = j, int64(n)
	st.next.Store(0)
	st.done.Store(0)
	p.cur.Store(st)
	p.gen.Store(g)
	for w := 1; w < p.threads; w++ {
		// A parked helper needs waking; run and the helper race to clear
		// sleeping, and only the winner's side sends or waits.
		if p.sleeping[w].CompareAndSwap(true, false) {
			p.wake[w] <- struct{}{}
		}
	}
	st.work(0)
	for i := 0; st.done.Load() < st.n; i++ {
		if i%64 == 63 {
			runtime.Gosched() // a helper is finishing a task
		}
	}
}

func (st *jobState) work(w int) {
	for {
		t := st.next.Add(1) - 1
		if t >= st.n {
			return
		}
		st.j.do(w, int(t))
		st.done.Add(1)
	}
}

// helper runs each job it finds: it polls for a new generation for
// spinFor after a job, then parks until run wakes it.
func (p *pool) helper(w int) {
	defer p.exited.Done()
	var seen uint64
	for {
		g, ok := p.await(w, seen)
		if !ok {
			return
		}
		seen = g
		st := p.cur.Load()
		st.refs.Add(1)
		if p.cur.Load() == st { // not swapped (and about to be reset) meanwhile
			st.work(w)
		}
		st.refs.Add(-1)
	}
}

// await returns the generation after seen once there is one, or false
// when the pool closes.
func (p *pool) await(w int, seen uint64) (uint64, bool) {
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		if g := p.gen.Load(); g != seen {
			return g, true
		}
		if i%64 == 63 && time.Now().After(deadline) {
			break
		}
	}
	for {
		p.sleeping[w].Store(true)
		if g := p.gen.Load(); g != seen {
			if !p.sleeping[w].CompareAndSwap(true, false) {
				<-p.wake[w] // run won the race and is sending
			}
			return g, true
		}
		select {
		case <-p.wake[w]:
			if g := p.gen.Load(); g != seen {
				return g, true
			}
		case <-p.quit:
			return 0, false
		}
	}
}

// close stops the helpers and waits for them to exit.
func (p *pool) close() {
	close(p.quit)
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
