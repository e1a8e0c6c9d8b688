package steward

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

func referenceBackends() []Backend {
	return []Backend{
		{Name: "ref-small", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F1, UJPerToken: 2})},
		{Name: "ref-large", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F4, UJPerToken: 30})},
		{Name: "ref-mid", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: receipt.F3, UJPerToken: 9, UJPerOptionScored: 4})},
	}
}

// TestServeEndToEnd serves on the reference engine and checks the sealed
// receipt field by field, then the chain across two serves.
func TestServeEndToEnd(t *testing.T) {
	j := &fakeJournal{}
	meter := &fakeMeter{energy: hw.Measured(5_000, 4_000)}
	s := newSteward(t, Config{Backends: referenceBackends(), Meter: meter, Journal: j})
	req := genRequest(24, 16, receipt.F2, 1_000)
	prompt := promptOf(24)
	var streamed []uint32
	served, err := s.Serve(t.Context(), req, prompt, func(tok uint32) error {
		streamed = append(streamed, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt
	id, _ := req.ID()
	if r.RequestID != id || r.Backend != "ref-mid" || r.Recipe != engine.ReferenceRecipe || r.Route != served.Route.Justification {
		t.Fatalf("receipt names %s %s/%s route %q", r.RequestID, r.Backend, r.Recipe, r.Route)
	}
	if r.TokensIn != 24 || r.TokensOut != 16 || r.TokensAccepted != 16 || !slices.Equal(streamed, served.Output) || len(streamed) != 16 {
		t.Fatalf("counters in %d out %d accepted %d; streamed %d tokens", r.TokensIn, r.TokensOut, r.TokensAccepted, len(streamed))
	}
	if r.Fidelity == nil || *r.Fidelity != (receipt.FidelityReport{Advertised: receipt.F3, Delivered: receipt.F3}) || !r.FidelityMet || r.FidelityFloor != receipt.F2 {
		t.Fatalf("fidelity %+v met %v floor %v", r.Fidelity, r.FidelityMet, r.FidelityFloor)
	}
	if r.Energy != meter.energy {
		t.Fatalf("energy %v, want the meter's %v", r.Energy, meter.energy)
	}
	if uj, ok := r.UJPerAcceptedToken(); !ok || uj != 5_000/16 {
		t.Fatalf("uj_per_accepted_token %d, %v; want the measured figure over 16", uj, ok)
	}
	if r.Sequence != 0 || r.Prev != nil || r.Steward != s.DID() || r.GrantID != nil || r.Decision != nil {
		t.Fatalf("chain/identity fields: %+v", r)
	}
	if meter.open != 1 || meter.closed != 1 {
		t.Fatalf("meter opened %d, closed %d", meter.open, meter.closed)
	}
	opened, err := receipt.Open(served.Receipt.Envelope, nil)
	if err != nil || opened.Receipt.Steward != s.DID() {
		t.Fatalf("envelope does not verify: %v", err)
	}
	d, err := s.Disclose(&r, prompt, served.Output)
	if err != nil || !d.Opens(&r) {
		t.Fatalf("disclosure of the served output: %v", err)
	}

	second, err := s.Serve(t.Context(), req, prompt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2 := second.Receipt.Receipt; r2.Sequence != 1 || *r2.Prev != served.Receipt.ID || r2.Nonce == r.Nonce {
		t.Fatalf("second receipt: sequence %d prev %v nonce %s", r2.Sequence, r2.Prev, r2.Nonce)
	}
	if *second.Receipt.Receipt.OutputCommitment == *r.OutputCommitment {
		t.Fatal("two serves of one request share an output commitment: the opening is not per receipt")
	}
	head, err := receipt.VerifyLog(j.envelopes(), receipt.Head{}, s.sealer.Public())
	if err != nil || head != s.Head() || head.Next != 2 {
		t.Fatalf("journalled log: head %+v, %v; steward head %+v", head, err, s.Head())
	}
}

// TestServeOrder: route → authorise → meter open → engine → meter close →
// debit → journal, and nothing runs once a step refuses.
func TestServeOrder(t *testing.T) {
	ev := &events{}
	e := newFake(receipt.F2, 1)
	e.ev = ev
	debit := &fakeDebit{ev: ev, grant: receipt.Sum([]byte("grant")), breach: "caveat-unsatisfied"}
	auth := &fakeAuthorizer{ev: ev, debit: debit}
	meter := &fakeMeter{ev: ev, energy: hw.Estimated(77)}
	j := &fakeJournal{ev: ev}
	s := newSteward(t, Config{Backends: []Backend{{Name: "b", Engine: e}}, Meter: meter, Authorizer: auth, Journal: j})
	served, err := s.Serve(t.Context(), genRequest(4, 4, receipt.F1, 100), promptOf(4), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"authorise", "meter open", "engine serve", "engine done", "meter close", "debit", "journal"}
	if got := ev.list(); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if a := auth.got[0]; a.Backend != "b" || a.Recipe != "fake-model" || a.RequestID != served.Receipt.Receipt.RequestID {
		t.Fatalf("authorisation %+v does not name the route's choice", a)
	}
	if len(debit.settled) != 1 || debit.settled[0] != meter.energy {
		t.Fatalf("debit settled %v, want the metered %v", debit.settled, meter.energy)
	}
	r := served.Receipt.Receipt
	if r.GrantID == nil || *r.GrantID != debit.grant || r.GrantBreach != "caveat-unsatisfied" {
		t.Fatalf("grant fields %v %q", r.GrantID, r.GrantBreach)
	}
}

// TestServeRefusals: every refusal returns a ServeError at its stage,
// wrapping its reason, seals nothing and leaves the chain where it was;
// refusals before the meter leave the engine unrun.
func TestServeRefusals(t *testing.T) {
	w1 := receipt.Weights{Digest: receipt.Sum([]byte("w1")), Precision: "q8_0"}
	w2 := receipt.Weights{Digest: receipt.Sum([]byte("w2")), Precision: "q8_0"}
	denied := errors.New("grant expired")
	broken := errors.New("counter gone")
	diskFull := errors.New("disk full")
	f2 := receipt.F2
	f4 := receipt.F4
	tests := []struct {
		name      string
		setup     func(e *fakeEngine, cfg *Config)
		req       func(*receipt.ServeRequest)
		stage     Stage
		want      error
		engineRan bool
	}{
		{"invalid request", nil, func(r *receipt.ServeRequest) { r.FidelityFloor = 9 }, StageRequest, ErrInvalidRequest, false},
		{"no admissible backend", nil, func(r *receipt.ServeRequest) { r.FidelityFloor = receipt.F4 }, StageRoute, ErrNoAdmissibleBackend, false},
		{"authoriser refuses", func(_ *fakeEngine, c *Config) { c.Authorizer = &fakeAuthorizer{err: denied} }, nil, StageAuthorise, denied, false},
		{"meter does not open", func(_ *fakeEngine, c *Config) { c.Meter = &fakeMeter{openErr: broken} }, nil, StageMeter, ErrMeter, false},
		{"meter does not close", func(_ *fakeEngine, c *Config) { c.Meter = &fakeMeter{closeErr: broken} }, nil, StageMeter, broken, true},
		{"engine refuses", func(e *fakeEngine, _ *Config) {
			e.failAfter, e.err = 0, fmt.Errorf("%w: no sampling", engine.ErrRefused)
		}, nil, StageEngine, engine.ErrRefused, true},
		{"delivered above advertised", func(e *fakeEngine, _ *Config) { e.delivered = &f4 }, nil, StageCheck, ErrFidelityOverclaim, true},
		{"weights changed", func(e *fakeEngine, _ *Config) {
			e.weights = func(n int) (receipt.Weights, bool) { return []receipt.Weights{w1, w2}[min(n, 1)], true }
		}, nil, StageCheck, ErrWeightsChanged, true},
		{"weights vanished", func(e *fakeEngine, _ *Config) {
			e.weights = func(n int) (receipt.Weights, bool) { return w1, n == 0 }
		}, nil, StageCheck, ErrWeightsChanged, true},
		{"weights appeared", func(e *fakeEngine, _ *Config) {
			e.weights = func(n int) (receipt.Weights, bool) { return w1, n > 0 }
		}, nil, StageCheck, ErrWeightsChanged, true},
		{"emits past max_tokens", func(e *fakeEngine, _ *Config) { e.ignoreMax = true }, func(r *receipt.ServeRequest) { r.MaxTokens = 2 }, StageCheck, ErrMaxTokens, true},
		{"decision emits a token", func(e *fakeEngine, _ *Config) { e.ignoreMax = true }, func(r *receipt.ServeRequest) {
			r.Decision = &receipt.Decision{Questions: 1, OptionsScored: 2}
		}, StageCheck, ErrMaxTokens, true},
		{"tokens_out contradicts emits", func(e *fakeEngine, _ *Config) { e.outcome = func(o *engine.Outcome) { o.TokensOut++ } }, nil, StageCheck, ErrBadOutcome, true},
		{"accepted above out", func(e *fakeEngine, _ *Config) {
			e.outcome = func(o *engine.Outcome) { o.TokensAccepted = o.TokensOut + 1 }
		}, nil, StageCheck, ErrBadOutcome, true},
		{"cache hits above out", func(e *fakeEngine, _ *Config) {
			e.outcome = func(o *engine.Outcome) { o.CacheHitTokens = o.TokensOut + 1 }
		}, nil, StageCheck, ErrBadOutcome, true},
		{"spec accepted above proposed", func(e *fakeEngine, _ *Config) { e.outcome = func(o *engine.Outcome) { o.SpecAccepted = 1 } }, nil, StageCheck, ErrBadOutcome, true},
		{"debit cannot be recorded", func(_ *fakeEngine, c *Config) {
			c.Authorizer = &fakeAuthorizer{debit: &fakeDebit{err: diskFull}}
		}, nil, StageDebit, diskFull, true},
		{"journal refuses", func(_ *fakeEngine, c *Config) { c.Journal = &fakeJournal{err: diskFull} }, nil, StageJournal, ErrJournal, true},
		{"delivered below floor is no refusal", func(e *fakeEngine, _ *Config) { e.delivered = &f2 }, func(r *receipt.ServeRequest) { r.FidelityFloor = receipt.F3 }, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFake(receipt.F3, 1)
			cfg := Config{Backends: []Backend{{Name: "b", Engine: e}}}
			if tt.setup != nil {
				tt.setup(e, &cfg)
			}
			s := newSteward(t, cfg)
			req := genRequest(4, 4, receipt.F2, 1_000)
			if tt.req != nil {
				tt.req(&req)
			}
			served, err := s.Serve(t.Context(), req, promptOf(4), nil)
			if ran := e.serves > 0; ran != tt.engineRan {
				t.Fatalf("engine ran = %v, want %v", ran, tt.engineRan)
			}
			if tt.want == nil {
				if err != nil || served == nil {
					t.Fatalf("Serve: %v", err)
				}
				return
			}
			var se *ServeError
			if !errors.As(err, &se) || se.Stage != tt.stage || !errors.Is(err, tt.want) {
				t.Fatalf("Serve error = %v, want a %s-stage ServeError wrapping %v", err, tt.stage, tt.want)
			}
			if served != nil || s.Head() != (receipt.Head{}) {
				t.Fatalf("a refused serve was sealed (head %+v)", s.Head())
			}
			if m, ok := cfg.Meter.(*fakeMeter); ok && m.open != m.closed {
				t.Fatalf("meter opened %d times, closed %d", m.open, m.closed)
			}
		})
	}
}

// TestJournalFailureHoldsChain: a receipt the journal refused is not
// handed out, and the next one takes its place in the chain.
func TestJournalFailureHoldsChain(t *testing.T) {
	j := &fakeJournal{err: errors.New("disk full")}
	s := newSteward(t, Config{Backends: referenceBackends(), Journal: j})
	req := genRequest(8, 4, receipt.F1, 1_000)
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); !errors.Is(err, ErrJournal) {
		t.Fatalf("Serve: %v, want ErrJournal", err)
	}
	j.err = nil
	served, err := s.Serve(t.Context(), req, promptOf(8), nil)
	if err != nil || served.Receipt.Receipt.Sequence != 0 {
		t.Fatalf("after the journal recovered: %v, sequence %d", err, served.Receipt.Receipt.Sequence)
	}
}

// fakeArchive keeps the sequences it is given, or refuses them.
type fakeArchive struct {
	ev   *events
	err  error
	seqs []uint64
}

func (a *fakeArchive) Archive(s *receipt.Sealed) error {
	a.ev.add("archive")
	if a.err != nil {
		return a.err
	}
	a.seqs = append(a.seqs, s.Receipt.Sequence)
	return nil
}

// TestArchive: each receipt is archived before the journal records it; an
// archive that fails withholds the receipt (ErrJournal) and journals
// nothing; a receipt the journal then refuses is archived again, under the
// same sequence, by the serve that takes its place.
func TestArchive(t *testing.T) {
	ev := &events{}
	a, j := &fakeArchive{ev: ev}, &fakeJournal{ev: ev}
	s := newSteward(t, Config{Backends: referenceBackends(), Journal: j, Archive: a})
	req := genRequest(8, 4, receipt.F1, 1_000)
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); err != nil {
		t.Fatal(err)
	}
	if got := ev.list(); !slices.Equal(got, []string{"archive", "journal"}) {
		t.Fatalf("events %v, want the archive before the journal", got)
	}
	a.err = errors.New("disk full")
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); !errors.Is(err, ErrJournal) || len(j.envelopes()) != 1 {
		t.Fatalf("a failing archive: %v (journaled %d), want ErrJournal and nothing journaled", err, len(j.envelopes()))
	}
	a.err, j.err = nil, errors.New("disk full")
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); !errors.Is(err, ErrJournal) {
		t.Fatalf("a failing journal: %v", err)
	}
	j.err = nil
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.seqs, []uint64{0, 1, 1}) {
		t.Fatalf("archived sequences %v, want 0, then 1 twice (the second replacing the one the journal refused)", a.seqs)
	}
}

