package ggufengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/hw"
)

// errClosed answers the work of an engine being closed.
var errClosed = errors.New("ggufengine: engine closed")

// errStep is a forward step that panicked.
var errStep = errors.New("ggufengine: the forward step failed")

// Scheduling defaults.
const (
	// DefaultPrefillChunk is the least share of a step the waiting
	// prompts get while it carries decode tokens; their share is as many
	// tokens as the step decodes, when that is more. A long prompt is
	// evaluated a share per step, so the sequences decoding meanwhile
	// slow down by one share's work per token rather than stall for the
	// whole prompt.
	DefaultPrefillChunk = 16
	// lingerMin and lingerMax bound how long the scheduler waits, after
	// a step, for the sequences it just served to come back with their
	// next token (they are emitting the last one): long enough that a
	// decode step carries every sequence, a small part of a step.
	lingerMin = 200 * time.Microsecond
	lingerMax = 5 * time.Millisecond
)

// sched runs the forward steps of an engine's serves. Each serve submits
// its work (a prompt, then one token at a time) and waits; the scheduler's
// goroutine evaluates the work of every waiting serve together in one
// model.Batch step: every decode token, and as much of the waiting
// prompts, oldest first, as the step's budget allows (while the step
// carries decode tokens, as many prompt tokens as decode tokens, and at
// least chunk). Results do not depend on what shares a step
// (model.Batch), so the scheduling is free to be greedy.
type sched struct {
	batch  *model.Batch
	budget int    // tokens a step evaluates at most
	chunk  int    // the least prompt tokens a step takes while it decodes
	unit   uint64 // work units a token evaluated counts (hw.WorkRecorder)
	after  func(time.Duration) <-chan time.Time
	now    func() time.Time

	mu      sync.Mutex
	queue   []*job // waiting for a step, oldest first
	out     int    // sequences handed a result and not yet back
	closed  bool
	last    time.Duration // the last step's duration
	stats   SchedStats
	wake    chan struct{} // a submission, a return or close
	stopped chan struct{}
}

// SchedStats counts the scheduler's steps.
type SchedStats struct {
	Steps       int64 // forward steps run
	Tokens      int64 // tokens evaluated
	DecodeSteps int64 // steps with at least one decode token
	MixedSteps  int64 // steps with a prompt chunk and a decode token
	MaxSeqs     int   // the most sequences one step carried
}

// job is one serve's work: tokens to evaluate on its session, then the
// next token picked from the logits after them. A speculative window
// (rows > 1) wants the logits after each of its last rows tokens, and is
// evaluated whole in one step, as a decode token is.
type job struct {
	seq    *seqHandle
	s      *model.Session
	tokens []uint32
	rows   int
	fed    int
	pick   func(b *model.Batch, i int) uint32 // nil: the logits' argmax
	work   hw.WorkRecorder
	res    chan jobResult // buffered: the scheduler never blocks on it
	// moved, if set, takes j.fed after each step that took part of the
	// tokens: buffered, holding the latest, so the scheduler never
	// blocks on it either.
	moved chan int

	inStep    bool // in the step running now (guarded by sched.mu)
	cancelled bool // its serve has given up on it
}

// logitsRows is how many logits rows j's last step wants (1 unless a
// window).
func (j *job) logitsRows() int { return max(j.rows, 1) }

type jobResult struct {
	next uint32
	err  error
}

// seqHandle is one serve's place in the scheduler.
type seqHandle struct {
	sc  *sched
	out bool // handed a result, not yet back (guarded by sched.mu)
}

func newSched(b *model.Batch, chunk int, unit uint64) *sched {
	sc := &sched{
		batch: b, budget: b.Tokens(), chunk: chunk, unit: unit,
		after: time.After, now: time.Now,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}),
	}
	go sc.loop()
	return sc
}

// signal wakes the scheduler's goroutine.
func (sc *sched) signal() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

// open starts a serve's sequence.
func (sc *sched) open() *seqHandle { return &seqHandle{sc: sc} }

// back marks h's serve as back from its last result: with the lock held.
func (h *seqHandle) back() {
	if h.out {
		h.out = false
		h.sc.out--
	}
}

// close ends the serve's sequence: the scheduler no longer waits for it.
func (h *seqHandle) close() {
	sc := h.sc
	sc.mu.Lock()
	h.back()
	sc.mu.Unlock()
	sc.signal()
}

