package ggufengine

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// TestLogprobsFollowTheTarget: whatever decodes the tokens — plainly or
// speculating (prompt lookup, the model as its own draft), greedy with a
// penalty or sampled, a stop string holding tokens back — each emitted
// token gets exactly one record, just before it, and its log-probability
// and top alternatives are the target's softmax at its position: a
// session of the model's own, fed the emitted tokens one at a time,
// softmaxed here in float64 (within 1e-4: the logits are f32 and come
// from other steps).
func TestLogprobsFollowTheTarget(t *testing.T) {
	models := speculating(t)
	models["plain"] = fortunes(t)
	refs := q8References(t)
	const top = 4
	for name, m := range models {
		for _, s := range []*receipt.Sampling{
			{RepeatPenaltyE6: 1_300_000},
			{TemperatureE6: 800_000, Seed: ptr(uint64(3)), Draft: m.Draft()},
			{TemperatureE6: 1_000_000, TopK: 20, Seed: ptr(uint64(9)), Draft: m.Draft(), Stop: []string{"."}},
		} {
			prompt := refs[0].Prompt
			var toks []uint32
			var recs []engine.TokenLogprob
			ctx := engine.WithLogprobs(context.Background(), &engine.Logprobs{Top: top, Record: func(r engine.TokenLogprob) { recs = append(recs, r) }})
			out, err := m.Engine().Serve(ctx, request(32, s), prompt, func(tok uint32) error {
				if len(recs) != len(toks)+1 || recs[len(toks)].Token != tok {
					t.Fatalf("%s: token %d (%d) emitted after %d records", name, len(toks), tok, len(recs))
				}
				toks = append(toks, tok)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(toks) == 0 || len(recs) != len(toks) {
				t.Fatalf("%s %+v: %d tokens, %d records", name, s, len(toks), len(recs))
			}
			if name != "plain" && s.Stop == nil && out.SpecProposed == 0 {
				t.Fatalf("%s %+v: nothing speculated", name, s)
			}
			checkAgainstSession(t, m, prompt, toks, recs, top)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// checkAgainstSession feeds prompt and toks through a fresh session of
// m's model and holds recs to its logits' softmax.
func checkAgainstSession(t *testing.T, m *Model, prompt, toks []uint32, recs []engine.TokenLogprob, top int) {
	t.Helper()
	s, err := m.model.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logits, err := s.Eval(context.Background(), prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range toks {
		var z float64
		for _, l := range logits {
			z += math.Exp(float64(l))
		}
		lp := func(id uint32) float64 { return math.Log(math.Exp(float64(logits[id])) / z) }
		r := recs[i]
		if math.Abs(r.Logprob-lp(tok)) > 1e-4 {
			t.Fatalf("token %d (%d): logprob %v, the session's %v", i, tok, r.Logprob, lp(tok))
		}
		if len(r.Top) != top {
			t.Fatalf("token %d: %d alternatives, want %d", i, len(r.Top), top)
		}
		for j, a := range r.Top {
			// Each alternative is as likely as the session says, and no
			// token left out is likelier than the last kept.
			if math.Abs(a.LogProb-lp(a.ID)) > 1e-4 || j > 0 && a.LogProb > r.Top[j-1].LogProb {
				t.Fatalf("token %d alternative %d: %+v (session %v)", i, j, a, lp(a.ID))
			}
		}
		kept := map[uint32]bool{}
		for _, a := range r.Top {
			kept[a.ID] = true
		}
		for id := range logits {
			if !kept[uint32(id)] && lp(uint32(id)) > r.Top[top-1].LogProb+1e-4 {
				t.Fatalf("token %d: %d (%v) is likelier than the alternatives kept %+v", i, id, lp(uint32(id)), r.Top)
			}
		}
		if logits, err = s.Eval(context.Background(), []uint32{tok}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPromptLogprobs: a serve that asks for its prompt's
// log-probabilities gets each prompt token's (but the first) once, before
// its first output token, the very numbers a session of the model's own
// fed the prompt a token at a time gives (sample.LogProbs of the same
// logits bits: a batch row is the one-token step's); its output is
// plain decoding's, speculating or not, and on an engine whose steps
// hold one logits row (one slot: a window of one). A prompt the cache
// holds is evaluated whole again.
func TestPromptLogprobs(t *testing.T) {
	models := speculating(t)
	models["plain"] = fortunes(t)
	one, err := Load(fortunesPath, Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Sessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { one.Close() })
	models["one slot"] = one
	prompt := q8References(t)[0].Prompt
	// The reference: the prompt a token at a time.
	s, err := fortunes(t).model.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const top = 3
	var want []engine.TokenLogprob
	for i, tok := range prompt[:len(prompt)-1] {
		logits, err := s.Eval(context.Background(), []uint32{tok})
		if err != nil {
			t.Fatal(err)
		}
		lp, alts := sample.LogProbs(nil, logits, prompt[i+1], top)
		want = append(want, engine.TokenLogprob{Token: prompt[i+1], Logprob: lp, Top: alts})
	}
	plain, _ := serve(t, fortunes(t).Engine(), request(12, nil), prompt)
	for name, m := range models {
		for range 2 { // the second time, the cache holds the prompt
			var got []engine.TokenLogprob
			var toks []uint32
			ctx := engine.WithLogprobs(context.Background(), &engine.Logprobs{Top: top,
				Record: func(engine.TokenLogprob) {},
				Prompt: func(p []engine.TokenLogprob) {
					if got != nil || toks != nil {
						t.Fatalf("%s: the prompt's records handed over twice, or after a token", name)
					}
					got = p
				}})
			if _, err := m.Engine().Serve(ctx, request(12, nil), prompt, func(tok uint32) error { toks = append(toks, tok); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(toks, plain) {
				t.Fatalf("%s: %v, plain decoding's %v", name, toks, plain)
			}
			if !slices.EqualFunc(got, want, func(a, b engine.TokenLogprob) bool {
				return a.Token == b.Token && a.Logprob == b.Logprob && slices.Equal(a.Top, b.Top)
			}) {
				t.Fatalf("%s: the prompt's records\n%+v\nwant\n%+v", name, got, want)
			}
		}
	}
}
