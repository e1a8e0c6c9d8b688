package spec_test

import (
	"context"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/spec"
)

// fakeDraft is a proposer for the window's policy alone: it drafts
// whatever it is asked (no tokens: the simulation decides what stands),
// and records whether it took in the prompt.
type fakeDraft struct{ prefilled bool }

func (f *fakeDraft) Propose(_ context.Context, _ []uint32, _, k int) ([]spec.Draft, error) {
	return make([]spec.Draft, k), nil
}

func (f *fakeDraft) Prefill(context.Context, []uint32) error {
	f.prefilled = true
	return nil
}

// probeRun is what a simulated decode did.
type probeRun struct {
	tokens int
	// cost is in target passes: a plain round 1; a drafting round 1 +
	// k·(c+v), and c for each token the proposer caught up on before it
	// drafted (those since it last drafted, the prompt's included if it
	// never took it in).
	cost float64
	// offAt is the tokens generated when the window first decoded
	// plainly (-1: never); after counts what the rounds from then on
	// cost beyond 1 each, and plainAfter the plain rounds among them.
	offAt      int
	after      float64
	plainAfter int
	// maxAfter[i] is the largest window asked for at or after tokens
	// marks[i]; draftsAfter the drafting rounds after offAt.
	marks       []int
	maxAfter    []int
	draftsAfter int
}

// simulate decodes n tokens after a prompt of prompt tokens with w and a
// proposer costing c per drafted token on a target whose extra rows cost
// v each; stand(pos, k) is how many of a round's k drafts stand when pos
// tokens have been generated before it. Everything is counted here, apart
// from the window, so that the test checks the window's own accounting.
func simulate(t *testing.T, w *spec.Window, c, v float64, prompt, n int, stand func(pos, k int) int, marks ...int) probeRun {
	t.Helper()
	f := &fakeDraft{}
	if err := spec.Prefill(context.Background(), f, w, make([]uint32, prompt)); err != nil {
		t.Fatal(err)
	}
	behind := 0
	if !f.prefilled {
		behind = prompt
	}
	r := probeRun{offAt: -1, marks: marks, maxAfter: make([]int, len(marks))}
	for r.tokens < n {
		k := w.Size()
		var cost float64
		var got int
		if k == 0 {
			cost, got = 1, 1
			behind++
			if r.offAt < 0 {
				r.offAt = r.tokens
			}
			if r.offAt >= 0 {
				r.plainAfter++
			}
		} else {
			drafts, err := w.Draft(context.Background(), f, nil, 0, k)
			if err != nil {
				t.Fatal(err)
			}
			a := min(stand(r.tokens, k), k)
			w.Keep(drafts, a, 0)
			cost = 1 + float64(k)*(c+v) + c*float64(behind)
			got, behind = a+1, 0
			if r.offAt >= 0 {
				r.draftsAfter++
			}
			for i, m := range marks {
				if r.tokens >= m {
					r.maxAfter[i] = max(r.maxAfter[i], k)
				}
			}
		}
		if r.offAt >= 0 {
			r.after += cost - 1
		}
		r.cost += cost
		r.tokens += got
	}
	return r
}

// lcg is a deterministic stream of uniform draws in [0, 1).
type lcg uint64

func (l *lcg) next() float64 {
	*l = *l*6364136223846793005 + 1442695040888963407
	return float64(uint64(*l)>>11) / (1 << 53)
}

// standEach has each draft stand with probability a, drawn from a fixed
// stream: up to the first that falls.
func standEach(a float64, seed uint64) func(pos, k int) int {
	l := lcg(seed)
	return func(_, k int) int {
		n := 0
		for n < k && l.next() < a {
			n++
		}
		return n
	}
}