// run evaluates tokens on s in the scheduler's steps and returns the token
// pick chooses from the logits after them (nil pick: their argmax, found
// where the logits are). On ctx's end it returns ctx's
// error once no step holds s any more (at most the step running now), so
// that the caller may reuse s; s then holds the tokens of the steps that
// ran.
func (h *seqHandle) run(ctx context.Context, s *model.Session, tokens []uint32, pick func(*model.Batch, int) uint32) (uint32, error) {
	return h.runJob(ctx, s, tokens, 1, pick, nil)
}

// runFed is run that calls moved, on the caller's goroutine, with how
// many of the tokens the steps have taken so far, after each step that
// took some but not all (a prompt longer than a step's share). A call
// may report several steps.
func (h *seqHandle) runFed(ctx context.Context, s *model.Session, tokens []uint32, pick func(*model.Batch, int) uint32, moved func(fed int)) (uint32, error) {
	return h.runJob(ctx, s, tokens, 1, pick, moved)
}

// runRows is run for a speculative window: tokens evaluated in one step,
// with the logits after each of the last rows of them for pick
// (model.Batch's LogitsAt and ArgMaxAt).
func (h *seqHandle) runRows(ctx context.Context, s *model.Session, tokens []uint32, rows int, pick func(*model.Batch, int) uint32) (uint32, error) {
	return h.runJob(ctx, s, tokens, rows, pick, nil)
}

// runJob is runRows, reporting to moved as runFed does.
func (h *seqHandle) runJob(ctx context.Context, s *model.Session, tokens []uint32, rows int, pick func(*model.Batch, int) uint32, moved func(fed int)) (uint32, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sc := h.sc
	j := &job{seq: h, s: s, tokens: tokens, rows: rows, pick: pick, work: hw.WorkFrom(ctx), res: make(chan jobResult, 1)}
	if moved != nil {
		j.moved = make(chan int, 1)
	}
	sc.mu.Lock()
	h.back()
	if sc.closed {
		sc.mu.Unlock()
		return 0, errClosed
	}
	sc.queue = append(sc.queue, j)
	sc.mu.Unlock()
	sc.signal()
wait:
	for {
		select {
		case r := <-j.res:
			return r.next, r.err
		case fed := <-j.moved: // nil, and never ready, without moved
			moved(fed)
		case <-ctx.Done():
			break wait
		}
	}
	sc.mu.Lock()
	if !j.inStep {
		if i := slices.Index(sc.queue, j); i >= 0 {
			sc.queue = slices.Delete(sc.queue, i, i+1)
			sc.mu.Unlock()
			return 0, ctx.Err()
		}
	}
	j.cancelled = true
	sc.mu.Unlock()
	<-j.res // the step holding s ends; the rest of the work is dropped
	return 0, ctx.Err()
}

// close stops the scheduler after the step it is running; waiting work
// fails with errClosed.
func (sc *sched) close() {
	sc.mu.Lock()
	sc.closed = true
	sc.mu.Unlock()
	sc.signal()
	<-sc.stopped
}

// Stats returns the scheduler's counters.
func (sc *sched) Stats() SchedStats {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.stats
}

func (sc *sched) loop() {
	defer close(sc.stopped)
	var (
		seqs []model.Seq
		jobs []*job
		next []uint32
	)
	for {
		if !sc.gather() {
			return
		}
		sc.mu.Lock()
		seqs, jobs = sc.compose(seqs[:0], jobs[:0])
		sc.mu.Unlock()
		if len(seqs) == 0 {
			// Not reached: every slot's token fits a step (newEngine sizes
			// the batch so). Wait for a change rather than spin.
			<-sc.wake
			continue
		}

		start := sc.now()
		var err error
		next, err = sc.step(seqs, jobs, next[:0])
		took := sc.now().Sub(start)

		sc.mu.Lock()
		sc.last = took
		sc.account(seqs, err)
		for i, j := range jobs {
			n := len(seqs[i].Tokens)
			j.inStep = false
			if err == nil {
				j.fed += n
				if j.work != nil {
					j.work.AddWork(uint64(n) * sc.unit)
				}
			}
			switch {
			case err != nil:
				sc.finish(j, jobResult{err: err})
			case j.fed == len(j.tokens):
				sc.finish(j, jobResult{next: next[i]})
			case j.cancelled:
				sc.finish(j, jobResult{err: context.Canceled})
			case j.moved != nil && n > 0:
				select { // the latest count replaces one not yet read
				case <-j.moved:
				default:
				}
				j.moved <- j.fed
			}
		}
		sc.mu.Unlock()
	}
}

