package spec_test

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/gguf/spec"
)

// TestLimitedDraftNames: a sampled request's draft name carries its
// bounds on the rounds, and they read back as written, with or without
// prices; the id and prices still split; names with limits written
// otherwise, out of range or in contradiction are refused.
func TestLimitedDraftNames(t *testing.T) {
	priced := spec.PricedDraft("lookup", spec.DraftPrices{Row: 0.25})
	for _, tc := range []struct {
		draft string
		l     spec.Limits
		want  string
	}{
		{priced, spec.Limits{}, priced},
		{priced, spec.Limits{Min: 1}, priced}, // a fewest of one bounds nothing
		{priced, spec.Limits{Max: 4}, priced + "/n4"},
		{priced, spec.Limits{Max: 4, Min: 2}, priced + "/n4m2"},
		{"0123abcd", spec.Limits{PMin: 0.8}, "0123abcd/p0.8"},
		{"0123abcd@c0.02v0.06", spec.Limits{Max: 16, Min: 5, PMin: 0.9}, "0123abcd@c0.02v0.06/n16m5p0.9"},
		{"lookup", spec.Limits{Min: 3}, "lookup/m3"},
	} {
		name := spec.LimitedDraft(tc.draft, tc.l)
		if name != tc.want {
			t.Errorf("LimitedDraft(%q, %+v) = %q, want %q", tc.draft, tc.l, name, tc.want)
		}
		l, err := spec.DraftLimits(name)
		want := tc.l
		if want.Min == 1 {
			want.Min = 0
		}
		if err != nil || l != want {
			t.Errorf("DraftLimits(%q) = %+v, %v; want %+v", name, l, err, want)
		}
		id, p, _, err := spec.SplitDraft(name)
		id0, p0, _, _ := spec.SplitDraft(tc.draft)
		if err != nil || id != id0 || p != p0 {
			t.Errorf("SplitDraft(%q) = %q %+v, %v; want %q %+v", name, id, p, err, id0, p0)
		}
	}
	for _, name := range []string{
		"lookup/", "lookup/n0", "lookup/m1", "lookup/p0", "lookup/n4n4", "lookup/m2n4", "lookup/x1",
		"lookup/n04", "lookup/p0.80", "lookup/n2m3", "lookup/n300", "lookup/p1.5", "lookup/n-1", "lookup/pNaN",
		"lookup@c0.00v0.25/n", "lookup/n4/m2",
	} {
		if _, err := spec.DraftLimits(name); err == nil {
			t.Errorf("DraftLimits(%q) accepted", name)
		}
		if _, _, _, err := spec.SplitDraft(name); err == nil {
			t.Errorf("SplitDraft(%q) accepted", name)
		}
	}
	for _, l := range []spec.Limits{{Max: -1}, {Min: spec.MaxLimit + 1}, {Max: 2, Min: 3}, {PMin: 1.01}, {PMin: -0.1}} {
		if err := l.Check(); err == nil {
			t.Errorf("%+v passed its check", l)
		}
	}
}

// countingDraft drafts k tokens (every one standing, as the simulation
// says) and records the sizes it was asked for.
type countingDraft struct{ asked []int }

func (c *countingDraft) Propose(_ context.Context, _ []uint32, _, k int) ([]spec.Draft, error) {
	c.asked = append(c.asked, k)
	return make([]spec.Draft, k), nil
}

// shortDraft drafts one token fewer than asked, at least one.
type shortDraft struct{}

func (shortDraft) Propose(_ context.Context, _ []uint32, _, k int) ([]spec.Draft, error) {
	return make([]spec.Draft, max(1, k-1)), nil
}

// TestWindowBound: a bounded window asks for at most Max drafts however
// well they stand (a fixed window too), and a round that drafts fewer
// than Min verifies none.
func TestWindowBound(t *testing.T) {
	ctx := context.Background()
	for _, w := range []*spec.Window{spec.NewWindow(8, 0.01, 0.01), spec.Fixed(8)} {
		w.Bound(spec.Limits{Max: 3})
		p := &countingDraft{}
		for range 30 {
			drafts, err := w.Draft(ctx, p, []uint32{1}, 1, w.Size())
			if err != nil {
				t.Fatal(err)
			}
			w.Keep(drafts, len(drafts), 0)
		}
		for _, k := range p.asked {
			if k > 3 {
				t.Fatalf("a window bounded at 3 drafts asked for %d (%v)", k, p.asked)
			}
		}
		if len(p.asked) == 0 || p.asked[len(p.asked)-1] != 3 {
			t.Errorf("every draft standing, the bounded window asked for %v, want 3 at last", p.asked)
		}
	}
	w := spec.Fixed(4).Bound(spec.Limits{Min: 4})
	if drafts, err := w.Draft(ctx, shortDraft{}, []uint32{1}, 1, w.Size()); err != nil || len(drafts) != 0 {
		t.Errorf("3 drafts where at least 4 were asked for: %d verified (%v)", len(drafts), err)
	}
	w = spec.Fixed(4).Bound(spec.Limits{Min: 3})
	if drafts, err := w.Draft(ctx, shortDraft{}, []uint32{1}, 1, w.Size()); err != nil || len(drafts) != 3 {
		t.Errorf("3 drafts where at least 3 were asked for: %d verified (%v)", len(drafts), err)
	}
}