// TestWindowProbes: once speculation stops paying the window probes
// with a short window after a gap that doubles, within a budget of the
// plain rounds since counted with a draft model's catch-up; acceptance
// that turns high is picked up again, and acceptance that stays low
// costs, over the whole decode, within the 5% of plain decoding
// (a fake proposer; every cost counted in target passes by the
// simulation itself).
func TestWindowProbes(t *testing.T) {
	const v = spec.DefaultRowCost
	for _, tc := range []struct {
		name string
		c    float64
		// probes: whether such a proposer probes at all (its catch-up
		// per skipped token, c, is within the 2% budget).
		probes bool
	}{
		{"prompt lookup", 0, true},
		{"a draft 1% of the target", 0.01, true},
		{"a draft 20% of the target", 0.2, false},
	} {
		// Nothing ever stands: after the window turns off, the probes
		// cost at most 2% of the plain rounds since, and the whole
		// decode (the first windows at the prior included) stays
		// within 5% of plain decoding.
		for _, n := range []int{256, 1000, 10000} {
			r := simulate(t, spec.NewWindow(8, tc.c, 0), tc.c, v, 100, n, func(int, int) int { return 0 })
			if r.offAt < 0 || r.offAt > 20 {
				t.Fatalf("%s, %d tokens: nothing stands, and the window turned off after %d", tc.name, n, r.offAt)
			}
			if r.after > 0.02*float64(r.plainAfter)+1e-9 {
				t.Errorf("%s, %d tokens: probes cost %.2f passes over %d plain rounds, more than 2%%", tc.name, n, r.after, r.plainAfter)
			}
			if ratio := r.cost / float64(r.tokens); ratio > 1.05 {
				t.Errorf("%s, %d tokens: %.3f passes a token, more than 5%% over plain decoding", tc.name, n, ratio)
			}
			if tc.probes != (r.draftsAfter > 0) && n >= 1000 {
				t.Errorf("%s, %d tokens: %d probes after the window turned off", tc.name, n, r.draftsAfter)
			}
			t.Logf("%s, nothing stands, %d tokens: %.4f passes a token; off after %d, then %d probes costing %.2f over %d plain rounds",
				tc.name, n, r.cost/float64(r.tokens), r.offAt, r.draftsAfter, r.after, r.plainAfter)
		}
		// Low acceptance that is not nil (each draft stands with
		// probability 0.2, a fixed stream): a lucky probe may turn the
		// window on for a round or two, all counted.
		for _, seed := range []uint64{1, 2, 3} {
			r := simulate(t, spec.NewWindow(8, tc.c, 0), tc.c, v, 100, 10000, standEach(0.2, seed))
			if ratio := r.cost / float64(r.tokens); ratio > 1.05 {
				t.Errorf("%s, acceptance 0.2, seed %d: %.3f passes a token, more than 5%% over plain decoding", tc.name, seed, ratio)
			}
			t.Logf("%s, acceptance 0.2, seed %d: %.4f passes a token, %d drafting rounds after turning off", tc.name, seed, r.cost/float64(r.tokens), r.draftsAfter)
		}
		// Nothing stands for 2000 tokens, then everything does: a
		// proposer that probes is back at full windows within a few
		// probe gaps; one whose catch-up is over the budget is not.
		const turn = 2000
		r := simulate(t, spec.NewWindow(8, tc.c, 0), tc.c, v, 100, 4000, func(pos, k int) int {
			if pos < turn {
				return 0
			}
			return k
		}, turn, turn+600, 3000)
		if r.offAt < 0 || r.offAt > 20 {
			t.Fatalf("%s: the window turned off after %d tokens", tc.name, r.offAt)
		}
		if tc.probes && (r.maxAfter[1] != 8 || r.maxAfter[2] != 8) {
			t.Errorf("%s: acceptance back at %d tokens, and the largest windows from %d and %d tokens on are %d and %d, want 8",
				tc.name, turn, turn+600, 3000, r.maxAfter[1], r.maxAfter[2])
		}
		if !tc.probes && r.maxAfter[0] != 0 {
			t.Errorf("%s: a draft whose catch-up costs more than the probes' budget drafted a window of %d after turning off", tc.name, r.maxAfter[0])
		}
		t.Logf("%s, acceptance back at %d: largest window from then %d, from %d on %d; %.3f passes a token over %d tokens",
			tc.name, turn, r.maxAfter[0], turn+600, r.maxAfter[1], r.cost/float64(r.tokens), r.tokens)
	}
}

