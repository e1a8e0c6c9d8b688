package splitengine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

var fortunesPath = filepath.Join("..", "..", "..", "models", "meshnode-fortunes-q8_0.gguf")

// whole is a hand-written Pipeline over the whole model in this process:
// what a split pipeline answers, bit for bit, with f32 activations. It
// fails every step from failAt on (0: never).
type whole struct {
	m         *model.Model
	sessions  map[uint64]*model.Session
	steps     int
	failAt    int
	trims     []uint64
	finished  []receipt.ContentID
	noReports bool // Finish fails, as when a stage does not report
	closed    atomic.Bool
}

var errGone = fmt.Errorf("%w: layers 2-4 on test: connection closed", stage.ErrStageLost)

func (w *whole) Step(ctx context.Context, seqs []stage.Seq) ([]stage.Result, error) {
	w.steps++
	if w.failAt > 0 && w.steps >= w.failAt {
		return nil, errGone
	}
	var out []stage.Result
	for _, q := range seqs {
		s := w.sessions[q.Request]
		if s == nil {
			var err error
			if s, err = w.m.NewSession(model.SessionOptions{Context: 256}); err != nil {
				return nil, err
			}
			w.sessions[q.Request] = s
		}
		r := stage.Result{Request: q.Request}
		var err error
		if q.Rows > 1 {
			// A window: the rows of one-token decoding after each of
			// the last Rows tokens, as a pipeline's are.
			n := len(q.Tokens) - q.Rows
			if n > 0 {
				if _, err := s.Eval(ctx, q.Tokens[:n]); err != nil {
					return nil, err
				}
			}
			for _, tok := range q.Tokens[n:] {
				l, err := s.Eval(ctx, []uint32{tok})
				if err != nil {
					return nil, err
				}
				if q.Out == stagewire.OutToken {
					r.Tokens = append(r.Tokens, argmax(l))
				} else {
					r.Rows = append(r.Rows, slices.Clone(l))
				}
			}
			if q.Out == stagewire.OutToken {
				r.Token = r.Tokens[len(r.Tokens)-1]
			} else {
				r.Logits = r.Rows[len(r.Rows)-1]
			}
			r.Pos = s.Len()
			out = append(out, r)
			continue
		}
		if q.Out == stagewire.OutNone {
			if _, err := s.Eval(ctx, q.Tokens); err != nil {
				return nil, err
			}
			continue
		}
		if q.Out == stagewire.OutToken {
			r.Token, err = s.EvalArgMax(ctx, q.Tokens)
		} else {
			var l []float32
			l, err = s.Eval(ctx, q.Tokens)
			r.Logits = slices.Clone(l)
		}
		if err != nil {
			return nil, err
		}
		r.Pos = s.Len()
		out = append(out, r)
	}
	return out, nil
}

func (w *whole) Trim(ctx context.Context, request uint64, n int) error {
	w.trims = append(w.trims, request)
	if s := w.sessions[request]; s != nil {
		s.Truncate(n)
		if n == 0 {
			s.Close()
			delete(w.sessions, request)
		}
	}
	return nil
}

func argmax(x []float32) uint32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return uint32(best)
}

func (w *whole) Close(ctx context.Context) error { w.closed.Store(true); return nil }

// Rows: the whole model computes any window.
func (w *whole) Rows() int { return 1 << 16 }

func (w *whole) Windows() bool { return true }

// WeightBytes: the whole model's, as if it were the head's stage.
func (w *whole) WeightBytes() int64 { return w.m.WeightBytes() }

// Finish forgets the request and reports the whole model as one stage's
// part: there are no other stages to report.
func (w *whole) Finish(ctx context.Context, request uint64, serve receipt.ContentID) (*engine.Split, error) {
	if w.noReports {
		return nil, fmt.Errorf("%w: none from [layers 2-4 on test]: %w", stage.ErrReport, context.DeadlineExceeded)
	}
	s := w.sessions[request]
	if s == nil {
		return nil, fmt.Errorf("finish of request %d, which holds no positions", request)
	}
	w.finished = append(w.finished, serve)
	tokens := uint32(s.Len())
	s.Close()
	delete(w.sessions, request)
	return &engine.Split{Lo: 0, Hi: uint32(w.m.Config().Layers), Tokens: tokens}, nil
}

