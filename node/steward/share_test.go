package steward

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// lockstepEngine is a batching engine driven step by step by the test:
// every serve joins, and at each step first reports its work for the step
// (units per token, by the request's prompt length), then emits a token,
// as the GGUF engine's scheduler does. It runs on the CPU.
type lockstepEngine struct {
	engine.Engine
	units  map[uint32]uint64
	joined chan *lockstepSeq
}

type lockstepSeq struct {
	work  hw.WorkRecorder
	units uint64
	max   uint32
	cmd   chan bool // true: report the step's work; false: emit its token
	ack   chan error
	done  chan servedOrErr
	n     uint32
}

type servedOrErr struct {
	served *Served
	err    error
}

func (e *lockstepEngine) ReportsWork() bool  { return true }
func (e *lockstepEngine) Devices() hw.Domain { return hw.DomainCPU }

func (e *lockstepEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	q := &lockstepSeq{work: hw.WorkFrom(ctx), units: e.units[req.PromptTokens], max: req.MaxTokens,
		cmd: make(chan bool), ack: make(chan error), done: make(chan servedOrErr, 1)}
	if q.work == nil {
		return engine.Outcome{}, errors.New("lockstep: the serve's context carries no work recorder")
	}
	e.joined <- q
	out := engine.Outcome{TokensIn: uint32(len(prompt))}
	for out.TokensOut < req.MaxTokens {
		if <-q.cmd {
			q.work.AddWork(q.units)
			q.ack <- nil
			continue
		}
		err := emit(out.TokensOut)
		if err == nil {
			out.TokensOut++
			out.TokensAccepted++
		}
		if err != nil || out.TokensOut == req.MaxTokens {
			// The serve ends: the test waits for its receipt before the
			// next step, so the span closes at a known time.
			defer func() { q.ack <- err }()
			return out, err
		}
		q.ack <- nil
	}
	return out, nil
}

// lockstep drives the engine's serves through a steward on a fake clock.
type lockstep struct {
	t      *testing.T
	s      *Steward
	e      *lockstepEngine
	clk    *hwtest.Clock
	step   time.Duration
	active []*lockstepSeq
}

// start begins a serve of maxTokens whose tokens each cost units of work,
// under ceiling, and waits until its engine has joined.
func (l *lockstep) start(units uint64, maxTokens uint32, ceiling uint64) *lockstepSeq {
	promptTokens := uint32(len(l.e.units) + 1)
	l.e.units[promptTokens] = units
	done := make(chan servedOrErr, 1)
	go func() {
		served, err := l.s.Serve(context.Background(), genRequest(promptTokens, maxTokens, receipt.F1, ceiling), promptOf(int(promptTokens)), nil)
		done <- servedOrErr{served, err}
	}()
	select {
	case q := <-l.e.joined:
		q.done = done
		l.active = append(l.active, q)
		return q
	case r := <-done:
		l.t.Fatalf("the serve ended before its engine ran: %v", r.err)
		return nil
	}
}

// run takes n steps: the clock moves a step, every serve reports its
// work, then every serve emits; a serve that ends is waited for.
func (l *lockstep) run(n int) {
	for range n {
		if len(l.active) == 0 {
			return
		}
		l.clk.Advance(l.step)
		for _, q := range l.active {
			q.cmd <- true
			<-q.ack
		}
		var still []*lockstepSeq
		for _, q := range l.active {
			q.cmd <- false
			err := <-q.ack
			if q.n++; err != nil || q.n == q.max {
				r := <-q.done
				q.done <- r
				continue
			}
			still = append(still, q)
		}
		l.active = still
	}
}

func (q *lockstepSeq) result() servedOrErr {
	r := <-q.done
	q.done <- r
	return r
}

func newLockstep(t *testing.T, watts float64) (*lockstep, *hwtest.Counter) {
	clk := hwtest.NewClock(time.Unix(1_800_000_000, 0))
	c := hwtest.NewCounter("rapl", hw.DomainCPU, 10*time.Millisecond, clk, watts)
	ref := engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F2, UJPerToken: 1})
	e := &lockstepEngine{Engine: ref, units: map[uint32]uint64{}, joined: make(chan *lockstepSeq)}
	s := newSteward(t, Config{
		Meter:    hw.NewCounterMeter(c, hw.PowerModel{Watts: 10}, clk, nil),
		Backends: []Backend{{Name: "cpu", Engine: e}},
	})
	return &lockstep{t: t, s: s, e: e, clk: clk, step: 10 * time.Millisecond}, c
}