// TestWindowProbeGap: with prompt lookup (nothing to catch up) and
// nothing standing, the plain rounds between probes double up to 256,
// never closer than the budget allows.
func TestWindowProbeGap(t *testing.T) {
	w := spec.NewWindow(8, 0, 0)
	for w.Size() > 0 {
		w.Record(8, 0)
	}
	var gaps []int
	plain := 1 // the round that turned it off
	for range 3000 {
		if k := w.Size(); k > 0 {
			if k != 2 {
				t.Fatalf("a probe of %d drafts, want 2", k)
			}
			gaps = append(gaps, plain)
			plain = 0
			w.Record(k, 0)
			continue
		}
		plain++
	}
	// The first probe waits for the budget: 2 drafts' rows (0.5 passes)
	// over 2% of the plain rounds, 25 of them.
	want := []int{25, 32, 64, 128, 256, 256, 256}
	if len(gaps) < len(want) {
		t.Fatalf("gaps between probes %v, want %v…", gaps, want)
	}
	for i, g := range want {
		if gaps[i] != g {
			t.Fatalf("gaps between probes %v, want %v…", gaps, want)
		}
	}
}

// TestLimitPricesCatchUp: a window told how many tokens the request may
// generate starts a dear draft model only where the passes it expects to
// save over them pay for the draft's catch-up on the prompt: a 1B-shaped
// pair's prices (c 0.655, v 0.08, a copy's prior: 1.09× expected) over a
// 16-token prompt do not pay within 32 tokens, so the draft never takes
// in the prompt and every round is plain; they do within 1000, or where no
// limit is known; a proposer that costs nothing (prompt lookup) always
// starts; and a limit counts down with the tokens generated, so the same
// window decides the same way as the request nears its end.
func TestLimitPricesCatchUp(t *testing.T) {
	const c, v, prompt = 0.655, 0.08, 16
	start := func(limit int, cost float64) (*spec.Window, *fakeDraft) {
		w := spec.NewWindow(0, cost, v).Expect(spec.CopyPrior)
		if limit >= 0 {
			w.Limit(limit)
		}
		f := &fakeDraft{}
		if err := spec.Prefill(context.Background(), f, w, make([]uint32, prompt)); err != nil {
			t.Fatal(err)
		}
		return w, f
	}
	w, f := start(32, c)
	if f.prefilled {
		t.Fatal("limit 32: the draft took in the prompt")
	}
	for i := range 32 {
		if k := w.Size(); k != 0 {
			t.Fatalf("limit 32, round %d: %d drafts asked", i, k)
		}
	}
	for _, limit := range []int{1000, -1} {
		w, f := start(limit, c)
		if !f.prefilled || w.Size() == 0 {
			t.Fatalf("limit %d: prefilled %v; the window does not draft", limit, f.prefilled)
		}
	}
	if w, _ := start(32, 0); w.Size() == 0 {
		t.Fatal("a proposer that costs nothing does not draft under a limit of 32")
	}
	// Counting down: a window started with room to pay, whose draft
	// fell behind (a plain stretch), does not restart near the end.
	w = spec.NewWindow(0, c, v).Expect(spec.CopyPrior).Limit(1000)
	if !w.Starts(prompt) {
		t.Fatal("limit 1000: the window does not start")
	}
	w.Keep(make([]spec.Draft, 2), 2, 0) // 3 tokens
	if !w.Starts(prompt) {
		t.Fatal("limit 997: the window does not start")
	}
	w.Limit(40)
	if w.Starts(prompt) {
		t.Fatal("limit 40: a 16-token catch-up starts the window")
	}
	// A limit counted down to nothing is not taken for no limit.
	w = spec.NewWindow(0, c, v).Expect(spec.CopyPrior).Limit(3)
	w.Keep(make([]spec.Draft, 2), 2, 0)
	if w.Starts(1) {
		t.Fatal("no tokens left: a catch-up starts the window")
	}
}