// TestServeFidelity: fidelity_met follows the delivered level when the
// engine reports one, and rests on the advertisement when it does not.
func TestServeFidelity(t *testing.T) {
	f1, f3 := receipt.F1, receipt.F3
	tests := []struct {
		name      string
		delivered *receipt.Fidelity
		floor     receipt.Fidelity
		pair      *receipt.FidelityReport
		met       bool
	}{
		{"delivered as advertised", &f3, receipt.F2, &receipt.FidelityReport{Advertised: receipt.F3, Delivered: receipt.F3}, true},
		{"degraded below the floor", &f1, receipt.F2, &receipt.FidelityReport{Advertised: receipt.F3, Delivered: receipt.F1}, false},
		{"degraded to the floor", &f1, receipt.F1, &receipt.FidelityReport{Advertised: receipt.F3, Delivered: receipt.F1}, true},
		{"nothing reported", nil, receipt.F2, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFake(receipt.F3, 1)
			e.delivered = tt.delivered
			s := newSteward(t, Config{Backends: []Backend{{Name: "b", Engine: e}}})
			served, err := s.Serve(t.Context(), genRequest(4, 4, tt.floor, 100), promptOf(4), nil)
			if err != nil {
				t.Fatal(err)
			}
			r := served.Receipt.Receipt
			if !equalPair(r.Fidelity, tt.pair) || r.FidelityMet != tt.met {
				t.Fatalf("fidelity %+v met %v, want %+v met %v", r.Fidelity, r.FidelityMet, tt.pair, tt.met)
			}
		})
	}
}

