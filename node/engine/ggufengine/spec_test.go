package ggufengine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// speculating loads the built-in model with a proposer: prompt lookup,
// the file itself as its own draft (the same vocabulary, all but every
// draft accepted), or the trained draft model where $MESHNODE_MODELS has
// it.
func speculating(t *testing.T) map[string]*Model {
	t.Helper()
	drafts := map[string]string{"lookup": DraftLookup, "self": fortunesPath}
	if d := os.Getenv("MESHNODE_MODELS"); d != "" {
		if p := filepath.Join(d, "meshnode-fortunes-draft-q8_0.gguf"); fileExists(p) {
			drafts["fortunes-draft"] = p
		}
	}
	out := map[string]*Model{}
	for name, d := range drafts {
		// Priced by the files, not by timing this machine: under load
		// (the race detector, other packages' tests) the measured rows'
		// cost could keep every window shut, and these tests need them.
		cfg := Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Draft: d, DraftMax: 4, DraftPricesFromFiles: true}
		if d != DraftLookup {
			// Windows kept on and full, so that the tests see many, and
			// stops and ends fall inside them: the file's own size would
			// say a self-draft never pays.
			cfg.DraftCost, cfg.DraftThreshold = 0.05, -1
		}
		m, err := Load(fortunesPath, cfg)
		if err != nil {
			t.Fatalf("draft %s: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		out[name] = m
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// penaltyBias are logit biases the speculative tests serve with, beside
// a repeat penalty: "▁the" (278) and "," (29892) held back, "." (29889)
// urged on.
var penaltyBias = []receipt.LogitBias{{Token: 278, BiasE6: -2_000_000}, {Token: 29889, BiasE6: 1_500_000}, {Token: 29892, BiasE6: -3_000_000}}

// TestSpeculativeGreedyMatchesPlain: with any proposer, a greedy serve
// emits plain decoding's tokens (llama.cpp's reference ids), with and
// without a penalty and logit biases, a penalty over the prompt's tail
// too, and DRY, and reports what it speculated.
func TestSpeculativeGreedyMatchesPlain(t *testing.T) {
	plain := fortunes(t)
	refs := q8References(t)
	for name, m := range speculating(t) {
		if m.Draft() == "" {
			t.Fatalf("%s: no draft named", name)
		}
		var proposed, accepted uint32
		for _, s := range []*receipt.Sampling{nil, {RepeatPenaltyE6: 1_300_000, LogitBias: penaltyBias}, {RepeatPenaltyE6: 1_300_000, PenaltyLastN: 12},
			{DRYMultiplierE6: 1_500_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 1, DRYLastN: receipt.PenaltyAll}} {
			for _, ref := range refs {
				want, _ := serve(t, plain.Engine(), request(40, s), ref.Prompt)
				got, out := serve(t, m.Engine(), request(40, s), ref.Prompt)
				if !slices.Equal(got, want) {
					t.Fatalf("%s, %+v: speculative %v, plain %v", name, s, got, want)
				}
				if out.TokensOut != uint32(len(got)) || out.TokensAccepted != out.TokensOut || out.SpecAccepted > out.SpecProposed {
					t.Fatalf("%s: outcome %+v for %d tokens", name, out, len(got))
				}
				proposed, accepted = proposed+out.SpecProposed, accepted+out.SpecAccepted
			}
		}
		if proposed == 0 {
			t.Errorf("%s: nothing was proposed", name)
		}
		if name == "self" && accepted != proposed {
			t.Errorf("self-draft: %d of %d drafts accepted; a model agrees with itself", accepted, proposed)
		}
		t.Logf("%s: %d of %d drafts accepted", name, accepted, proposed)
	}
}

// TestSpeculativeCopyDraftDefaults: with the draft named and its cost —
// the built-in model's own weights requantised to Q4_0, a copy the
// engine recognises (spec.SameShape), at c = 0.3, what that copy costs
// against the F16 (which is not in the repository; against the Q8_0 it
// costs 0.55, where a window barely pays) — greedy serves speculate
// under the default threshold, the calibrated rule, keep plain decoding's
// tokens, and draft half as much again as under the fixed threshold of
// spec.DefaultThreshold, with most drafts standing.
func TestSpeculativeCopyDraftDefaults(t *testing.T) {
	plain := fortunes(t)
	q4 := filepath.Join(t.TempDir(), "fortunes-q4_0.gguf")
	if err := modeltest.Requantize(fortunesPath, q4, quant.Q4_0); err != nil {
		t.Fatal(err)
	}
	run := func(threshold float64) (proposed, accepted uint32) {
		// The files' prices (see speculating): the rule's
		// choices, not this machine's load, decide what is drafted.
		m, err := Load(fortunesPath, Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Draft: q4, DraftCost: 0.3, DraftThreshold: threshold, DraftPricesFromFiles: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		for _, ref := range q8References(t) {
			want, _ := serve(t, plain.Engine(), request(64, nil), ref.Prompt)
			got, out := serve(t, m.Engine(), request(64, nil), ref.Prompt)
			if !slices.Equal(got, want) {
				t.Fatalf("threshold %v: speculative %v, plain %v", threshold, got, want)
			}
			proposed, accepted = proposed+out.SpecProposed, accepted+out.SpecAccepted
		}
		return proposed, accepted
	}
	p, a := run(0)
	p0, a0 := run(spec.DefaultThreshold)
	t.Logf("defaults: %d of %d drafts accepted; threshold %v: %d of %d", a, p, spec.DefaultThreshold, a0, p0)
	if 2*p < 3*p0 || 5*a < 4*p {
		t.Errorf("defaults proposed %d (%d accepted), the fixed threshold %d: want half as many again, 80%% accepted", p, a, p0)
	}
}

// TestSpeculativeNoTokenPastTheEnd: a stop string, max_tokens or an emit
// that fails (the joule ceiling) inside a window of accepted drafts ends
// the output exactly where plain decoding ends it, with no token beyond,
// and the session keeps no token the serve did not hand out.
func TestSpeculativeNoTokenPastTheEnd(t *testing.T) {
	plain := fortunes(t)
	m := speculating(t)["self"]
	ref := q8References(t)[0]
	for _, n := range []uint32{1, 2, 5, 7} {
		want, _ := serve(t, plain.Engine(), request(n, nil), ref.Prompt)
		got, _ := serve(t, m.Engine(), request(n, nil), ref.Prompt)
		if !slices.Equal(got, want) {
			t.Errorf("max_tokens %d: %v, want %v", n, got, want)
		}
	}
	stop := request(40, &receipt.Sampling{Stop: []string{"little"}})
	want, _ := serve(t, plain.Engine(), stop, ref.Prompt)
	got, out := serve(t, m.Engine(), stop, ref.Prompt)
	if !slices.Equal(got, want) || out.SpecProposed == 0 {
		t.Errorf("stop string: %v, want %v (%+v)", got, want, out)
	}
	// The ceiling: emit fails at the 4th token.
	ceiling := errors.New("joule ceiling")
	var emitted []uint32
	_, err := m.Engine().Serve(context.Background(), request(40, nil), ref.Prompt, func(tok uint32) error {
		if len(emitted) == 3 {
			return ceiling
		}
		emitted = append(emitted, tok)
		return nil
	})
	if !errors.Is(err, ceiling) || !slices.Equal(emitted, ref.Generated[:3]) {
		t.Errorf("a failing emit: %v after %v, want %v", err, emitted, ref.Generated[:3])
	}
	// Every session holds a prompt and at most the tokens handed out.
	m.eng.pool.mu.Lock()
	defer m.eng.pool.mu.Unlock()
	for _, is := range m.eng.pool.idle {
		toks := is.s.Tokens()
		if len(toks) < len(ref.Prompt) || !slices.Equal(toks[:len(ref.Prompt)], ref.Prompt) {
			continue
		}
		if gen := toks[len(ref.Prompt):]; !slices.Equal(gen, ref.Generated[:len(gen)]) || len(gen) > 40 {
			t.Errorf("an idle session holds %v after the prompt", gen)
		}
	}
}

// TestSpeculativeSampled: a seeded sampled request speculates only when
// it names the model's draft (receipt.Sampling.Draft), and then repeats
// exactly — a replay with the same draft; naming no draft, or another,
// decodes plainly; the per-request switch turns speculation off.
func TestSpeculativeSampled(t *testing.T) {
	m := speculating(t)["self"]
	prompt := q8References(t)[1].Prompt
	sampling := func(draft string) *receipt.Sampling {
		seed := uint64(11)
		return &receipt.Sampling{TemperatureE6: 900_000, TopPE6: 950_000, Seed: &seed, Draft: draft}
	}
	a, oa := serve(t, m.Engine(), request(24, sampling(m.Draft())), prompt)
	b, ob := serve(t, m.Engine(), request(24, sampling(m.Draft())), prompt)
	oa.Delivered, ob.Delivered = nil, nil
	if !slices.Equal(a, b) || oa != ob {
		t.Fatalf("the same seeded speculative request twice:\n%v %+v\n%v %+v", a, oa, b, ob)
	}
	if oa.SpecProposed == 0 {
		t.Fatalf("a request naming the draft did not speculate: %+v", oa)
	}
	plain, _ := serve(t, fortunes(t).Engine(), request(24, sampling("")), prompt)
	for _, d := range []string{"", "lookup"} {
		got, out := serve(t, m.Engine(), request(24, sampling(d)), prompt)
		if out.SpecProposed != 0 || !slices.Equal(got, plain) {
			t.Errorf("naming draft %q: %+v, tokens %v, plain %v", d, out, got, plain)
		}
	}
	var got []uint32
	out, err := m.Engine().Serve(engine.WithSpeculation(context.Background(), false), request(24, nil), prompt, func(tok uint32) error {
		got = append(got, tok)
		return nil
	})
	if err != nil || out.SpecProposed != 0 {
		t.Errorf("speculation switched off: %v, %+v", err, out)
	}
}

// TestSpeculativeConcurrentServes: serves speculating together share the
// scheduler's steps (windows batched with each other and with plain
// serves) and each gets plain decoding's tokens.
func TestSpeculativeConcurrentServes(t *testing.T) {
	plain := fortunes(t)
	m := speculating(t)["lookup"]
	refs := q8References(t)
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(refs))
	for i := range 2 * len(refs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := refs[i%len(refs)]
			e := m.Engine()
			if i%3 == 0 {
				e = plain.Engine()
			}
			var got []uint32
			if _, err := e.Serve(context.Background(), request(40, nil), ref.Prompt, func(tok uint32) error {
				got = append(got, tok)
				return nil
			}); err != nil {
				errs <- err
				return
			}
			if want := untilEOS(plain, ref.Generated); !slices.Equal(got, want) {
				errs <- errors.New("a concurrent serve's tokens differ from plain decoding's")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// workCount is a hw.WorkRecorder that sums.
type workCount struct{ n atomic.Uint64 }

func (w *workCount) AddWork(u uint64) { w.n.Add(u) }

// TestSpeculativeWork: a serve that drafts with a model reports the
// draft's tokens as work too (they run inside its span), more than the
// same serve without speculation reports for the target's alone.
func TestSpeculativeWork(t *testing.T) {
	m := speculating(t)["self"]
	prompt := q8References(t)[0].Prompt
	work := func(on bool) uint64 {
		var w workCount
		ctx := engine.WithSpeculation(hw.WithWork(context.Background(), &w), on)
		if _, err := m.Engine().Serve(ctx, request(20, nil), prompt, func(uint32) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return w.n.Load()
	}
	off, on := work(false), work(true)
	if on <= off {
		t.Errorf("work with the draft %d, without %d", on, off)
	}
}

// TestDraftVocabularyRefused: a draft whose vocabulary is not the
// target's is refused at load, saying so.
func TestDraftVocabularyRefused(t *testing.T) {
	p, err := writeFixture(t.TempDir(), "llama", "Q8_0") // 2048 tokens
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(fortunesPath, Config{Context: 256, Draft: p})
	if err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("a draft of another vocabulary: %v", err)
	}
}

// TestSpeculativeWindowsWait: with more speculating serves than full
// windows fit a step's logits rows, the windows that do not fit wait a
// step, and every serve still gets plain decoding's tokens.
func TestSpeculativeWindowsWait(t *testing.T) {
	plain := fortunes(t)
	// Priced by the files, as speculating's models are: timed at load
	// under the race detector, the rows could price every window shut.
	m, err := Load(fortunesPath, Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Sessions: 8,
		Draft: fortunesPath, DraftMax: 4, DraftCost: 0.05, DraftThreshold: -1, DraftPricesFromFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if rows := m.eng.sched.batch.Seqs(); rows >= 8*5 {
		t.Fatalf("%d logits rows: every window fits, nothing waits", rows)
	}
	refs := q8References(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var proposed atomic.Uint32
	for i := range 8 {
		wg.Go(func() {
			ref := refs[i%len(refs)]
			var got []uint32
			out, err := m.Engine().Serve(context.Background(), request(40, nil), ref.Prompt, func(tok uint32) error {
				got = append(got, tok)
				return nil
			})
			if err != nil {
				errs <- err
				return
			}
			proposed.Add(out.SpecProposed)
			if want := untilEOS(plain, ref.Generated); !slices.Equal(got, want) {
				errs <- errors.New("a serve's tokens differ from plain decoding's")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if proposed.Load() == 0 {
		t.Error("nothing was proposed")
	}
}

// TestSpeculativeBatchedDrafts: concurrent serves drafting with a model
// share the draft model's steps, and each drafts, accepts and emits
// exactly what it does alone (greedy; a step's rows do not depend on what
// shares it). The serves run together until the draft's scheduler has
// carried at least two of them in one step.
func TestSpeculativeBatchedDrafts(t *testing.T) {
	m := speculating(t)["self"]
	e := m.Engine()
	refs := q8References(t)
	type result struct {
		tokens             []uint32
		proposed, accepted uint32
	}
	serve := func(prompt []uint32) (result, error) {
		var r result
		out, err := e.Serve(context.Background(), request(40, nil), prompt, func(tok uint32) error {
			r.tokens = append(r.tokens, tok)
			return nil
		})
		r.proposed, r.accepted = out.SpecProposed, out.SpecAccepted
		return r, err
	}
	alone := make([]result, len(refs))
	for i, ref := range refs {
		r, err := serve(ref.Prompt)
		if err != nil {
			t.Fatal(err)
		}
		if r.proposed == 0 {
			t.Fatalf("prompt %d: the draft proposed nothing alone", i)
		}
		alone[i] = r
	}
	if n := e.DraftSchedStats().MaxSeqs; n != 1 {
		t.Fatalf("serves one at a time: the draft's steps carried up to %d sequences, want 1", n)
	}
	for attempt := 0; e.DraftSchedStats().MaxSeqs < 2; attempt++ {
		if attempt == 10 {
			t.Fatalf("10 rounds of %d concurrent serves never shared a draft step", 2*len(refs))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*len(refs))
		for i := range 2 * len(refs) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := i % len(refs)
				r, err := serve(refs[k].Prompt)
				switch {
				case err != nil:
					errs <- err
				case !slices.Equal(r.tokens, alone[k].tokens):
					errs <- fmt.Errorf("prompt %d: batched drafts emitted %v, alone %v", k, r.tokens, alone[k].tokens)
				case r.proposed != alone[k].proposed || r.accepted != alone[k].accepted:
					errs <- fmt.Errorf("prompt %d: batched drafts proposed %d and accepted %d, alone %d and %d", k, r.proposed, r.accepted, alone[k].proposed, alone[k].accepted)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}

// TestSpeculativeConstrained: under a grammar (JSON schemas, and GBNF
// that loops on the prompt's words) a greedy serve with any proposer
// emits plain constrained decoding's tokens, with and without a penalty,
// and its windows are verified (drafts proposed, most of lookup's on the
// repeating prompt standing); a seeded sampled serve naming the draft
// speculates, writes what the grammar allows and repeats exactly.
func TestSpeculativeConstrained(t *testing.T) {
	plain := fortunes(t)
	var grammars []*grammar.Grammar
	for _, sc := range proofSchemas {
		g, err := grammar.FromSchema([]byte(sc.schema))
		if err != nil {
			t.Fatal(err)
		}
		grammars = append(grammars, g)
	}
	for _, src := range []string{`root ::= "The " [a-z .]+`, `root ::= "{\"text\": \"" [a-zA-Z .]+ "\"}"`} {
		g, err := grammar.ParseGBNF(src)
		if err != nil {
			t.Fatal(err)
		}
		grammars = append(grammars, g)
	}
	prompts := [][]uint32{
		plain.Tokenize("Answer in JSON:", true, false),
		plain.Tokenize("The cat sat on the mat. The cat sat on the mat. The cat sat on the mat.", true, false),
	}
	for name, m := range speculating(t) {
		var proposed, accepted uint32
		for gi, g := range grammars {
			for _, prompt := range prompts {
				for _, s := range []func() *receipt.Sampling{
					func() *receipt.Sampling { return nil },
					func() *receipt.Sampling { return &receipt.Sampling{RepeatPenaltyE6: 1_300_000} },
				} {
					_, want, _, err := constrainedOutcome(t, plain.Engine(), plain, g, 48, s(), prompt)
					if err != nil {
						t.Fatal(err)
					}
					_, got, out, err := constrainedOutcome(t, m.Engine(), m, g, 48, s(), prompt)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s, grammar %d, %+v: speculative %v, plain %v", name, gi, s(), got, want)
					}
					if out.SpecAccepted > out.SpecProposed || out.TokensOut != uint32(len(got)) {
						t.Fatalf("%s: outcome %+v for %d tokens", name, out, len(got))
					}
					proposed, accepted = proposed+out.SpecProposed, accepted+out.SpecAccepted
				}
			}
		}
		t.Logf("%s: %d of %d drafts accepted", name, accepted, proposed)
		if proposed == 0 || accepted == 0 {
			t.Errorf("%s: %d of %d drafts accepted under the grammars: the windows were not verified", name, accepted, proposed)
		}

		// Sampled, naming the draft, cool enough that the sampled text
		// repeats the prompt, which lookup drafts from.
		seed := uint64(5)
		sampled := func() *receipt.Sampling {
			return &receipt.Sampling{TemperatureE6: 300_000, Seed: &seed, Draft: m.Draft()}
		}
		g := grammars[len(proofSchemas)] // root ::= "The " [a-z .]+
		a, at, oa, err := constrainedOutcome(t, m.Engine(), m, g, 48, sampled(), prompts[1])
		if err != nil {
			t.Fatal(err)
		}
		_, bt, ob, err := constrainedOutcome(t, m.Engine(), m, g, 48, sampled(), prompts[1])
		if err != nil {
			t.Fatal(err)
		}
		oa.Delivered, ob.Delivered = nil, nil
		if !slices.Equal(at, bt) || oa != ob {
			t.Errorf("%s: the same seeded constrained request twice: %v %+v, then %v %+v", name, at, oa, bt, ob)
		}
		if oa.SpecProposed == 0 {
			t.Errorf("%s: a sampled constrained request naming the draft did not speculate: %+v", name, oa)
		}
		mt, _ := g.NewMatcher()
		if err := mt.Advance([]byte(a)); err != nil {
			t.Errorf("%s: sampled %q is not what the grammar allows: %v", name, a, err)
		}
	}
}

// TestSpeculativeConstrainedConcurrent: constrained serves speculating
// at once (their windows batched with each other and with a free serve's,
// each row under its own serve's grammar) each get the tokens they get
// alone.
func TestSpeculativeConstrainedConcurrent(t *testing.T) {
	m := speculating(t)["self"]
	prompt := m.Tokenize("The cat sat on the mat. The cat sat on the mat.", true, false)
	var grammars []*grammar.Grammar
	for _, sc := range proofSchemas[:2] {
		g, err := grammar.FromSchema([]byte(sc.schema))
		if err != nil {
			t.Fatal(err)
		}
		grammars = append(grammars, g)
	}
	words, err := grammar.ParseGBNF(`root ::= [a-z .]+`)
	if err != nil {
		t.Fatal(err)
	}
	grammars = append(grammars, words, nil)
	run := func(g *grammar.Grammar) ([]uint32, engine.Outcome, error) {
		if g == nil {
			var got []uint32
			out, err := m.Engine().Serve(context.Background(), request(40, nil), prompt, func(tok uint32) error {
				got = append(got, tok)
				return nil
			})
			return got, out, err
		}
		_, got, out, err := constrainedOutcome(t, m.Engine(), m, g, 40, nil, prompt)
		return got, out, err
	}
	alone := make([][]uint32, len(grammars))
	for i, g := range grammars {
		got, _, err := run(g)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = got
	}
	var wg sync.WaitGroup
	var proposed atomic.Uint32
	errs := make(chan error, len(grammars))
	for i, g := range grammars {
		wg.Go(func() {
			got, out, err := run(g)
			proposed.Add(out.SpecProposed)
			if err == nil && !slices.Equal(got, alone[i]) {
				err = fmt.Errorf("serve %d together: %v, alone %v", i, got, alone[i])
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if proposed.Load() == 0 {
		t.Error("the serves together proposed nothing")
	}
}

// TestSpeculativeLimits: a request's own bounds on its rounds
// (llama-server's speculative.n_max, n_min, p_min) hold: at most n_max
// drafts a round, so that no more than one accepted draft comes with
// each target token at n_max 1 (where unbounded most tokens are accepted
// drafts); no round verified below n_min; fewer drafts under a high
// p_min; and the tokens stay plain decoding's. A sampled request's bounds
// are its draft name's, whatever its context says. A p_min for prompt
// lookup is refused, and so is an n_min for sampled drafts.
func TestSpeculativeLimits(t *testing.T) {
	ms := speculating(t)
	m := ms["self"]
	prompt := q8References(t)[1].Prompt
	want, _ := serve(t, fortunes(t).Engine(), request(40, nil), prompt)
	run := func(l spec.Limits, s *receipt.Sampling) ([]uint32, engine.Outcome) {
		t.Helper()
		var got []uint32
		out, err := m.Engine().Serve(engine.WithSpecLimits(context.Background(), l), request(40, s), prompt, func(tok uint32) error {
			got = append(got, tok)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, out
	}
	got, free := run(spec.Limits{}, nil)
	if !slices.Equal(got, want) || free.SpecAccepted*2 <= free.TokensOut {
		t.Fatalf("unbounded: %d of %d tokens accepted drafts; the test needs most (tokens equal plain: %v)", free.SpecAccepted, free.TokensOut, slices.Equal(got, want))
	}
	got, one := run(spec.Limits{Max: 1}, nil)
	if !slices.Equal(got, want) || one.SpecProposed == 0 || one.SpecAccepted*2 > one.TokensOut+1 {
		t.Errorf("n_max 1: %+v (tokens equal plain: %v); at most one accepted draft a target token", one, slices.Equal(got, want))
	}
	got, none := run(spec.Limits{Min: 5}, nil) // above the model's window of 4
	if !slices.Equal(got, want) || none.SpecProposed != 0 {
		t.Errorf("n_min 5 on windows of at most 4: %+v (tokens equal plain: %v)", none, slices.Equal(got, want))
	}
	got, sure := run(spec.Limits{PMin: 0.99}, nil)
	if !slices.Equal(got, want) || sure.SpecProposed >= free.SpecProposed {
		t.Errorf("p_min 0.99: %d drafts, unbounded %d (tokens equal plain: %v)", sure.SpecProposed, free.SpecProposed, slices.Equal(got, want))
	}
	seed := uint64(3)
	sampled := func(draft string) *receipt.Sampling {
		return &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed, Draft: draft}
	}
	_, so := run(spec.Limits{Max: 4}, sampled(spec.LimitedDraft(m.Draft(), spec.Limits{Max: 1})))
	if so.SpecProposed == 0 || so.SpecAccepted*2 > so.TokensOut+1 {
		t.Errorf("sampled, named n_max 1 (its context saying 4): %+v", so)
	}
	if _, err := ms["lookup"].Engine().Serve(engine.WithSpecLimits(context.Background(), spec.Limits{PMin: 0.5}), request(8, nil), prompt, func(uint32) error { return nil }); !errors.Is(err, engine.ErrRefused) {
		t.Errorf("p_min with prompt lookup: %v, want refused", err)
	}
	// A sampled round dropped for drawing too few drafts would skew the
	// output: n_min is refused where the drafts are sampled, and taken
	// where they are lookup's.
	if _, err := m.Engine().Serve(context.Background(), request(8, sampled(spec.LimitedDraft(m.Draft(), spec.Limits{Min: 2}))), prompt, func(uint32) error { return nil }); !errors.Is(err, engine.ErrRefused) {
		t.Errorf("n_min with sampled drafts: %v, want refused", err)
	}
	lk := ms["lookup"]
	if _, err := lk.Engine().Serve(context.Background(), request(8, sampled(spec.LimitedDraft(lk.Draft(), spec.Limits{Min: 2}))), prompt, func(uint32) error { return nil }); err != nil {
		t.Errorf("n_min with lookup's drafts, sampled: %v", err)
	}
}

// TestPrediction: a greedy serve given a predicted output (a model with
// no draft of its own, and one with a draft model, which the prediction
// stands in for) gives plain decoding's tokens, drafting from the
// prediction: given the answer itself, nearly every token is an accepted
// draft; given the answer with a stretch changed, the drafts stand again
// after the change; given unrelated tokens, the serve is still plain. A
// sampled serve names its prediction as its draft, and repeats.
func TestPrediction(t *testing.T) {
	prompt := q8References(t)[1].Prompt
	plain := fortunes(t)
	want, _ := serve(t, plain.Engine(), request(40, nil), prompt)
	edited := slices.Concat(want[:12], []uint32{400, 401, 402, 403}, want[16:])
	for name, m := range map[string]*Model{"no draft": plain, "draft model": speculating(t)["self"]} {
		run := func(pred []uint32) engine.Outcome {
			t.Helper()
			var got []uint32
			out, err := m.Engine().Serve(engine.WithPrediction(context.Background(), pred), request(40, nil), prompt, func(tok uint32) error {
				got = append(got, tok)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: the tokens differ from plain decoding's:\n%v\n%v", name, got, want)
			}
			return out
		}
		out := run(want)
		t.Logf("%s, the answer predicted: %d of %d tokens accepted drafts, %d proposed", name, out.SpecAccepted, out.TokensOut, out.SpecProposed)
		if out.SpecAccepted*10 < out.TokensOut*7 || out.SpecProposed-out.SpecAccepted > 8 { // windows of the draft's most: 4 for "self"
			t.Errorf("%s, the answer predicted: %d of %d tokens accepted drafts, %d drafts fell", name, out.SpecAccepted, out.TokensOut, out.SpecProposed-out.SpecAccepted)
		}
		out = run(edited)
		t.Logf("%s, the answer edited: %d of %d tokens accepted drafts, %d proposed", name, out.SpecAccepted, out.TokensOut, out.SpecProposed)
		if out.SpecAccepted*10 < out.TokensOut*5 {
			t.Errorf("%s, the answer edited: %d of %d tokens accepted drafts (%d proposed)", name, out.SpecAccepted, out.TokensOut, out.SpecProposed)
		}
		run(slices.Repeat([]uint32{500, 501}, 20))
	}
	// Sampled: the request names the prediction as its draft, and a
	// seeded serve repeats; a name that is not the prediction's, or a
	// prediction's name without the prediction, is refused.
	seed := uint64(3)
	sampled := func(pred []uint32, draft string) ([]uint32, engine.Outcome, error) {
		var got []uint32
		ctx := context.Background()
		if pred != nil {
			ctx = engine.WithPrediction(ctx, pred)
		}
		out, err := plain.Engine().Serve(ctx, request(40, &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed, Draft: draft}), prompt, func(t uint32) error {
			got = append(got, t)
			return nil
		})
		return got, out, err
	}
	named := spec.PricedDraft(spec.PredictionID(want), spec.PredictionPrices(spec.Prices{}, false))
	first, out, err := sampled(want, named)
	if err != nil || out.SpecProposed == 0 {
		t.Fatalf("a sampled serve naming its prediction: %+v, %v", out, err)
	}
	if again, _, err := sampled(want, named); err != nil || !slices.Equal(again, first) {
		t.Errorf("the seeded serve again: %v (the same tokens: %v)", err, slices.Equal(again, first))
	}
	for name, c := range map[string]struct {
		pred  []uint32
		draft string
	}{
		"unnamed":               {want, ""},
		"another prediction's":  {want, spec.PredictionID(edited)},
		"the model's draft":     {want, spec.DraftLookup},
		"a name, no prediction": {nil, named},
	} {
		if _, _, err := sampled(c.pred, c.draft); !errors.Is(err, engine.ErrRefused) {
			t.Errorf("sampled, %s: %v, want refused", name, err)
		}
	}
}

// TestPredictionConstrained: output held to a grammar drafts from a
// prediction too, each row verified under the grammar's mask: given the
// constrained answer (whole, or with tokens the grammar refuses in its
// middle) the serve gives plain constrained decoding's tokens, and the
// whole prediction's drafts stand.
func TestPredictionConstrained(t *testing.T) {
	m := fortunes(t)
	prompt := m.Tokenize("Answer in JSON:", true, false)
	for gi, sc := range proofSchemas[:min(2, len(proofSchemas))] {
		g, err := grammar.FromSchema([]byte(sc.schema))
		if err != nil {
			t.Fatal(err)
		}
		_, want, _, err := constrainedOutcome(t, m.Engine(), m, g, 48, nil, prompt)
		if err != nil {
			t.Fatal(err)
		}
		id := engine.GrammarID(g)
		n := len(want)
		for name, pred := range map[string][]uint32{"whole": want, "edited": slices.Concat(want[:n/2], []uint32{400, 401}, want[n/2+1:])} {
			var got []uint32
			ctx := engine.WithPrediction(engine.WithGrammar(context.Background(), g), pred)
			out, err := m.Engine().Serve(ctx, request(48, &receipt.Sampling{Grammar: &id}), prompt, func(tok uint32) error {
				got = append(got, tok)
				return nil
			})
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("grammar %d, %s: %v; tokens equal plain constrained decoding's: %v", gi, name, err, slices.Equal(got, want))
			}
			if name == "whole" && out.SpecAccepted*2 < out.TokensOut {
				t.Errorf("grammar %d, the answer predicted: %d of %d tokens accepted drafts (%d proposed)", gi, out.SpecAccepted, out.TokensOut, out.SpecProposed)
			}
		}
	}
}
