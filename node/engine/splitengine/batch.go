package splitengine

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Concurrent serves share the pipeline's steps. A split model's step is a
// round trip through its stages, which waits on the links more than on the
// arithmetic, so serves stepping one at a time would each wait for the
// others' trips: a step carries every serve's tokens that wait when it
// starts, as many as it holds (the pipeline's output rows, the batch's
// tokens), first come first served. A serve's rows do not depend on what
// shares their step, so its tokens are those it decodes alone.
//
// There is no scheduler goroutine: a serve whose step waits takes the
// turn on the pipeline when it is free (Engine.turn) and runs one step of
// the steps waiting then, its own among them or not, until its own is
// done (stepReq.done).

// stepReq is a serve's step waiting for the pipeline.
type stepReq struct {
	r    *run
	seq  stage.Seq
	done chan stepDone // buffered: a step's leader never waits on it
}

// stepDone is a step's answer to one of its serves.
type stepDone struct {
	res stage.Result
	err error
}

// stepShared queues r's step of seq, and returns its answer once a step
// has carried it: one this goroutine leads, or another's.
func (e *Engine) stepShared(r *run, seq stage.Seq) (stage.Result, error) {
	q := &stepReq{r: r, seq: seq, done: make(chan stepDone, 1)}
	e.qmu.Lock()
	e.queue = append(e.queue, q)
	e.qmu.Unlock()
	for {
		select {
		case d := <-q.done:
			return d.res, d.err
		case e.turn <- struct{}{}:
			e.lead()
			<-e.turn
		}
	}
}

// lead runs one step of the steps waiting (holding the turn).
func (e *Engine) lead() {
	e.mu.Lock()
	defer e.mu.Unlock()
	batch := e.take()
	if len(batch) == 0 {
		return
	}
	live := batch[:0]
	for _, q := range batch {
		if e.p == nil || q.r.p != nil && q.r.p != e.p {
			q.done <- stepDone{err: fmt.Errorf("%w: %w", engine.ErrUnavailable, ErrLost)}
			continue
		}
		// Read by its serve once done is received.
		q.r.p = e.p
		live = append(live, q)
	}
	if len(live) == 0 {
		return
	}
	seqs := make([]stage.Seq, len(live))
	for i, q := range live {
		seqs[i] = q.seq
	}
	// A step is never cut off half-sent (run.step): it runs to its end,
	// within the step timeout, whatever its serves' contexts.
	sctx, cancel := context.WithTimeout(context.Background(), e.cfg.StepTimeout)
	defer cancel()
	start := e.cfg.Now()
	res, err := e.p.Step(sctx, seqs)
	took := e.cfg.Now().Sub(start)
	answers := make([]stage.Result, len(live))
	for i, q := range live {
		q.r.took = took
		if err != nil || q.seq.Out == stagewire.OutNone {
			continue
		}
		if len(res) == 0 {
			err = fmt.Errorf("splitengine: the last stage answered %d results, fewer than the step asked", len(seqs))
			break
		}
		if err = e.checkResult(res[:1], q.seq.Out, q.seq.Rows); err != nil {
			break
		}
		answers[i], res = res[0], res[1:]
	}
	if err == nil && len(res) > 0 {
		err = fmt.Errorf("splitengine: the last stage answered %d results more than the step asked", len(res))
	}
	if err != nil {
		// The chain's state is unknown after a failed step: drop the
		// pipeline rather than go on with it.
		e.drop(err)
		for _, q := range live {
			q.done <- stepDone{err: fmt.Errorf("%w: %w: %w", engine.ErrUnavailable, ErrLost, err)}
		}
		return
	}
	if k, ok := decodingStep(live); ok && e.pace.observe(k, took, start) {
		select {
		case e.drifted <- struct{}{}:
		default:
		}
	}
	// Each serve's tokens in the step did the head's share of its work.
	unit := uint64(max(1, e.p.WeightBytes()))
	for i, q := range live {
		if q.r.work != nil {
			q.r.work.AddWork(uint64(len(q.seq.Tokens)) * unit)
		}
		q.done <- stepDone{res: answers[i]}
	}
}

// decodingStep is the kind of step batch made, where it is weighed
// against the measured ones (pace): a decoding step, every serve in it
// sending a token or a window and asking for the same output, weighed as
// one serve's window of all their rows (a row costs about the same
// whoever's it is; a step shared by serves that are all decoding is what
// a busy pipeline makes). A prompt's step, or a measuring request's, is
// not weighed.
func decodingStep(batch []*stepReq) (paceKey, bool) {
	k := paceKey{want: batch[0].seq.Out}
	for _, q := range batch {
		if q.r.measuring || q.seq.Out != k.want || k.want == stagewire.OutNone || len(q.seq.Tokens) != q.seq.Rows {
			return paceKey{}, false
		}
		k.rows += q.seq.Rows
	}
	return k, true
}

// take removes the steps the next step carries from the queue: the
// first, and those after it while the step holds their output rows and
// tokens. A measuring request's steps go alone, as does each step of an
// engine told to (Engine.alone), so that their times are their own.
// Holding e.mu.
func (e *Engine) take() []*stepReq {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	if len(e.queue) == 0 {
		return nil
	}
	rowCap := 1
	if e.p != nil {
		rowCap = e.p.Rows()
	}
	if e.cfg.Rows > 0 {
		rowCap = min(rowCap, e.cfg.Rows)
	}
	n, rows, tokens := 0, 0, 0
	for _, q := range e.queue {
		r := stagewire.ActSeq{Out: q.seq.Out, Rows: uint32(max(q.seq.Rows, 0))}.OutRows()
		if n > 0 && (e.alone || q.r.measuring || e.queue[0].r.measuring || rows+r > rowCap || tokens+len(q.seq.Tokens) > e.cfg.Batch) {
			break
		}
		n, rows, tokens = n+1, rows+r, tokens+len(q.seq.Tokens)
	}
	batch := append([]*stepReq(nil), e.queue[:n]...)
	e.queue = append(e.queue[:0], e.queue[n:]...)
	return batch
}