func equalPair(a, b *receipt.FidelityReport) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// TestServeIncomplete: a generation cut short is sealed as far as it went.
func TestServeIncomplete(t *testing.T) {
	gone := errors.New("client gone")
	crashed := errors.New("device lost")
	tests := []struct {
		name    string
		run     func(s *Steward, e *fakeEngine) (*Served, error)
		tokens  int
		isCause error
		cut     string // the receipt's cut_short
	}{
		{"client cancels after 2 tokens", func(s *Steward, _ *fakeEngine) (*Served, error) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			n := 0
			return s.Serve(ctx, genRequest(4, 4, receipt.F1, 100), promptOf(4), func(uint32) error {
				if n++; n == 2 {
					cancel()
				}
				return nil
			})
		}, 2, context.Canceled, receipt.CutClient},
		{"cancelled before the engine starts", func(s *Steward, _ *fakeEngine) (*Served, error) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return s.Serve(ctx, genRequest(4, 4, receipt.F1, 100), promptOf(4), nil)
		}, 0, context.Canceled, receipt.CutClient},
		{"emit fails on the third token", func(s *Steward, _ *fakeEngine) (*Served, error) {
			n := 0
			return s.Serve(t.Context(), genRequest(4, 4, receipt.F1, 100), promptOf(4), func(uint32) error {
				if n++; n == 3 {
					return gone
				}
				return nil
			})
		}, 2, gone, receipt.CutClient},
		{"engine fails after 1 token, overstating its counters", func(s *Steward, e *fakeEngine) (*Served, error) {
			e.failAfter, e.err = 1, crashed
			e.outcome = func(o *engine.Outcome) { o.TokensOut, o.TokensAccepted, o.CacheHitTokens = 9, 9, 9 }
			return s.Serve(t.Context(), genRequest(4, 4, receipt.F1, 100), promptOf(4), nil)
		}, 1, crashed, receipt.CutEngine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFake(receipt.F2, 1)
			meter := &fakeMeter{energy: hw.Estimated(900)}
			s := newSteward(t, Config{Backends: []Backend{{Name: "b", Engine: e}}, Meter: meter})
			served, err := tt.run(s, e)
			var se *ServeError
			if !errors.As(err, &se) || !errors.Is(err, ErrIncomplete) || !errors.Is(err, tt.isCause) {
				t.Fatalf("Serve error = %v, want ErrIncomplete wrapping %v", err, tt.isCause)
			}
			if served == nil {
				t.Fatal("an incomplete serve was not sealed")
			}
			r := served.Receipt.Receipt
			if int(r.TokensOut) != tt.tokens || int(r.TokensAccepted) != tt.tokens || len(served.Output) != tt.tokens || r.CacheHitTokens > r.TokensOut {
				t.Fatalf("counters out %d accepted %d cache %d, output %d; want %d", r.TokensOut, r.TokensAccepted, r.CacheHitTokens, len(served.Output), tt.tokens)
			}
			if r.Energy != meter.energy || meter.open != 1 || meter.closed != 1 {
				t.Fatalf("energy %v, meter opened %d closed %d", r.Energy, meter.open, meter.closed)
			}
			if _, ok := r.UJPerAcceptedToken(); ok != (tt.tokens > 0) {
				t.Fatalf("uj_per_accepted_token present = %v with %d tokens", ok, tt.tokens)
			}
			if r.CutShort != tt.cut {
				t.Fatalf("cut_short %q, want %q", r.CutShort, tt.cut)
			}
			if d, err := s.Disclose(&r, promptOf(4), served.Output); err != nil || !d.Opens(&r) {
				t.Fatalf("the commitment does not cover the emitted tokens: %v", err)
			}
			if s.Head().Next != 1 {
				t.Fatal("the chain did not advance")
			}
		})
	}

	// A decision cut short answered nothing: nothing is sealed.
	e := newFake(receipt.F2, 1)
	e.failAfter, e.err, e.ignoreMax, e.tokens = 0, crashed, false, nil
	s := newSteward(t, Config{Backends: []Backend{{Name: "b", Engine: &failingDecider{e}}}})
	req := genRequest(4, 0, receipt.F1, 100)
	req.Decision = &receipt.Decision{Questions: 1, OptionsScored: 2}
	if served, err := s.Serve(t.Context(), req, promptOf(4), nil); served != nil || !errors.Is(err, ErrIncomplete) {
		t.Fatalf("incomplete decision: served %v, err %v", served != nil, err)
	}
}