// TestBatchedServesSplitTheMeter: serves batched together are billed
// shares of the metered energy, by the work each did, and their receipts
// add up to what the counter measured over them; a serve alone is billed
// its own span, HwShunt, as before batching.
func TestBatchedServesSplitTheMeter(t *testing.T) {
	l, c := newLockstep(t, 30) // 300000 µJ a step
	before, _ := c.Read()
	x := l.start(1, 6, 1<<40)
	l.run(2) // x alone: 600000
	y := l.start(3, 4, 1<<40)
	l.run(4) // x ¼, y ¾ of 1200000; both end
	after, _ := c.Read()
	rx, ry := x.result(), y.result()
	if rx.err != nil || ry.err != nil {
		t.Fatalf("serves: %v, %v", rx.err, ry.err)
	}
	ex, ey := rx.served.Receipt.Receipt.Energy, ry.served.Receipt.Receipt.Energy
	if ex.Provenance() != hw.ModelBased || ey.Provenance() != hw.ModelBased {
		t.Errorf("batched serves graded %v and %v, want ModelBased (a measurement apportioned)", ex, ey)
	}
	if got, want := ex.UJ(), uint64(600_000+300_000); got+2 < want || got > want+2 {
		t.Errorf("x: %v, want about %d µJ", ex, want)
	}
	if sum := ex.UJ() + ey.UJ(); sum != after.UJ-before.UJ {
		t.Errorf("the receipts add up to %d µJ, the counter measured %d", sum, after.UJ-before.UJ)
	}
	for _, r := range []servedOrErr{rx, ry} {
		if _, err := receipt.Open(r.served.Receipt.Envelope, nil); err != nil {
			t.Fatal(err)
		}
	}

	start, _ := c.Read()
	z := l.start(5, 3, 1<<40)
	l.run(3)
	end, _ := c.Read()
	ez := z.result().served.Receipt.Receipt.Energy
	if m, ok := ez.MeasuredUJ(); ez.Provenance() != hw.HwShunt || !ok || m != end.UJ-start.UJ {
		t.Errorf("a serve alone: %v, want HwShunt %d µJ", ez, end.UJ-start.UJ)
	}
}

// TestBatchedServesCeilings: each serve is held to its own joule ceiling
// by its own share: a heavy serve batched with a light one is stopped at
// its ceiling while the light one goes on (and is stopped by its own,
// later, once it bears the whole machine alone).
func TestBatchedServesCeilings(t *testing.T) {
	l, c := newLockstep(t, 30)
	before, _ := c.Read()
	heavy := l.start(9, 50, 1_000_000) // 270000 µJ a step while shared
	light := l.start(1, 50, 1_000_000) // 30000, then 300000 alone
	l.run(50)
	after, _ := c.Read()
	rh, rl := heavy.result(), light.result()
	for name, r := range map[string]servedOrErr{"heavy": rh, "light": rl} {
		if !errors.Is(r.err, ErrCeilingReached) || r.served == nil {
			t.Fatalf("%s: %v, want stopped at its ceiling", name, r.err)
		}
		if e := r.served.Receipt.Receipt.Energy.UJ(); e > 1_000_000+300_000 {
			t.Errorf("%s: billed %d µJ, past its ceiling and a step", name, e)
		}
	}
	if nh, nl := len(rh.served.Output), len(rl.served.Output); nh != 3 || nl != 6 {
		t.Errorf("the heavy serve made %d tokens and the light one %d, want 3 and 6", nh, nl)
	}
	eh, el := rh.served.Receipt.Receipt.Energy.UJ(), rl.served.Receipt.Receipt.Energy.UJ()
	if eh+el != after.UJ-before.UJ {
		t.Errorf("the receipts add up to %d µJ, the counter measured %d", eh+el, after.UJ-before.UJ)
	}
}