func setup(t testing.TB) (*ggufengine.Model, *model.Model) {
	t.Helper()
	ref, err := ggufengine.Load(fortunesPath, ggufengine.Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Sessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	be := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(func() { be.Close() })
	m, err := model.Load(openFile(t), be)
	if err != nil {
		t.Fatal(err)
	}
	return ref, m
}

func newEngine(ref *ggufengine.Model, p Pipeline, lost func(Pipeline, error)) *Engine {
	w, _ := ref.Engine().Weights()
	// A batch of 5 makes the prompts go in several steps.
	return New(Config{Recipe: "fortunes", Fidelity: receipt.F1, UJPerToken: 250, Weights: w,
		Vocab: ref.Config().VocabSize, Context: 256, Batch: 5, Tokens: ref.Tokenizer(), Lost: lost}, p)
}

func serve(e engine.Engine, prompt []uint32, req receipt.ServeRequest) ([]uint32, engine.Outcome, error) {
	var got []uint32
	out, err := e.Serve(context.Background(), req, prompt, func(t uint32) error { got = append(got, t); return nil })
	return got, out, err
}

// TestSameTokens: greedy and seeded sampled serves on a pipeline give the
// single-node engine's tokens, and the counters agree, llama.cpp's DRY
// and other filters included.
func TestSameTokens(t *testing.T) {
	ref, m := setup(t)
	prompt := ref.Tokenize("Q: Why did the chicken cross the road?\nA:", true, false)
	seed := uint64(7)
	for _, req := range []receipt.ServeRequest{
		{MaxTokens: 24},
		{MaxTokens: 24, Sampling: &receipt.Sampling{TemperatureE6: 800_000, TopK: 40, Seed: &seed}},
		// DRY reads its breakers with the pipeline's tokenizer.
		{MaxTokens: 24, Sampling: &receipt.Sampling{DRYMultiplierE6: 1_500_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 1, DRYLastN: receipt.PenaltyAll}},
		{MaxTokens: 24, Sampling: &receipt.Sampling{TemperatureE6: 800_000, Seed: &seed, TypicalPE6: 500_000, XTCProbabilityE6: 500_000, XTCThresholdE6: 100_000}},
	} {
		want, wantOut, err := serve(ref.Engine(), prompt, req)
		if err != nil {
			t.Fatal(err)
		}
		w := &whole{m: m, sessions: map[uint64]*model.Session{}}
		got, out, err := serve(newEngine(ref, w, nil), prompt, req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("sampling %v: tokens %v, want %v", req.Sampling, got, want)
		}
		if out.TokensIn != wantOut.TokensIn || out.TokensOut != wantOut.TokensOut || out.TokensAccepted != wantOut.TokensAccepted {
			t.Errorf("outcome %+v, want %+v", out, wantOut)
		}
		id, _ := req.ID()
		if len(w.sessions) != 0 || len(w.trims) != 0 || len(w.finished) != 1 || w.finished[0] != id {
			t.Errorf("the request was not finished as its serve: %d sessions, trims %v, finished %v", len(w.sessions), w.trims, w.finished)
		}
		if out.Split == nil || out.Split.Hi != 4 || int(out.Split.Tokens) != len(prompt)+len(got)-1 {
			t.Errorf("split %+v for %d prompt and %d generated tokens", out.Split, len(prompt), len(got))
		}
	}
}

// TestPromptProgress: a serve given engine.WithPromptProgress reports its
// prompt's steps through the stages (a batch of 5 at a time), then the
// whole prompt, before the first token.
func TestPromptProgress(t *testing.T) {
	ref, m := setup(t)
	prompt := ref.Tokenize("Q: Why did the chicken cross the road?\nA:", true, false)
	var seen []engine.PromptProgress
	emitted := false
	ctx := engine.WithPromptProgress(context.Background(), func(p engine.PromptProgress) {
		if emitted {
			t.Errorf("progress %+v after the first token", p)
		}
		seen = append(seen, p)
	})
	e := newEngine(ref, &whole{m: m, sessions: map[uint64]*model.Session{}}, nil)
	if _, err := e.Serve(ctx, receipt.ServeRequest{MaxTokens: 4}, prompt, func(uint32) error { emitted = true; return nil }); err != nil {
		t.Fatal(err)
	}
	var want []engine.PromptProgress
	for done := 5; done < len(prompt); done += 5 {
		want = append(want, engine.PromptProgress{Total: len(prompt), Processed: done})
	}
	want = append(want, engine.PromptProgress{Total: len(prompt), Processed: len(prompt)})
	if !slices.Equal(seen, want) {
		t.Errorf("reports %+v, want %+v", seen, want)
	}
}

// TestLost: a step that fails ends the serve with ErrUnavailable, drops
// and closes the pipeline and reports it once; serves are refused the
// same way until a new pipeline is Set.
func TestLost(t *testing.T) {
	ref, m := setup(t)
	prompt := ref.Tokenize("Q: Why?\nA:", true, false)
	lost := make(chan error, 4)
	w := &whole{m: m, sessions: map[uint64]*model.Session{}, failAt: 5}
	e := newEngine(ref, w, func(p Pipeline, err error) {
		if p != w {
			err = fmt.Errorf("Lost reported %v, not the pipeline that failed", p)
		}
		lost <- err
	})
	got, out, err := serve(e, prompt, receipt.ServeRequest{MaxTokens: 24})
	if !errors.Is(err, engine.ErrUnavailable) || !errors.Is(err, ErrLost) || !errors.Is(err, stage.ErrStageLost) {
		t.Fatalf("err %v", err)
	}
	if len(got) < 1 || int(out.TokensOut) != len(got) {
		t.Errorf("%d tokens before the loss (outcome %+v)", len(got), out)
	}
	// Dropped before the serve returns, not when Lost is told: the node's
	// status reads the engine to show a lost plan as lost at once.
	if e.Serving() {
		t.Error("still serving the failed pipeline when the serve returned")
	}
	if why := <-lost; !errors.Is(why, stage.ErrStageLost) {
		t.Errorf("Lost(%v)", why)
	}
	if !w.closed.Load() || e.Serving() {
		t.Errorf("closed %v, serving %v", w.closed.Load(), e.Serving())
	}
	if _, _, err := serve(e, prompt, receipt.ServeRequest{MaxTokens: 4}); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("a serve without a pipeline: %v", err)
	}
	e.Set(&whole{m: m, sessions: map[uint64]*model.Session{}})
	if got, _, err := serve(e, prompt, receipt.ServeRequest{MaxTokens: 4}); err != nil || len(got) != 4 {
		t.Errorf("after Set: %v, %v", got, err)
	}
	select {
	case err := <-lost:
		t.Errorf("Lost called again: %v", err)
	default:
	}

	// A serve whose stages do not report cannot be sealed: it fails as
	// unavailable, and the pipeline is dropped.
	nr := &whole{m: m, sessions: map[uint64]*model.Session{}, noReports: true}
	e.Set(nr)
	if _, _, err := serve(e, prompt, receipt.ServeRequest{MaxTokens: 4}); !errors.Is(err, engine.ErrUnavailable) || !errors.Is(err, stage.ErrReport) {
		t.Errorf("a serve without reports: %v", err)
	}
	<-lost
	if e.Serving() || !nr.closed.Load() {
		t.Error("the pipeline whose stages did not report still serves")
	}
}

