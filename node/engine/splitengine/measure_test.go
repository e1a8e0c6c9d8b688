package splitengine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/receipt"
)

// TestMeasuredPrices: Measure times steps through the stages and the
// draft's here, and the draft keeps the prices: new sampled requests name
// them (or no draft, where they say sampled speculation cannot pay), and
// a sampled request naming prices is served with windows priced so: the
// whole model's engine, told the same name, draws the same tokens. The
// measuring request leaves the stages: the engine still serves as many
// requests at once as the stages hold sessions for. Greedy serves, whose
// windows the prices now size, still give plain greedy decoding's tokens.
// A pipeline whose last stage answers 4 rows a step holds no measured
// window: Measure says so and the files' prices stand.
func TestMeasuredPrices(t *testing.T) {
	ref, _ := setup(t)
	prompts := specPrompts(t, ref)
	prompt := prompts[len(prompts)-1] // it repeats itself: lookup drafts
	want, _, err := serve(ref.Engine(), prompt, greedy(40, nil))
	if err != nil {
		t.Fatal(err)
	}
	for dname, dc := range drafts(t) {
		e, _ := specEngine(t, ref, layouts["3 stages"], dc)
		id := e.cfg.Draft.ID()
		if got := e.Draft(); got != id {
			t.Fatalf("%s: before measuring, sampled requests name %q, want the bare id %q", dname, got, id)
		}
		p, err := e.Measure(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", dname, err)
		}
		t.Logf("%s: c %.3f, v %.3f, sampled c %.3f, v %.3f, steps %.2f", dname, p.Cost, p.Row, p.SampledCost, p.SampledRow, p.Steps)
		if len(p.Steps) != spec.DefaultMaxWindow+1 || p.SampledRow <= 0 || (dname == "lookup") != (p.SampledCost == 0) {
			t.Errorf("%s: prices %+v: want steps over 1 to %d rows, a sampled row's cost, and a sampled draft's for a draft model only", dname, p, spec.DefaultMaxWindow+1)
		}
		if dc.Cost > 0 && p.Cost != dc.Cost {
			t.Errorf("%s: c %v, want the configured %v", dname, p.Cost, dc.Cost)
		}
		if got := e.Draft(); got != "" && got != spec.PricedDraft(id, p.Sampled()) {
			t.Errorf("%s: after measuring, sampled requests name %q, want the prices measured, or none", dname, got)
		}
		// As many serves at once as the stages hold sessions for: the
		// measuring request holds none of them.
		errs := make(chan error, splitSeqs)
		for range splitSeqs {
			go func() {
				got, _, err := serve(e, prompt, greedy(40, nil))
				if err == nil && !slices.Equal(got, want) {
					err = errors.New("speculating on measured prices gave other tokens than plain decoding")
				}
				errs <- err
			}()
		}
		for range splitSeqs {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", dname, err)
			}
		}
		// A sampled request naming prices is priced as it names them.
		path := dc.Path
		if path == spec.DraftLookup {
			path = ggufengine.DraftLookup
		}
		whole, err := ggufengine.Load(fortunesPath, ggufengine.Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Sessions: 1,
			Draft: path, DraftMax: dc.Max, DraftCost: dc.Cost, DraftThreshold: dc.Threshold, DraftPricesFromFiles: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, draft := range []string{spec.PricedDraft(id, spec.DraftPrices{Cost: 0.02, Row: 0.05}), spec.PricedDraft(id, spec.DraftPrices{Cost: 0.02, Row: 0.05, First: 0.01}),
			spec.PricedDraft(id, spec.DraftPrices{Cost: 0.02, Row: 0.05, First: 0.01, CatchUp: 0.03}), spec.PricedDraft(id, spec.DraftPrices{Cost: 3, Row: 3})} {
			seed := uint64(5)
			s := &receipt.Sampling{TemperatureE6: 900_000, Seed: &seed, Draft: draft}
			a, outA, err := serve(e, prompt, greedy(32, s))
			if err != nil {
				t.Fatal(err)
			}
			w, outW, err := serve(whole.Engine(), prompt, greedy(32, s))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a, w) || outA.SpecProposed != outW.SpecProposed || outA.SpecAccepted != outW.SpecAccepted {
				t.Fatalf("%s, %s: split %v (%d of %d drafts), the whole model %v (%d of %d)", dname, draft, a, outA.SpecAccepted, outA.SpecProposed, w, outW.SpecAccepted, outW.SpecProposed)
			}
			if strings.Contains(draft, "@c0.02") && outA.SpecProposed == 0 {
				t.Errorf("%s, %s: no drafts proposed on windows priced to pay", dname, draft)
			}
		}
		whole.Close()
	}

	t.Run("malformed prices", func(t *testing.T) {
		e, _ := specEngine(t, ref, layouts["2 stages"], spec.DrafterConfig{Path: spec.DraftLookup})
		seed := uint64(1)
		_, _, err := serve(e, prompt, greedy(8, &receipt.Sampling{TemperatureE6: 900_000, Seed: &seed, Draft: "lookup@c0.1"}))
		if !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), "c<cost>v<row>") {
			t.Fatalf("a draft named with malformed prices: %v, want a refusal that states the form", err)
		}
	})

	t.Run("four rows a step", func(t *testing.T) {
		e, _ := specEngineWith(t, ref, layouts["2 stages"], spec.DrafterConfig{Path: spec.DraftLookup}, false, nil)
		if _, err := e.Measure(t.Context()); err == nil || !strings.Contains(err.Error(), "holds no window") {
			t.Fatalf("measuring a pipeline of 4 rows a step: %v, want an error that says it holds no window", err)
		}
		if got := e.Draft(); got != spec.DraftLookup {
			t.Errorf("unmeasured, sampled requests name %q, want %q", got, spec.DraftLookup)
		}
	})

	t.Run("no draft", func(t *testing.T) {
		e := New(Config{Vocab: ref.Config().VocabSize, Context: 256}, nil)
		if _, err := e.Measure(t.Context()); !errors.Is(err, ErrNoDraft) {
			t.Fatalf("measuring an engine without a draft: %v, want ErrNoDraft", err)
		}
	})
}
