package spec_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/gguf/spec"
)

// confident is a Judged proposer whose every draft comes with the same
// confidence; it counts its forward passes (one per draft judged).
type confident struct {
	conf     float64
	forwards int
}

func (c *confident) Propose(ctx context.Context, seq []uint32, gen, k int) ([]spec.Draft, error) {
	return c.ProposeJudged(ctx, seq, gen, k, func(float64) (bool, bool) { return true, true })
}

func (c *confident) ProposeJudged(_ context.Context, _ []uint32, _, k int, judge func(float64) (bool, bool)) ([]spec.Draft, error) {
	var out []spec.Draft
	for len(out) < k {
		c.forwards++
		take, more := judge(c.conf)
		if !take {
			break
		}
		out = append(out, spec.Draft{Token: uint32(len(out)), Conf: c.conf})
		if !more {
			break
		}
	}
	return out, nil
}

// rounds runs n rounds of w with p, each draft standing where stands(i)
// (i counting every draft judged so far), and returns the drafts
// proposed in each round.
func rounds(t *testing.T, w *spec.Window, p *confident, n int, stands func(i int) bool) []int {
	t.Helper()
	var out []int
	i := 0
	for range n {
		k := w.Size()
		if k == 0 {
			out = append(out, 0)
			continue
		}
		drafts, err := w.Draft(context.Background(), p, []uint32{1, 2, 3}, 1, k)
		if err != nil {
			t.Fatal(err)
		}
		acc := 0
		for acc < len(drafts) && stands(i+acc) {
			acc++
		}
		i += len(drafts)
		w.Keep(drafts, acc, 0)
		out = append(out, len(drafts))
	}
	return out
}

func mean(v []int) float64 {
	s := 0
	for _, x := range v {
		s += x
	}
	return float64(s) / float64(len(v))
}

// TestJudgedDrafting: under a window, a draft model's confidence is
// priced by how often drafts of that confidence stood in the request.
// A draft that is unsure of itself (0.3) but always right — a more
// quantised copy of the target — drafts whole windows from its second
// round (its band's prior is the window's acceptance estimate, not its
// 0.3), where a fixed threshold of DefaultThreshold would never let it
// draft; unsure and right one time in five, it soon drafts no more than
// a draft a round, and then none; so does one that is sure of itself
// (0.9) but right one time in five; a fixed window takes every draft it
// asks for.
func TestJudgedDrafting(t *testing.T) {
	humble := &confident{conf: 0.3}
	got := rounds(t, spec.NewWindow(8, 0.2, 0.1), humble, 60, func(int) bool { return true })
	if got[0] > 2 {
		t.Errorf("the first round drafted %d at confidence 0.3, before any stood; want at most 2, the prior's window (%v)", got[0], got)
	}
	if m := mean(got[1:]); m < 6 {
		t.Errorf("an always-right draft at confidence 0.3 drafts %.1f a round once its first stood, want ≥ 6 (%v)", m, got)
	}
	got = rounds(t, spec.NewWindow(8, 0.2, 0.1), humble, 200, func(i int) bool { return i%5 == 0 })
	if m := mean(got[100:]); m > 0.5 {
		t.Errorf("a draft unsure and right one time in five drafts %.2f a round after 100 rounds, want ≤ 0.5 (%v)", m, got)
	}

	proud := &confident{conf: 0.9}
	got = rounds(t, spec.NewWindow(8, 0.2, 0.1), proud, 200, func(i int) bool { return i%5 == 0 })
	if m := mean(got[:3]); m < 1.5 {
		t.Errorf("first rounds drafted %.1f a round at confidence 0.9, want ≥ 1.5 (%v)", m, got)
	}
	if m := mean(got[100:]); m > 0.5 {
		t.Errorf("a draft right one time in five drafts %.2f a round after 100 rounds, want ≤ 0.5 (%v)", m, got)
	}

	fixed := &confident{conf: 0.01}
	got = rounds(t, spec.Fixed(4), fixed, 10, func(int) bool { return false })
	for i, n := range got {
		if n != 4 {
			t.Fatalf("round %d of a window fixed at 4 drafted %d", i, n)
		}
	}
}

// deaf is a Judged proposer that never asks the judge (a draft model with
// a threshold of its own): it drafts all it is asked for.
type deaf struct{}

func (deaf) Propose(_ context.Context, _ []uint32, _, k int) ([]spec.Draft, error) {
	return make([]spec.Draft, k), nil
}

func (d deaf) ProposeJudged(ctx context.Context, seq []uint32, gen, k int, _ func(float64) (bool, bool)) ([]spec.Draft, error) {
	return d.Propose(ctx, seq, gen, k)
}

// TestJudgedWindowOffersWhole: once its proposer has let it judge the
// drafts one by one, a window offers its whole size each round and the
// judge ends the round (so a stretch of sure drafts is not cut at the
// size the average acceptance makes best); a proposer that does not ask
// the judge keeps being offered that best size.
func TestJudgedWindowOffersWhole(t *testing.T) {
	// At the prior 0.7, c + v = 0.55 makes one draft a round best.
	for _, tc := range []struct {
		name string
		p    spec.Proposer
		want int
	}{
		{"judged", &confident{conf: 0.95}, 8},
		{"deaf", deaf{}, 1},
	} {
		w := spec.NewWindow(8, 0.3, 0.25)
		if k := w.Size(); k != 1 {
			t.Fatalf("%s: the first round is offered %d drafts, want the best size 1", tc.name, k)
		}
		if _, err := w.Draft(context.Background(), tc.p, []uint32{1, 2}, 1, 1); err != nil {
			t.Fatal(err)
		}
		if k := w.Size(); k != tc.want {
			t.Errorf("%s: the next round is offered %d drafts, want %d", tc.name, k, tc.want)
		}
	}
	// The judge still ends the rounds: an always-right draft at 0.95
	// drafts long windows, one right one time in three short ones.
	sure := rounds(t, spec.NewWindow(8, 0.05, 0.05), &confident{conf: 0.95}, 40, func(int) bool { return true })
	if m := mean(sure[20:]); m < 6 {
		t.Errorf("an always-right draft drafts %.1f a round, want ≥ 6 (%v)", m, sure)
	}
	shaky := rounds(t, spec.NewWindow(8, 0.05, 0.05), &confident{conf: 0.95}, 200, func(i int) bool { return i%3 == 0 })
	if m := mean(shaky[100:]); m > 3 {
		t.Errorf("a draft right one time in three drafts %.1f a round, want ≤ 3 (%v)", m, shaky)
	}
}