// TestWindowMeasuredSteps: a window priced by measured steps sizes
// rounds by them. Steps that grow by v a row size them as v alone does;
// a row past the kernels' group of eight (a ninth row costing a pass of
// its own) makes a window of 7 drafts pay more than one of 8, and the
// judge declines the eighth draft.
func TestWindowMeasuredSteps(t *testing.T) {
	const v = 0.1
	linear := linearSteps(v)
	cliff := slices.Clone(linear)
	cliff[8] = cliff[7] + 0.8
	size := func(p spec.Prices) int { return p.Window(0).Expect(1).Size() }
	if a, b := size(spec.Prices{Row: v}), size(spec.Prices{Row: v, Steps: linear}); a != spec.DefaultMaxWindow || b != a {
		t.Errorf("all drafts standing: %d drafts priced by v, %d by steps of v a row; want %d", a, b, spec.DefaultMaxWindow)
	}
	if got := size(spec.Prices{Row: v, Steps: cliff}); got != 7 {
		t.Errorf("a ninth row costing 0.8 of a step: %d drafts, want 7", got)
	}
	// The judge: prompt lookup copying a long run, every draft sure.
	seq := []uint32{1}
	for i := range 30 {
		seq = append(seq, uint32(100+i))
	}
	seq = append(seq, seq[1:4]...)
	for _, c := range []struct {
		steps []float64
		want  int
	}{{linear, 8}, {cliff, 7}} {
		w := spec.Prices{Row: v, Steps: c.steps}.Window(0).Expect(1)
		var got int
		for range 20 { // past the calibration's exploring
			d, err := w.Draft(context.Background(), spec.Lookup{}, seq, 1, w.Size())
			if err != nil {
				t.Fatal(err)
			}
			got = len(d)
			w.Keep(d, len(d), 0)
		}
		if got != c.want {
			t.Errorf("steps %v: lookup drafted %d, want %d", c.steps, got, c.want)
		}
	}
}

// linearSteps are a target's steps over windows up to a full one, each
// row past the first adding v.
func linearSteps(v float64) []float64 {
	steps := make([]float64, spec.DefaultMaxWindow+1)
	for k := range steps {
		steps[k] = 1 + float64(k)*v
	}
	return steps
}

// draftedRounds runs 20 rounds of w, every draft standing, and counts
// those that drafted.
func draftedRounds(t *testing.T, w *spec.Window) int {
	t.Helper()
	rounds := 0
	for range 20 {
		k := w.Size()
		if k == 0 {
			continue
		}
		rounds++
		d, err := w.Draft(context.Background(), &fakeDraft{}, nil, 0, k)
		if err != nil {
			t.Fatal(err)
		}
		w.Keep(d, len(d), 0)
	}
	return rounds
}

// TestWindowPricesCatchUp: a draft model's round after one whose drafts
// all stood first catches up on two tokens, and a greedy window priced
// with that step (Prices.CatchUp) counts it against the round whose
// drafts all stand. A draft at 0.9 of the target whose drafts always
// stand pays for windows of 8 (9 tokens for 8.36 passes) until its
// catch-up costs 1.5: then no window pays (9 for 8.96). A sampled window,
// priced by its request's name, has no catch-up price and decides as
// before.
func TestWindowPricesCatchUp(t *testing.T) {
	const c, v = 0.9, 0.02
	steps := linearSteps(v)
	drafted := func(w *spec.Window) int { return draftedRounds(t, w) }
	if n := drafted(spec.Prices{Cost: c, Row: v, Steps: steps, CatchUp: c}.Window(0).Expect(1)); n != 20 {
		t.Errorf("a catch-up as dear as one step: %d of 20 rounds drafted, want all", n)
	}
	if n := drafted(spec.Prices{Cost: c, Row: v, Steps: steps, CatchUp: 1.5}.Window(0).Expect(1)); n != 0 {
		t.Errorf("a catch-up of 1.5 target passes: %d of 20 rounds drafted, want none", n)
	}
	if n := drafted(spec.NewWindow(0, c, v).Expect(1)); n != 20 {
		t.Errorf("a sampled window: %d of 20 rounds drafted, want all", n)
	}
}

// TestWindowPricesFirstStep: a greedy window priced with a draft model's
// first step of a round dearer than its later ones (Prices.First) counts
// that extra once a round. A draft at 0.9 of the target whose drafts
// always stand pays for windows of 8 (9 tokens for 8.36 passes); with its
// first step 0.7 dearer no window pays (9 for 9.06).
func TestWindowPricesFirstStep(t *testing.T) {
	const c, v = 0.9, 0.02
	steps := linearSteps(v)
	drafted := func(w *spec.Window) int { return draftedRounds(t, w) }
	if n := drafted(spec.Prices{Cost: c, Row: v, Steps: steps, CatchUp: c}.Window(0).Expect(1)); n != 20 {
		t.Errorf("no first-step extra: %d of 20 rounds drafted, want all", n)
	}
	if n := drafted(spec.Prices{Cost: c, Row: v, Steps: steps, CatchUp: c, First: 0.7}.Window(0).Expect(1)); n != 0 {
		t.Errorf("a first step 0.7 target passes dearer: %d of 20 rounds drafted, want none", n)
	}
}
