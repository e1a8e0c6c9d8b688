package stage

import (
	"context"
	"crypto/ed25519"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// keyOf is node n's key: its endpoint id is its public key, so a stage's
// report can be held to the node the plan placed it on.
func keyOf(t testing.TB, n byte) *identity.Key {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n*7 + byte(i)
	}
	k, err := identity.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sealerOf(t testing.TB, k *identity.Key) *receipt.Sealer {
	t.Helper()
	s, err := receipt.NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// metering is the fake hardware of a test: one clock, and per node a
// live counter covering the CPU at the given watts, behind the meter a
// node would choose for it.
type metering struct {
	clock    *hwtest.Clock
	counters map[identity.EndpointID]*hwtest.Counter
}

func newMetering() *metering {
	return &metering{clock: hwtest.NewClock(time.Unix(1_800_000_000, 0)), counters: map[identity.EndpointID]*hwtest.Counter{}}
}

func (mt *metering) meter(id identity.EndpointID, watts float64) *hw.CounterMeter {
	c := hwtest.NewCounter("fake-rapl", hw.DomainCPU, 10*time.Millisecond, mt.clock, watts)
	mt.counters[id] = c
	return hw.NewCounterMeter(c, hw.PowerModel{Watts: watts + 5, Source: "test"}, mt.clock, nil)
}

// reportingNet is a pipeNet whose stage nodes meter on their own fake
// counters and sign with their own keys.
func reportingNet(t *testing.T, mt *metering, keys ...*identity.Key) *pipeNet {
	t.Helper()
	ids := make([]identity.EndpointID, len(keys))
	for i, k := range keys {
		ids[i] = k.ID()
	}
	pn := newPipeNet(t, fortunes(t), ids...)
	for i, k := range keys {
		srv := pn.servers[k.ID()]
		srv.Meter, srv.Uses, srv.Signer = mt.meter(k.ID(), float64(20+10*i)), hw.DomainCPU, sealerOf(t, k)
	}
	return pn
}

// pipelineEngine is the split model as a serve's engine: it prefills the
// prompt and decodes greedily through a Pipeline, then finishes the
// request and hands its reports to the steward (engine.Outcome.Split).
// It is a test's engine, one serve at a time, and advances the fake
// clock by a step's time after each step.
type pipelineEngine struct {
	p     *Pipeline
	clock *hwtest.Clock
	next  uint64
}

func (e *pipelineEngine) Recipe() string             { return "meshnode-fortunes-split" }
func (e *pipelineEngine) Fidelity() receipt.Fidelity { return receipt.F2 }
func (e *pipelineEngine) UJPerToken() uint64         { return 1000 }
func (e *pipelineEngine) UJPerOptionScored() uint64  { return 1000 }
func (e *pipelineEngine) Deterministic() bool        { return true }
func (e *pipelineEngine) Weights() (receipt.Weights, bool) {
	return receipt.Weights{Digest: receipt.ContentID(fortunesDigest), Precision: "q8_0"}, true
}
func (e *pipelineEngine) Devices() hw.Domain { return hw.DomainCPU }

func (e *pipelineEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	id, err := req.ID()
	if err != nil {
		return engine.Outcome{}, err
	}
	e.next++
	r := e.next
	out := engine.Outcome{TokensIn: uint32(len(prompt))}
	toks := prompt
	for range req.MaxTokens {
		res, err := e.p.Step(ctx, []Seq{{Request: r, Tokens: toks, Out: stagewire.OutToken}})
		if err != nil {
			return out, err
		}
		e.clock.Advance(30 * time.Millisecond)
		if err := emit(res[0].Token); err != nil {
			return out, err
		}
		out.TokensOut++
		out.TokensAccepted++
		toks = []uint32{res[0].Token}
	}
	if out.Split, err = e.p.Finish(ctx, r, id); err != nil {
		return out, err
	}
	return out, nil
}

// TestSplitServeReceipt: a serve of the built-in model in three stages on
// three nodes, each metering on its own counters: the stages' reports
// come back to the head signed by their nodes, and the steward seals a
// receipt carrying all three parts whose energy is their total, which
// verifies as a receipt's stages must.
func TestSplitServeReceipt(t *testing.T) {
	mt := newMetering()
	headKey, k2, k3 := keyOf(t, 1), keyOf(t, 2), keyOf(t, 3)
	pn := reportingNet(t, mt, k2, k3)
	places := []Placement{
		{Peer: headKey.ID(), Range: model.LayerRange{Lo: 0, Hi: 1}},
		{Peer: k2.ID(), Range: model.LayerRange{Lo: 1, Hi: 3}},
		{Peer: k3.ID(), Range: model.LayerRange{Lo: 3, Hi: 4}},
	}
	p := startPipeline(t, fortunes(t), pipeDialer{pn, headKey.ID()}, headKey.ID(), places, stagewire.DTypeF32)
	st, err := steward.New(steward.Config{Key: headKey, Meter: mt.meter(headKey.ID(), 40),
		Backends: []steward.Backend{{Name: "fortunes-split", Engine: &pipelineEngine{p: p, clock: mt.clock}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := receipt.ServeRequest{PromptHash: receipt.PromptHash([]byte("Love is")), PromptTokens: 4, MaxTokens: 5,
		FidelityFloor: receipt.F1, JouleCeilingUJ: 1 << 40}
	served, err := st.Serve(t.Context(), req, []uint32{1, 19556, 338, 29871}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := receipt.Open(served.Receipt.Envelope, headKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	r := sealed.Receipt
	if len(r.Stages) != 3 {
		t.Fatalf("%d stage reports, want 3", len(r.Stages))
	}
	// 4 prompt positions and 4 decoded tokens fed back; the fifth token is
	// the last step's answer and runs through nobody.
	const positions = 4 + 4
	for i, s := range r.Stages {
		key := []*identity.Key{headKey, k2, k3}[i]
		if !s.SignedBy(key.Public()) || int(s.Lo) != places[i].Range.Lo || int(s.Hi) != places[i].Range.Hi || s.Tokens != positions {
			t.Errorf("stage %d: %+v", i, s.StageReport)
		}
		// Each node metered the request alone on a live counter for 150 ms
		// of the fake clock: a hardware reading.
		if s.Energy.Provenance() != hw.HwShunt {
			t.Errorf("stage %d graded %v", i, s.Energy)
		}
	}
	// 150 ms at 20 W and 30 W on the stage nodes, as their counters read.
	if m, _ := r.Stages[1].Energy.MeasuredUJ(); m != 3_000_000 {
		t.Errorf("stage 1 measured %d µJ, want 3 J", m)
	}
	if m, _ := r.Stages[2].Energy.MeasuredUJ(); m != 4_500_000 {
		t.Errorf("stage 2 measured %d µJ, want 4.5 J", m)
	}
	total, err := receipt.SumEnergy(r.Stages[0].Energy, r.Stages[1].Energy, r.Stages[2].Energy)
	if err != nil || r.Energy != total || r.Energy.Provenance() != hw.HwShunt {
		t.Fatalf("receipt energy %v, the parts add to %v (%v)", r.Energy, total, err)
	}
}

// TestFinishBatchedRequests: two requests batched through two stages are
// each metered from their first Activation to their Finish on the stage
// node; their overlapping spans share the node's energy (ModelBased), and
// the shares add up to what the node's counter read from the first
// opening to the last closing, split by the positions each ran.
func TestFinishBatchedRequests(t *testing.T) {
	mt := newMetering()
	head, k2 := keyOf(t, 1), keyOf(t, 2)
	pn := reportingNet(t, mt, k2)
	p := startPipeline(t, fortunes(t), pipeDialer{pn, head.ID()}, head.ID(),
		[]Placement{{Peer: head.ID(), Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: k2.ID(), Range: model.LayerRange{Lo: 2, Hi: 4}}}, stagewire.DTypeF32)
	ctx := t.Context()
	c := mt.counters[k2.ID()]
	before, _ := c.Read()
	step := func(seqs ...Seq) {
		t.Helper()
		if _, err := p.Step(ctx, seqs); err != nil {
			t.Fatal(err)
		}
		mt.clock.Advance(40 * time.Millisecond)
	}
	step(Seq{1, []uint32{1, 319, 767}, stagewire.OutToken, 0}, Seq{2, []uint32{1, 450}, stagewire.OutToken, 0})
	step(Seq{1, []uint32{5}, stagewire.OutToken, 0}, Seq{2, []uint32{6}, stagewire.OutToken, 0})
	step(Seq{2, []uint32{7, 8}, stagewire.OutToken, 0})
	serve1, serve2 := receipt.Sum([]byte("serve 1")), receipt.Sum([]byte("serve 2"))
	s1, err := p.Finish(ctx, 1, serve1)
	if err != nil {
		t.Fatal(err)
	}
	mt.clock.Advance(40 * time.Millisecond)
	s2, err := p.Finish(ctx, 2, serve2)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := c.Read()
	if s1.Tokens != 4 || s2.Tokens != 5 || s1.Lo != 0 || s1.Hi != 2 || len(s1.Reports) != 1 || len(s2.Reports) != 1 {
		t.Fatalf("splits %+v %+v", s1, s2)
	}
	r1, r2 := s1.Reports[0], s2.Reports[0]
	if r1.RequestID != serve1 || r2.RequestID != serve2 || r1.Tokens != 4 || r2.Tokens != 5 {
		t.Fatalf("reports %+v / %+v", r1.StageReport, r2.StageReport)
	}
	for _, r := range []receipt.SignedStageReport{r1, r2} {
		if r.Energy.Provenance() != hw.ModelBased {
			t.Errorf("a batched request graded %v", r.Energy)
		}
	}
	m1, _ := r1.Energy.MeasuredUJ()
	m2, _ := r2.Energy.MeasuredUJ()
	if m1+m2 != after.UJ-before.UJ {
		t.Fatalf("shares %d + %d µJ, the counter read %d", m1, m2, after.UJ-before.UJ)
	}
	// By the work each did while both were open (120 ms at 20 W, 4
	// positions against 5), then request 2 alone for 40 ms.
	if m1 != 1_066_667 || m2 != 1_333_333+800_000 {
		t.Fatalf("shares %d and %d µJ, want 2.4 J split 4:5 and 0.8 J more", m1, m2)
	}
	// A finished request is gone from the stage: its next Activation
	// starts it anew at position 0.
	if _, err := p.Step(ctx, []Seq{{1, []uint32{1}, stagewire.OutToken, 0}}); err != nil {
		t.Fatalf("a finished request's id reused: %v", err)
	}
}

// blockingSigner never signs until released: a stage that does not answer.
type blockingSigner struct{ release chan struct{} }

func (b blockingSigner) SignStageReport(r receipt.StageReport) (receipt.SignedStageReport, error) {
	<-b.release
	return receipt.SignedStageReport{}, errors.New("released")
}

// TestFinishRefusesBadReports: Finish fails, and does not hang, when a
// stage signs with another key than its node's, reports without a signer,
// or does not report in time.
func TestFinishRefusesBadReports(t *testing.T) {
	mt := newMetering()
	head, k2 := keyOf(t, 1), keyOf(t, 2)
	places := []Placement{{Peer: head.ID(), Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: k2.ID(), Range: model.LayerRange{Lo: 2, Hi: 4}}}
	run := func(t *testing.T, signer Signer, timeout time.Duration) error {
		pn := reportingNet(t, mt, k2)
		pn.servers[k2.ID()].Signer = signer
		be := cpu.New(cpu.Options{Threads: 2})
		t.Cleanup(func() { be.Close() })
		p, err := Start(t.Context(), PipelineConfig{File: fortunes(t), Digest: fortunesDigest, Self: head.ID(), Stages: places,
			Context: 64, Batch: 16, Seqs: 2, Backend: be, Dial: pipeDialer{pn, head.ID()}, ReportTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		if _, err := p.Step(t.Context(), []Seq{{1, []uint32{1, 319}, stagewire.OutToken, 0}}); err != nil {
			t.Fatal(err)
		}
		_, err = p.Finish(t.Context(), 1, receipt.Sum([]byte("serve")))
		return err
	}
	t.Run("another node's key", func(t *testing.T) {
		if err := run(t, sealerOf(t, keyOf(t, 9)), 0); !errors.Is(err, ErrReport) {
			t.Fatalf("%v, want ErrReport", err)
		}
	})
	t.Run("no signer", func(t *testing.T) {
		if err := run(t, nil, 0); !errors.Is(err, stagewire.CodeRefused) {
			t.Fatalf("%v, want the stage's refusal", err)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		release := make(chan struct{})
		// Released before the cleanups stop the stage, which waits for
		// the step holding it.
		defer close(release)
		start := time.Now()
		err := run(t, blockingSigner{release}, 200*time.Millisecond)
		if !errors.Is(err, ErrReport) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 20*time.Second {
			t.Fatalf("%v after %v, want ErrReport on the deadline", err, time.Since(start))
		}
	})
}

// countingMeter is a hand-written meter that bills every span a fixed
// figure and counts what is opened and closed.
type countingMeter struct {
	mu             sync.Mutex
	opened, closed int
}

func (m *countingMeter) Open() (hw.Span, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opened++
	return countingSpan{m}, nil
}
func (m *countingMeter) MinWindow() time.Duration { return 0 }
func (m *countingMeter) Name() string             { return "counting" }
func (m *countingMeter) counts() (int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opened, m.closed
}

type countingSpan struct{ m *countingMeter }

func (s countingSpan) Close() (hw.Energy, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.closed++
	return hw.Estimated(77), nil
}

// TestServerFinish: a stage answers Finish only from its prev; reports a
// request it never saw as no work; closes the span of a request trimmed to
// 0 or stopped without reporting it; and a finished request is gone.
func TestServerFinish(t *testing.T) {
	f := fortunes(t)
	head, k2 := keyOf(t, 1), keyOf(t, 2)
	pn := newPipeNet(t, f, k2.ID())
	srv := pn.servers[k2.ID()]
	meter := &countingMeter{}
	srv.Meter, srv.Signer = meter, sealerOf(t, k2)
	h := dialRaw(t, pn, head.ID(), k2.ID())
	h.send(&stagewire.LoadStage{Stage: 1, Model: fortunesDigest, Lo: 2, Hi: 4, Context: 64, Batch: 16, Seqs: 2,
		Out: stagewire.DTypeF32, Prev: head.ID(), Head: head.ID()})
	if _, ok := h.read().(*stagewire.Ready); !ok {
		t.Fatal("not loaded")
	}
	c, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	act := func(request uint64, start, count uint32) *stagewire.Activation {
		return &stagewire.Activation{Stage: 1, DType: stagewire.DTypeF32, Width: uint32(c.Embd),
			Seqs: []stagewire.ActSeq{{Request: request, Start: start, Count: count, Out: stagewire.OutToken}}, F32: make([]float32, int(count)*c.Embd)}
	}
	serve := receipt.Sum([]byte("serve"))
	report := func(what string, request uint64) receipt.SignedStageReport {
		t.Helper()
		m, ok := h.read().(*stagewire.Report)
		if !ok || m.Stage != 1 || m.Request != request {
			t.Fatalf("%s: %+v", what, m)
		}
		r, err := receipt.OpenStageReport(m.Envelope)
		if err != nil || !r.SignedBy(k2.Public()) || r.RequestID != serve || r.Lo != 2 || r.Hi != 4 {
			t.Fatalf("%s: report %+v, %v", what, r.StageReport, err)
		}
		return r
	}

	stranger := dialRaw(t, pn, keyOf(t, 9).ID(), k2.ID())
	stranger.send(&stagewire.Finish{Stage: 1, Request: 5, Serve: serve})
	stranger.wantCode("a Finish from a node that is not the prev", stagewire.CodeRefused)

	h.send(&stagewire.Finish{Stage: 1, Request: 5, Serve: serve})
	if r := report("a request never seen", 5); r.Tokens != 0 || r.Energy != hw.Estimated(0) {
		t.Fatalf("a request never seen reported %+v", r.StageReport)
	}

	h.send(act(6, 0, 3))
	h.read() // its NextToken
	h.send(act(6, 3, 1))
	h.read()
	h.send(&stagewire.Finish{Stage: 1, Request: 6, Serve: serve})
	if r := report("a request run", 6); r.Tokens != 4 || r.Energy != hw.Estimated(77) {
		t.Fatalf("a request of 4 positions reported %+v", r.StageReport)
	}
	if o, cl := meter.counts(); o != 1 || cl != 1 {
		t.Fatalf("%d spans opened, %d closed", o, cl)
	}
	h.send(act(6, 4, 1))
	h.wantCode("a finished request's old positions", stagewire.CodePosition)

	h.send(act(7, 0, 2))
	h.read()
	h.send(&stagewire.Trim{Stage: 1, Request: 7, Length: 0})
	h.send(act(8, 0, 2))
	h.read()
	if o, cl := meter.counts(); o != 3 || cl != 2 {
		t.Fatalf("after a trim to 0: %d spans opened, %d closed", o, cl)
	}
	srv.Stop()
	if o, cl := meter.counts(); o != 3 || cl != 3 {
		t.Fatalf("after a stop: %d spans opened, %d closed", o, cl)
	}
}

// TestStageWithoutCoveringCounter: a stage node whose only live counter
// does not cover the devices its stage runs on (a GPU counter, a CPU
// stage) bills its part by the estimator, graded Estimator, and a serve
// total over it claims no measurement.
func TestStageWithoutCoveringCounter(t *testing.T) {
	mt := newMetering()
	head, k2 := keyOf(t, 1), keyOf(t, 2)
	pn := reportingNet(t, mt, k2)
	gpuOnly := hwtest.NewCounter("fake-nvml", hw.DomainGPU, 100*time.Millisecond, mt.clock, 60)
	pn.servers[k2.ID()].Meter = hw.NewCounterMeter(gpuOnly, hw.PowerModel{Watts: 25, Source: "test"}, mt.clock, nil)
	p := startPipeline(t, fortunes(t), pipeDialer{pn, head.ID()}, head.ID(),
		[]Placement{{Peer: head.ID(), Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: k2.ID(), Range: model.LayerRange{Lo: 2, Hi: 4}}}, stagewire.DTypeF32)
	if _, err := p.Step(t.Context(), []Seq{{1, []uint32{1, 319, 767}, stagewire.OutToken, 0}}); err != nil {
		t.Fatal(err)
	}
	mt.clock.Advance(200 * time.Millisecond)
	sp, err := p.Finish(t.Context(), 1, receipt.Sum([]byte("serve")))
	if err != nil {
		t.Fatal(err)
	}
	part := sp.Reports[0].Energy
	if part != hw.Estimated(5_000_000) { // 25 W for 200 ms
		t.Fatalf("uncovered stage billed %v, want the estimator's 5 J", part)
	}
	total, err := receipt.SumEnergy(hw.Measured(9_000_000, 8_000_000), part)
	if err != nil || total != hw.Estimated(13_000_000) {
		t.Fatalf("total %v, %v", total, err)
	}
}
