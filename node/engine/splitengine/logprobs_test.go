package splitengine

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// servedLogprobs serves req on e, asking for top alternatives, and returns
// the tokens and their records.
func servedLogprobs(t *testing.T, e engine.Engine, prompt []uint32, req receipt.ServeRequest, top int) ([]uint32, []engine.TokenLogprob) {
	t.Helper()
	var recs []engine.TokenLogprob
	ctx := engine.WithLogprobs(context.Background(), &engine.Logprobs{Top: top, Record: func(r engine.TokenLogprob) { recs = append(recs, r) }})
	var toks []uint32
	if _, err := e.Serve(ctx, req, prompt, func(tok uint32) error { toks = append(toks, tok); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(toks) {
		t.Fatalf("%d tokens, %d records", len(toks), len(recs))
	}
	return toks, recs
}

// TestLogprobsSplitAsWhole: a serve split over 2 and 3 stages, speculating
// with prompt lookup, reports for every token the log-probabilities the
// whole model's engine reports (within 1e-9: f32 hidden rows keep the
// split logits the whole model's bit for bit), greedy and sampled.
func TestLogprobsSplitAsWhole(t *testing.T) {
	ref, _ := setup(t)
	prompt := ref.Tokenize(repeating, true, false)
	seed := uint64(11)
	dc := spec.DrafterConfig{Path: spec.DraftLookup, Max: 4}
	for lname, layout := range layouts {
		e, _ := specEngine(t, ref, layout, dc)
		for _, s := range []*receipt.Sampling{nil, {TemperatureE6: 700_000, Seed: &seed, Draft: e.Draft()}} {
			wantToks, want := servedLogprobs(t, ref.Engine(), prompt, greedy(24, s), 3)
			gotToks, got := servedLogprobs(t, e, prompt, greedy(24, s), 3)
			if s == nil && !slices.Equal(gotToks, wantToks) {
				t.Fatalf("%s: tokens %v, whole %v", lname, gotToks, wantToks)
			}
			// A sampled split serve speculates, the whole one does not (its
			// engine has no draft), so their draws differ: compare the
			// records of the tokens they share first.
			n := 0
			for n < min(len(gotToks), len(wantToks)) && gotToks[n] == wantToks[n] {
				n++
			}
			if n == 0 {
				t.Fatalf("%s %+v: no token in common", lname, s)
			}
			for i := range n {
				g, w := got[i], want[i]
				if g.Token != w.Token || math.Abs(g.Logprob-w.Logprob) > 1e-9 || len(g.Top) != len(w.Top) {
					t.Fatalf("%s %+v: token %d %+v, whole %+v", lname, s, i, g, w)
				}
				for j := range g.Top {
					if g.Top[j].ID != w.Top[j].ID || math.Abs(g.Top[j].LogProb-w.Top[j].LogProb) > 1e-9 {
						t.Fatalf("%s: token %d alternative %d %+v, whole %+v", lname, i, j, g.Top[j], w.Top[j])
					}
				}
			}
		}
	}
}