// failingDecider fails every serve without emitting.
type failingDecider struct{ *fakeEngine }

func (f *failingDecider) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	return engine.Outcome{TokensIn: uint32(len(prompt))}, f.err
}

func TestServeDecision(t *testing.T) {
	meter := &fakeMeter{energy: hw.Estimated(1_000)}
	s := newSteward(t, Config{Backends: referenceBackends(), Meter: meter})
	req := genRequest(60, 5_000, receipt.F2, 1_000)
	req.Decision = &receipt.Decision{Questions: 3, OptionsScored: 9, SchemaTokens: 50}
	served, err := s.Serve(t.Context(), req, promptOf(60), func(uint32) error { t.Fatal("a decision emitted"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt
	if r.Backend != "ref-mid" || served.Route.Candidates[2].EstimateUJ != 9*60+4*9 {
		t.Fatalf("routed to %s with estimate %d", r.Backend, served.Route.Candidates[2].EstimateUJ)
	}
	if r.Decision == nil || *r.Decision != (receipt.DecisionFigures{QuestionsAnswered: 3, OptionsScored: 9, SchemaTokens: 50}) || r.OutputCommitment != nil {
		t.Fatalf("decision figures %+v commitment %v", r.Decision, r.OutputCommitment)
	}
	if uj, _ := r.UJPerDecision(); uj != 333 {
		t.Fatalf("uj_per_decision %d, want 333", uj)
	}
	if _, ok := r.UJPerAcceptedToken(); ok {
		t.Fatal("a decision carries uj_per_accepted_token")
	}
}

func TestServeWeightsAndTraining(t *testing.T) {
	w := receipt.Weights{Digest: receipt.Sum([]byte("weights")), Precision: "f16"}
	tr := receipt.Training{Digest: receipt.Sum([]byte("corpus")), Authority: receipt.TrainingOpaque}
	e := newFake(receipt.F2, 1)
	e.weights = func(int) (receipt.Weights, bool) { return w, true }
	e.training = &tr
	auth := &fakeAuthorizer{}
	s := newSteward(t, Config{Backends: []Backend{{Name: "b", Engine: e}}, Authorizer: auth})
	served, err := s.Serve(t.Context(), genRequest(4, 4, receipt.F1, 100), promptOf(4), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt
	if r.Weights == nil || *r.Weights != w || r.Training == nil || *r.Training != tr {
		t.Fatalf("weights %+v training %+v", r.Weights, r.Training)
	}
	if a := auth.got[0]; a.Weights == nil || *a.Weights != w {
		t.Fatalf("authorisation decided over weights %+v", a.Weights)
	}
	if r.GrantID != nil {
		t.Fatal("an ungranted serve carries a grant id")
	}
}

// TestServeConcurrent: parallel serves get distinct sequences and form one
// chain in journal order.
func TestServeConcurrent(t *testing.T) {
	j := &fakeJournal{}
	s := newSteward(t, Config{Backends: referenceBackends(), Journal: j})
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := s.Serve(t.Context(), genRequest(uint32(4+i), 4, receipt.F1, 10_000), promptOf(4+i), nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	head, err := receipt.VerifyLog(j.envelopes(), receipt.Head{}, nil)
	if err != nil || head.Next != n || head != s.Head() {
		t.Fatalf("concurrent log: head %+v, %v", head, err)
	}
}

// TestResume: a steward started from a recorded head continues the chain.
func TestResume(t *testing.T) {
	j := &fakeJournal{}
	first := newSteward(t, Config{Backends: referenceBackends(), Journal: j})
	req := genRequest(8, 4, receipt.F1, 1_000)
	for range 2 {
		if _, err := first.Serve(t.Context(), req, promptOf(8), nil); err != nil {
			t.Fatal(err)
		}
	}
	again := newSteward(t, Config{Backends: referenceBackends(), Journal: j, Head: first.Head()})
	served, err := again.Serve(t.Context(), req, promptOf(8), nil)
	if err != nil {
		t.Fatal(err)
	}
	if served.Receipt.Receipt.Sequence != 2 {
		t.Fatalf("resumed at sequence %d, want 2", served.Receipt.Receipt.Sequence)
	}
	if _, err := receipt.VerifyLog(j.envelopes(), receipt.Head{}, nil); err != nil {
		t.Fatalf("log across the restart: %v", err)
	}
}

func TestReplay(t *testing.T) {
	s := newSteward(t, Config{Backends: referenceBackends()})
	req := genRequest(8, 6, receipt.F2, 1_000)
	prompt := promptOf(8)
	served, err := s.Serve(t.Context(), req, prompt, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt
	d, err := s.Disclose(&r, prompt, served.Output)
	if err != nil {
		t.Fatal(err)
	}
	mid := s.Backends()[2]

	v, err := Replay(t.Context(), mid, &r, receipt.Replay{Request: req, Prompt: prompt, Opening: d.Opening})
	if err != nil || v.Kind != receipt.Verified {
		t.Fatalf("replay on the same backend: %v, %v", v, err)
	}

	// The same backend name and recipe, now answering differently from
	// the fourth token: with the disclosed output, the divergence is the
	// serve's and is located.
	drifted := newFake(receipt.F3, 9)
	drifted.recipe = engine.ReferenceRecipe
	drifted.tokens = append(slices.Clone(served.Output[:3]), served.Output[3]+1, 0, 0)
	v, err = Replay(t.Context(), Backend{Name: "ref-mid", Engine: drifted}, &r,
		receipt.Replay{Request: req, Prompt: prompt, Opening: d.Opening, Disclosed: d.Output})
	if err != nil || v.Kind != receipt.Diverged || v.FirstDivergence != 3 {
		t.Fatalf("replay on a drifted engine: %v, %v", v, err)
	}

	drifted.deterministic = false
	v, err = Replay(t.Context(), Backend{Name: "ref-mid", Engine: drifted}, &r,
		receipt.Replay{Request: req, Prompt: prompt, Opening: d.Opening, Disclosed: d.Output})
	if err != nil || v.Kind != receipt.NotReplayable {
		t.Fatalf("replay on a sampling engine: %v, %v", v, err)
	}
	v, err = Replay(t.Context(), s.Backends()[1], &r, receipt.Replay{Request: req, Prompt: prompt, Opening: d.Opening})
	if err != nil || v.Kind != receipt.NotReplayable {
		t.Fatalf("replay on another backend: %v, %v", v, err)
	}
}

// fakeSealObserver keeps the sequences it hears of.
type fakeSealObserver struct{ seqs []uint64 }

func (o *fakeSealObserver) ObserveSealed(s *receipt.Sealed) {
	o.seqs = append(o.seqs, s.Receipt.Sequence)
}

// TestSealObserver: the observer hears of each receipt handed out, once,
// in chain order, and not of one the journal refused.
func TestSealObserver(t *testing.T) {
	j := &fakeJournal{ev: &events{}}
	obs := &fakeSealObserver{}
	s := newSteward(t, Config{Backends: referenceBackends(), Journal: j, Observer: obs})
	req := genRequest(8, 4, receipt.F1, 1_000)
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); err != nil {
		t.Fatal(err)
	}
	j.err = errors.New("disk full")
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); !errors.Is(err, ErrJournal) {
		t.Fatalf("Serve: %v, want ErrJournal", err)
	}
	j.err = nil
	if _, err := s.Serve(t.Context(), req, promptOf(8), nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(obs.seqs, []uint64{0, 1}) {
		t.Fatalf("observed sequences %v, want [0 1]", obs.seqs)
	}
}

// TestServePlacement: the mesh's placement follows the router's
// justification in the sealed route; one that is not a single line is
// refused before any work.
func TestServePlacement(t *testing.T) {
	meter := &fakeMeter{energy: hw.Measured(5_000, 4_000)}
	s := newSteward(t, Config{Backends: referenceBackends(), Meter: meter, Journal: &fakeJournal{}})
	req := genRequest(24, 16, receipt.F2, 1_000)
	line := "self: best of 2 weighed (HwShunt, est 9 uJ); 0a0b0c0d0e0f: costlier (score 90 > 9)"
	served, err := s.Serve(t.Context(), req, promptOf(24), nil, WithPlacement(line))
	if err != nil {
		t.Fatal(err)
	}
	want := "ref-mid: cheapest admissible of 3 weighed (1 admissible): F3 >= floor F2, est 360 uJ <= ceiling 1000 uJ; mesh: " + line
	if got := served.Receipt.Receipt.Route; got != want || served.Route.Justification != want {
		t.Fatalf("route %q, want %q", got, want)
	}
	opened, err := receipt.Open(served.Receipt.Envelope, nil)
	if err != nil || opened.Receipt.Route != want {
		t.Fatalf("sealed route %q, %v", opened.Receipt.Route, err)
	}
	_, err = s.Serve(t.Context(), req, promptOf(24), nil, WithPlacement("two\nlines"))
	if !errors.Is(err, ErrInvalidRequest) || meter.open != 1 {
		t.Fatalf("a two-line placement: %v (meter opened %d times, want 1)", err, meter.open)
	}
}

// TestServeLimit: an emit function that answers ErrLimit (the client's
// time limit) ends the serve there: the token it was handed is not
// served, what came before is sealed as cut short at the client's limit,
// and the error is ErrLimit, not ErrIncomplete (not a failure); at the
// first token, nothing is served and the receipt still seals the work.
func TestServeLimit(t *testing.T) {
	for _, at := range []int{3, 1} {
		e := newFake(receipt.F2, 1)
		s := newSteward(t, Config{Backends: []Backend{{Name: "b", Engine: e}}, Meter: &fakeMeter{energy: hw.Estimated(900)}})
		n := 0
		served, err := s.Serve(t.Context(), genRequest(4, 4, receipt.F1, 100), promptOf(4), func(uint32) error {
			if n++; n == at {
				return fmt.Errorf("the newline came late: %w", ErrLimit)
			}
			return nil
		})
		if !errors.Is(err, ErrLimit) || errors.Is(err, ErrIncomplete) || served == nil {
			t.Fatalf("at token %d: err %v, served %v; want ErrLimit with the serve", at, err, served != nil)
		}
		r := served.Receipt.Receipt
		if int(r.TokensOut) != at-1 || len(served.Output) != at-1 || r.CutShort != receipt.CutLimit {
			t.Fatalf("at token %d: %d out, output %v, cut_short %q; want %d and %q", at, r.TokensOut, served.Output, r.CutShort, at-1, receipt.CutLimit)
		}
		if d, err := s.Disclose(&r, promptOf(4), served.Output); err != nil || !d.Opens(&r) {
			t.Fatalf("at token %d: the commitment does not cover the served tokens: %v", at, err)
		}
	}
}