// step runs one forward step and picks the next token of each sequence
// that asked for logits. A kernel that panics (a device that failed) fails
// the step's serves rather than the node: the serves batched with a
// request are not its to bring down.
func (sc *sched) step(seqs []model.Seq, jobs []*job, next []uint32) (_ []uint32, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errStep, p)
		}
	}()
	if err := sc.batch.Step(context.Background(), seqs); err != nil {
		return next, fmt.Errorf("ggufengine: %w", err)
	}
	next = slices.Grow(next[:0], len(seqs))[:len(seqs)]
	// The argmaxes first: on a device that finds them all at once, the
	// step and its argmaxes are then one recording, the same every step.
	for i, sq := range seqs {
		if sq.Logits > 0 && jobs[i].pick == nil {
			next[i] = sc.batch.ArgMax(i)
		}
	}
	for i, sq := range seqs {
		if sq.Logits > 0 && jobs[i].pick != nil {
			next[i] = jobs[i].pick(sc.batch, i)
		}
	}
	return next, nil
}

// gather waits until there is work, and then, briefly, for the sequences
// served by the last step to come back, so that the next step carries
// them too. It reports false when the scheduler is closed.
func (sc *sched) gather() bool {
	var deadline <-chan time.Time
	for {
		sc.mu.Lock()
		if sc.closed {
			for _, j := range sc.queue {
				j.res <- jobResult{err: errClosed}
			}
			sc.queue = nil
			sc.mu.Unlock()
			return false
		}
		ready := len(sc.queue) > 0
		if ready && sc.out == 0 {
			sc.mu.Unlock()
			return true
		}
		if ready && deadline == nil {
			deadline = sc.after(min(lingerMax, max(lingerMin, sc.last/8)))
		}
		sc.mu.Unlock()
		select {
		case <-sc.wake:
		case <-deadline:
			return true
		}
	}
}

// compose takes the next step's work from the queue: every waiting
// decode token (the single tokens), oldest first, then prompt chunks,
// oldest first, within the budget and the batch's logits rows. With the
// lock held.
func (sc *sched) compose(seqs []model.Seq, jobs []*job) ([]model.Seq, []*job) {
	left, rows := sc.budget, 0
	add := func(j *job, n int) {
		k := 0
		if j.fed+n == len(j.tokens) {
			k = j.logitsRows()
		}
		seqs = append(seqs, model.Seq{Session: j.s, Tokens: j.tokens[j.fed : j.fed+n], Logits: k})
		jobs = append(jobs, j)
		j.inStep = true
		left -= n
		rows += k
	}
	// Decode tokens and speculative windows, whole.
	for _, j := range sc.queue {
		if rem := len(j.tokens) - j.fed; rem == j.logitsRows() && left >= rem && rows+rem <= sc.batch.Seqs() {
			add(j, rem)
		}
	}
	// Fair shares: while sequences decode, the prompts waiting get as
	// many tokens of the step as the decode tokens do, and at least a
	// chunk; neither side can slow the other by much more than half.
	prompt := left
	if len(seqs) > 0 {
		prompt = min(left, max(sc.chunk, len(seqs)))
	}
	for _, j := range sc.queue {
		rem := len(j.tokens) - j.fed
		if rem < 2 || j.logitsRows() > 1 || prompt == 0 {
			continue
		}
		n := min(rem, prompt)
		if n == rem && rows >= sc.batch.Seqs() {
			n-- // no logits row left: all but the last token now
		}
		prompt -= n
		add(j, n)
	}
	return seqs, jobs
}

// finish hands j its result and drops it from the queue. With the lock
// held.
func (sc *sched) finish(j *job, r jobResult) {
	if i := slices.Index(sc.queue, j); i >= 0 {
		sc.queue = slices.Delete(sc.queue, i, i+1)
	}
	if !j.cancelled && r.err == nil {
		j.seq.out = true
		sc.out++
	}
	j.res <- r
}

// account counts a step in the stats. With the lock held.
func (sc *sched) account(seqs []model.Seq, err error) {
	if err != nil {
		return
	}
	st := &sc.stats
	st.Steps++
	st.MaxSeqs = max(st.MaxSeqs, len(seqs))
	decode, prompt := false, false
	for _, sq := range seqs {
		st.Tokens += int64(len(sq.Tokens))
		if sq.Logits == len(sq.Tokens) {
			decode = true
		} else {
			prompt = true
		}
	}
	if decode {
		st.DecodeSteps++
		if prompt {
			st.MixedSteps++
		}
	}
}