func TestRefuses(t *testing.T) {
	ref, m := setup(t)
	e := newEngine(ref, &whole{m: m, sessions: map[uint64]*model.Session{}}, nil)
	for name, prompt := range map[string][]uint32{"empty": nil, "long": make([]uint32, 256), "vocab": {1 << 30}} {
		if _, _, err := serve(e, prompt, receipt.ServeRequest{MaxTokens: 4}); !errors.Is(err, engine.ErrRefused) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Serve(ctx, receipt.ServeRequest{MaxTokens: 4}, []uint32{1}, func(uint32) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func openFile(t testing.TB) *gguf.File {
	t.Helper()
	f, err := gguf.Open(fortunesPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestConcurrentServes: serves at once share the steps, at most
// Sessions of them holding positions, and each gets the tokens it would
// alone.
func TestConcurrentServes(t *testing.T) {
	ref, m := setup(t)
	prompt := ref.Tokenize("Q: What is love?\nA:", true, false)
	want, _, err := serve(ref.Engine(), prompt, receipt.ServeRequest{MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	w := &countingWhole{whole: whole{m: m, sessions: map[uint64]*model.Session{}}}
	e := newEngine(ref, w, nil)
	errs := make(chan error, 10)
	for range 10 {
		go func() {
			got, _, err := serve(e, prompt, receipt.ServeRequest{MaxTokens: 12})
			if err == nil && !slices.Equal(got, want) {
				err = fmt.Errorf("tokens %v, want %v", got, want)
			}
			errs <- err
		}()
	}
	for range 10 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if w.most > 4 {
		t.Errorf("%d requests held positions at once, want at most 4", w.most)
	}
}

// countingWhole counts the most requests holding positions at once, and
// the tokens its steps carried (the engine runs one step at a time, so no
// lock is needed).
type countingWhole struct {
	whole
	most, tokens int
}

func (c *countingWhole) Step(ctx context.Context, seqs []stage.Seq) ([]stage.Result, error) {
	for _, q := range seqs {
		c.tokens += len(q.Tokens)
	}
	res, err := c.whole.Step(ctx, seqs)
	c.most = max(c.most, len(c.sessions))
	return res, err
}

// TestConstrainedSameTokens: a constrained serve on a pipeline gives the
// single-node engine's tokens under the same grammar, greedy and seeded,
// and the JSON meets the schema; under the same grammar made lazy (free
// until the output's first "e"), too.
func TestConstrainedSameTokens(t *testing.T) {
	ref, m := setup(t)
	prompt := ref.Tokenize("Q: Why did the chicken cross the road?\nA:", true, false)
	schema := `{"type":"object","properties":{"why":{"type":"string","maxLength":12},"n":{"type":"integer"},"ok":{"enum":[true,"maybe"]}},"required":["why","ok"],"additionalProperties":false}`
	full, err := grammar.FromSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := full.Lazy(grammar.Trigger{Text: "e"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*grammar.Grammar{full, lazy} {
		sameTokensUnder(t, ref, m, g, schema, prompt)
	}
	// A serve naming a grammar it does not carry is refused.
	id := engine.GrammarID(full)
	if _, _, err := serve(newEngine(ref, &whole{m: m, sessions: map[uint64]*model.Session{}}, nil), prompt,
		receipt.ServeRequest{MaxTokens: 4, Sampling: &receipt.Sampling{Grammar: &id}}); !errors.Is(err, engine.ErrRefused) {
		t.Errorf("a grammar named and not carried: %v", err)
	}
}

// sameTokensUnder serves prompt under g on the single-node engine and on
// a pipeline, greedy and seeded, and compares; the output (after a lazy
// grammar's trigger) meets schema.
func sameTokensUnder(t *testing.T, ref *ggufengine.Model, m *model.Model, g *grammar.Grammar, schema string, prompt []uint32) {
	t.Helper()
	id := engine.GrammarID(g)
	seed := uint64(9)
	ctx := engine.WithGrammar(context.Background(), g)
	for _, s := range []*receipt.Sampling{{Grammar: &id}, {TemperatureE6: 900_000, Seed: &seed, Grammar: &id}} {
		req := receipt.ServeRequest{MaxTokens: 200, Sampling: s}
		run := func(e engine.Engine) []uint32 {
			var got []uint32
			if _, err := e.Serve(ctx, req, prompt, func(t uint32) error { got = append(got, t); return nil }); err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := run(ref.Engine())
		got := run(newEngine(ref, &whole{m: m, sessions: map[uint64]*model.Session{}}, nil))
		if !slices.Equal(got, want) {
			t.Errorf("sampling %+v: tokens %v, want %v", s, got, want)
		}
		text, _ := ref.Tokenizer().Decode(got, tokenizer.DecodeOptions{Continue: true})
		if tr := g.Triggers(); len(tr) > 0 {
			before, after, ok := strings.Cut(text, tr[0].Text)
			if !ok || strings.Contains(before, "{") {
				t.Errorf("lazy: %q", text)
			}
			text = after
		}
		if err := grammartest.Validate([]byte(schema), []byte(text)); err != nil {
			t.Errorf("%q: %v", text, err)
		}
	}
}
