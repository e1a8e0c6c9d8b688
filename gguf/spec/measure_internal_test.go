package spec

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestDrafterPrices: a greedy serve's window is priced by what
// Drafter.Measure found on the machine once it has run (the configured
// cost, where one is set, stands); a sampled serve's by the files' sizes
// and DefaultRowCost whatever was measured, so that it replays anywhere.
// Prompt lookup drafts for nothing (c = 0) and is priced by its rows.
// The timings themselves are the machine's: only their form is checked.
func TestDrafterPrices(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	src := filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	q4 := filepath.Join(t.TempDir(), "fortunes-q4_0.gguf")
	if err := modeltest.Requantize(src, q4, quant.Q4_0); err != nil {
		t.Fatal(err)
	}
	tf, target := modeltest.Load(t, src, be)
	vocab := target.Config().VocabSize
	for _, tc := range []struct {
		name string
		cfg  DrafterConfig
	}{
		{"draft", DrafterConfig{Path: q4}},
		{"draft of a set cost", DrafterConfig{Path: q4, Cost: 0.5}},
		{"lookup", DrafterConfig{Path: DraftLookup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := LoadDrafter(tc.cfg, tf, vocab, 256, be)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			sized := d.Cost()
			for _, greedy := range []bool{true, false} {
				if w := d.Window(greedy); w.cost != sized || w.row != DefaultRowCost {
					t.Errorf("before measuring, greedy %v: priced c %v, v %v; want the sizes' %v and %v", greedy, w.cost, w.row, sized, DefaultRowCost)
				}
			}
			files := Prices{Cost: sized, Row: DefaultRowCost, SampledCost: sized, SampledRow: DefaultRowCost}
			if got, measured := d.Prices(); measured || !reflect.DeepEqual(got, files) {
				t.Errorf("before measuring, Prices() = %+v, %v; want the files' %+v, false", got, measured, files)
			}
			if got, at := d.Pricing(); !at.IsZero() || !reflect.DeepEqual(got, files) {
				t.Errorf("before measuring, Pricing() = %+v, %v; want the files' prices, no time", got, at)
			}
			p, err := d.Measure(context.Background(), target)
			if err != nil {
				t.Fatal(err)
			}
			if got, measured := d.Prices(); !measured || !reflect.DeepEqual(got, p) {
				t.Errorf("after measuring, Prices() = %+v, %v; want the measured %+v, true", got, measured, p)
			}
			if got, at := d.Pricing(); at.IsZero() || !reflect.DeepEqual(got, p) {
				t.Errorf("after measuring, Pricing() = %+v, %v; want the measured prices and when", got, at)
			}
			t.Logf("measured c %.3f, v %.3f (sizes: c %.3f)", p.Cost, p.Row, sized)
			switch {
			case tc.cfg.Path == DraftLookup && p.Cost != 0:
				t.Errorf("lookup measured at c %v, want 0", p.Cost)
			case tc.cfg.Cost > 0 && p.Cost != tc.cfg.Cost:
				t.Errorf("a draft set at c %v measured at %v, want the setting", tc.cfg.Cost, p.Cost)
			case tc.cfg.Path != DraftLookup && p.Cost <= 0:
				t.Errorf("a draft model measured at c %v, want > 0", p.Cost)
			case p.Row < 0:
				t.Errorf("a row measured at v %v, want ≥ 0", p.Row)
			case (tc.cfg.Path == DraftLookup) != (p.CatchUp == 0) || p.CatchUp < p.Cost:
				t.Errorf("a two-token catch-up measured at %v (c %v): want one at least c for a draft model, none for lookup", p.CatchUp, p.Cost)
			}
			if w := d.Window(true); w.cost != p.Cost || w.row != max(p.Row, minRowCost) {
				t.Errorf("a greedy window priced c %v, v %v; want the measured %v, %v", w.cost, w.row, p.Cost, max(p.Row, minRowCost))
			}
			if w := d.Window(false); w.cost != sized || w.row != DefaultRowCost {
				t.Errorf("a sampled window priced c %v, v %v; want the sizes' %v and %v", w.cost, w.row, sized, DefaultRowCost)
			}
			// The sampled prices are measured too, and decide only
			// whether sampled requests name the draft.
			if p.SampledRow < minRowCost || (tc.cfg.Path == DraftLookup) != (p.SampledCost == 0) {
				t.Errorf("sampled prices c %v, v %v: want v ≥ %v, and c > 0 for a draft model only", p.SampledCost, p.SampledRow, minRowCost)
			}
			if p.SampledFirst < 0 || tc.cfg.Path == DraftLookup && p.SampledFirst != 0 {
				t.Errorf("a sampled first step measured %v more: want ≥ 0, and 0 for lookup", p.SampledFirst)
			}
			if (tc.cfg.Path == DraftLookup) != (p.SampledCatchUp == 0) || p.SampledCatchUp < p.SampledCost {
				t.Errorf("a sampled two-token catch-up measured at %v (sampled c %v): want one at least c for a draft model, none for lookup", p.SampledCatchUp, p.SampledCost)
			}
			want := ""
			if p.SampledPays(d.maxK, d.prior()) {
				want = PricedDraft(d.ID(), p.Sampled())
			}
			if got := d.SampledID(); got != want {
				t.Errorf("SampledID %q, want %q", got, want)
			}
			// A sampled serve's window is priced as its draft name says,
			// a round's first draft and its catch-up included; a name
			// without f or u prices none, as every name did before they
			// were measured.
			w, err := d.SampledWindow(PricedDraft(d.ID(), DraftPrices{Cost: 0.31, Row: 0.47, First: 0.12, CatchUp: 0.09}))
			if err != nil || w.cost != 0.31 || w.row != 0.47 || w.first != 0.12 || w.catchUp != 0.09 {
				t.Errorf("the window of a request naming c 0.31, v 0.47, f 0.12, u 0.09: c %v, v %v, first %v, catch-up %v (%v)", w.cost, w.row, w.first, w.catchUp, err)
			}
			if w, err := d.SampledWindow(d.ID() + "@c0.31v0.47"); err != nil || w.cost != 0.31 || w.row != 0.47 || w.first != 0 || w.catchUp != 0 {
				t.Errorf("the window of a request naming c 0.31, v 0.47 and no f or u: c %v, v %v, first %v, catch-up %v (%v)", w.cost, w.row, w.first, w.catchUp, err)
			}
			if w, err := d.SampledWindow(d.ID()); err != nil || w.cost != sized || w.row != DefaultRowCost {
				t.Errorf("the window of a request naming no prices: c %v, v %v (%v); want the sizes'", w.cost, w.row, err)
			}
			if _, err := d.SampledWindow("another@c0.10v0.20"); err == nil {
				t.Error("a request naming another draft got a window")
			}
		})
	}
}

// TestSplitDraft: a priced draft name splits into the id and the prices
// PricedDraft wrote (two decimals, clamped to their bounds); a name
// without prices is the id alone; malformed or out-of-range prices are
// refused, saying what the form is.
func TestSplitDraft(t *testing.T) {
	for _, c := range []struct {
		id     string
		priced DraftPrices
		name   string
		want   DraftPrices
	}{
		{"lookup", DraftPrices{0, 0.555, 0, 0}, "lookup@c0.00v0.56", DraftPrices{0, 0.56, 0, 0}},
		{"ab12", DraftPrices{0.639, 0.486, 0, 0}, "ab12@c0.64v0.49", DraftPrices{0.64, 0.49, 0, 0}},
		{"ab12", DraftPrices{0.021, 0.06, 0.0149, 0}, "ab12@c0.02v0.06f0.01", DraftPrices{0.02, 0.06, 0.01, 0}},
		{"ab12", DraftPrices{0.021, 0.06, 0.0049, 0.0049}, "ab12@c0.02v0.06", DraftPrices{0.02, 0.06, 0, 0}}, // round to none
		{"ab12", DraftPrices{0.021, 0.06, 0, 0.013}, "ab12@c0.02v0.06u0.01", DraftPrices{0.02, 0.06, 0, 0.01}},
		{"ab12", DraftPrices{0.021, 0.06, 0.0149, 0.336}, "ab12@c0.02v0.06f0.01u0.34", DraftPrices{0.02, 0.06, 0.01, 0.34}},
		{"ab12", DraftPrices{-1, 0, -1, -1}, "ab12@c0.00v0.02", DraftPrices{0, minRowCost, 0, 0}},
		{"ab12", DraftPrices{1e9, 1e9, 1e9, 1e9}, "ab12@c100.00v100.00f100.00u100.00", DraftPrices{maxPrice, maxPrice, maxPrice, maxPrice}},
	} {
		name := PricedDraft(c.id, c.priced)
		id, p, priced, err := SplitDraft(name)
		if name != c.name || err != nil || !priced || id != c.id || p != c.want {
			t.Errorf("SplitDraft(%q) = %q, %+v, %v, %v; want %q split as %q, %+v", name, id, p, priced, err, c.name, c.id, c.want)
		}
	}
	if id, _, priced, err := SplitDraft("lookup"); id != "lookup" || priced || err != nil {
		t.Errorf("a name without prices: %q, %v, %v", id, priced, err)
	}
	for _, bad := range []string{"x@", "x@c0.1", "x@v0.1c0.1", "x@c-1v0.5", "x@c0.1v0", "x@cNaNv0.5", "x@c0.1v1e9", "x@c0.1v0.5@c1v1",
		"x@c0.1v0.5f", "x@c0.1v0.5f-0.1", "x@c0.1v0.5f1e9", "x@c0.1v0.5fNaN", "x@c0.1vinf", "x@c0.1f0.1v0.5", "x@c0.1v0.5f0.1f0.1",
		"x@c0.1v0.5u", "x@c0.1v0.5u-0.1", "x@c0.1v0.5u1e9", "x@c0.1v0.5uNaN", "x@c0.1v0.5u0.1f0.1", "x@c0.1u0.1v0.5", "x@c0.1v0.5u0.1u0.1"} {
		if _, _, _, err := SplitDraft(bad); err == nil || !strings.Contains(err.Error(), "c<cost>v<row>") {
			t.Errorf("SplitDraft(%q): %v, want a refusal naming the form", bad, err)
		}
	}
}

// FuzzSplitDraft: any name splits or is refused without panicking, the
// prices of one that splits write back to a name that splits alike, and
// limits that read write back to the same name.
func FuzzSplitDraft(f *testing.F) {
	f.Add(PricedDraft("lookup", DraftPrices{Row: 0.56}))
	f.Add(PricedDraft("0123456789abcdef", DraftPrices{Cost: 0.64, Row: 0.49}))
	f.Add(PricedDraft("0123456789abcdef", DraftPrices{Cost: 0.02, Row: 0.06, First: 0.01}))
	f.Add(PricedDraft("0123456789abcdef", DraftPrices{Cost: 0.02, Row: 0.06, CatchUp: 0.03}))
	f.Add(PricedDraft("0123456789abcdef", DraftPrices{Cost: 0.02, Row: 0.06, First: 0.01, CatchUp: 0.03}))
	f.Add("lookup")
	f.Add("x@c1e1v2")
	f.Add("x@c1e1v2f3e-1")
	f.Add("x@c1e1v2u3e-1")
	f.Add(LimitedDraft(PricedDraft("lookup", DraftPrices{Row: 0.25}), Limits{Max: 4, Min: 2, PMin: 0.75}))
	f.Add(LimitedDraft("0123456789abcdef", Limits{PMin: 0.5}))
	f.Add(LimitedDraft(PricedDraft(PredictionID([]uint32{1, 2, 3}), PredictionPrices(Prices{}, false)), Limits{Max: 4}))
	f.Fuzz(func(t *testing.T, name string) {
		// Limits that read write back to the same name.
		if l, err := DraftLimits(name); err == nil && !l.IsZero() {
			base, _, _ := strings.Cut(name, "/")
			if back := LimitedDraft(base, l); back != name {
				t.Fatalf("%q's limits %+v write back as %q", name, l, back)
			}
		}
		id, p, priced, err := SplitDraft(name)
		if err != nil || !priced {
			return
		}
		// PricedDraft writes two decimals: half a hundredth off at most,
		// and a rounding error more (0.705 is 0.70499… as a float64); a
		// first or catch-up under half a hundredth is written as none.
		const tol = 0.005 + 1e-9
		id2, p2, _, err := SplitDraft(PricedDraft(id, p))
		if err != nil || id2 != id || math.Abs(p2.Cost-p.Cost) > tol || math.Abs(p2.Row-p.Row) > tol || math.Abs(p2.First-p.First) > tol || math.Abs(p2.CatchUp-p.CatchUp) > tol {
			t.Fatalf("%q split as %q %+v, written back as %q %+v (%v)", name, id, p, id2, p2, err)
		}
	})
}

// TestSampledPays: sampled speculation pays where some window gains 5% at
// the prior acceptance: not at the built-in F16's sampled prices with its
// trained draft (c 0.48, v 0.40) nor with its Q8_0 copy at the copy prior
// (c 1.1, v 0.34), but with prompt lookup (c 0) and with a draft at 1% of
// a target whose rows cost 0.06; unmeasured prices always pay.
func TestSampledPays(t *testing.T) {
	for _, c := range []struct {
		p     Prices
		prior float64
		want  bool
	}{
		{Prices{SampledCost: 0.48, SampledRow: 0.40}, DefaultPrior, false},
		{Prices{SampledCost: 1.1, SampledRow: 0.34}, CopyPrior, false},
		{Prices{SampledCost: 0, SampledRow: 0.41}, DefaultPrior, true},
		{Prices{SampledCost: 0.01, SampledRow: 0.06}, DefaultPrior, true},
		{Prices{SampledCost: 0.35, SampledRow: 0.35}, DefaultPrior, false},
		{Prices{SampledCost: 0.35, SampledRow: 0.35}, 0.95, true},
		// A round's dearer first draft turns a paying window off, or not.
		{Prices{SampledCost: 0.35, SampledRow: 0.35, SampledFirst: 2}, 0.95, false},
		{Prices{SampledCost: 0.01, SampledRow: 0.06, SampledFirst: 0.05}, DefaultPrior, true},
		// So does a dear two-token catch-up where drafts mostly stand.
		{Prices{SampledCost: 0.35, SampledRow: 0.35, SampledCatchUp: 0.35 + 3}, 0.95, false},
		{Prices{SampledCost: 0.01, SampledRow: 0.06, SampledCatchUp: 0.03}, DefaultPrior, true},
		{Prices{}, DefaultPrior, true},
	} {
		if got := c.p.SampledPays(DefaultMaxWindow, c.prior); got != c.want {
			t.Errorf("SampledPays(c %v, v %v, first %v, catch-up %v, prior %v) = %v, want %v", c.p.SampledCost, c.p.SampledRow, c.p.SampledFirst, c.p.SampledCatchUp, c.prior, got, c.want)
		}
	}
}

// TestMeasureShortContext: a model whose context holds no window after a
// prompt is refused with an error that says so (the engine then keeps the
// files' prices); one that holds a window after a one-token prompt is
// measured; and so is a hybrid model, whose recurrent state each timed
// step rewinds rather than cuts.
func TestMeasureShortContext(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	src, err := gguf.Open(filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	load := func(arch string, context int) *model.Model {
		spec := modeltest.Fixture(arch, "Q8_0")
		spec.Context = context
		f := modeltest.Parsed(t, spec, src.Metadata)
		m, err := model.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := Measure(context.Background(), load("llama", measureWindow), nil, 1, 0); err == nil || !strings.Contains(err.Error(), "holds no window") {
		t.Errorf("a context of %d positions: err %v, want one that says it holds no window", measureWindow, err)
	}
	if _, err := Measure(context.Background(), load("llama", 256), load("llama", measureWindow), 1, 0); err == nil {
		t.Error("a draft whose context holds no window was measured")
	}
	if p, err := Measure(context.Background(), load("llama", measureWindow+1), nil, 1, 0); err != nil || p.Row < 0 {
		t.Errorf("a context of %d positions: %+v, %v; want a measurement", measureWindow+1, p, err)
	}
	hybrid := load("qwen35", 256)
	if p, err := Measure(context.Background(), hybrid, hybrid, 2, 0); err != nil || p.Cost <= 0 {
		t.Errorf("qwen35: %+v, %v; want a measurement", p, err)
	}
}

// TestMeasureSteps: a target timed by a step function (a split model's
// pipeline) is priced by the ratios of its steps' times: greedy steps of
// 1 ms and 0.1 ms a row more make v 0.1 and steps 1 + 0.1·k; sampled
// steps of 2 ms and 1 ms a row more make a sampled v of 0.5. The steps
// asked never take more rows than the target's steps hold, nor more than
// a full window; a target that holds no measured window is refused, and
// a step's error ends the measurement. One-token steps are timed after
// one of their own kind, as plain decoding meets them.
func TestMeasureSteps(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, most := range []int{measureWindow, measureRows, 20} {
		asked := 0
		step := func(_ context.Context, rows int, sampled bool) (time.Duration, error) {
			asked = max(asked, rows)
			if sampled {
				return ms(2 + float64(rows-1)), nil
			}
			return ms(1 + 0.1*float64(rows-1)), nil
		}
		p, err := MeasureSteps(context.Background(), step, most, nil, 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rows := min(most, measureRows); asked != rows || len(p.Steps) != rows {
			t.Errorf("steps of up to %d rows: asked %d rows, priced %d steps; want %d", most, asked, len(p.Steps), rows)
		}
		for k, s := range p.Steps {
			if math.Abs(s-(1+0.1*float64(k))) > 1e-9 {
				t.Errorf("steps of up to %d rows: step %d priced %v, want %v", most, k, s, 1+0.1*float64(k))
			}
		}
		if math.Abs(p.Row-0.1) > 1e-9 || math.Abs(p.SampledRow-0.5) > 1e-9 || p.Cost != 0 || p.SampledCost != 0 {
			t.Errorf("steps of up to %d rows: %+v; want v 0.1, sampled v 0.5 and no draft's cost", most, p)
		}
	}
	// A one-token step in another step's wake (a window's, or one of the
	// other kind's) is 40% slower, as caches holding the other step's
	// data make it: the prices are still plain decoding's, whose steps
	// follow one-token steps of their own kind.
	prevRows, prevSampled := 0, false
	wake := func(_ context.Context, rows int, sampled bool) (time.Duration, error) {
		d := ms(1 + 0.1*float64(rows-1))
		if sampled {
			d = ms(2 + float64(rows-1))
		}
		if rows == 1 && (prevRows != 1 || prevSampled != sampled) {
			d = d * 14 / 10
		}
		prevRows, prevSampled = rows, sampled
		return d, nil
	}
	p, err := MeasureSteps(context.Background(), wake, measureRows, nil, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.Steps[measureRows-1]-(1+0.1*float64(measureRows-1))) > 1e-9 || math.Abs(p.Row-0.1) > 1e-9 || math.Abs(p.SampledRow-0.5) > 1e-9 {
		t.Errorf("one-token steps slower in another step's wake: steps %.3f, v %v, sampled v %v; want 1 + 0.1·k, 0.1 and 0.5", p.Steps, p.Row, p.SampledRow)
	}
	// After a pause (another kind of step, or a sampled verify's judging
	// on one core), the first one-token step costs 2× and the second
	// still 1.3×; and one one-token step in seven is stretched 3× by the
	// machine's load: the prices are still the steps' in a run of their
	// kind, the median of those timed.
	run, ones := 0, 0
	paused := func(_ context.Context, rows int, sampled bool) (time.Duration, error) {
		d := ms(1 + 0.1*float64(rows-1))
		if sampled {
			d = ms(2 + float64(rows-1))
		}
		if rows == 1 && prevRows == 1 && prevSampled == sampled {
			run++
		} else {
			run = 0
		}
		if rows == 1 {
			d = d * [...]time.Duration{20, 13, 10, 10, 10, 10, 10}[min(run, 6)] / 10
			if ones++; ones%7 == 0 {
				d *= 3
			}
		}
		prevRows, prevSampled = rows, sampled
		return d, nil
	}
	prevRows, prevSampled = 0, false
	p, err = MeasureSteps(context.Background(), paused, measureRows, nil, 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.Steps[measureRows-1]-(1+0.1*float64(measureRows-1))) > 1e-9 || math.Abs(p.Row-0.1) > 1e-9 || math.Abs(p.SampledRow-0.5) > 1e-9 {
		t.Errorf("one-token steps slower after a pause, some stretched: steps %.3f, v %v, sampled v %v; want 1 + 0.1·k, 0.1 and 0.5", p.Steps, p.Row, p.SampledRow)
	}
	// A target whose steps take longStep or more is timed at the second
	// one-token step of each kind a round, as a pause adds little to
	// it: two of each kind a round after the chooseSteps; a quicker one
	// at the median of oneTimed after oneWarm.
	for _, one := range []time.Duration{longStep, longStep - time.Microsecond} {
		ones := 0
		counted := func(_ context.Context, rows int, sampled bool) (time.Duration, error) {
			if rows == 1 {
				ones++
			}
			return one + time.Duration(rows-1)*one/10, nil
		}
		if _, err := MeasureSteps(context.Background(), counted, measureRows, nil, 3, 0); err != nil {
			t.Fatal(err)
		}
		want := chooseSteps + 3*2*(oneWarm+oneTimed)
		if one >= longStep {
			want = chooseSteps + 3*2*2
		}
		if ones != want {
			t.Errorf("one-token steps of %v: %d taken in 3 rounds, want %d", one, ones, want)
		}
	}
	// A backend that chooses its kernels on its first one-token steps
	// (the CPU's one-row timing) runs those twice as slowly: the prices
	// are the steps' after it has chosen.
	ones = 0
	choosing := func(_ context.Context, rows int, sampled bool) (time.Duration, error) {
		d := ms(1 + 0.1*float64(rows-1))
		if sampled {
			d = ms(2 + float64(rows-1))
		}
		if rows == 1 {
			if ones++; ones <= chooseSteps {
				d *= 2
			}
		}
		return d, nil
	}
	p, err = MeasureSteps(context.Background(), choosing, measureRows, nil, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.Steps[measureRows-1]-(1+0.1*float64(measureRows-1))) > 1e-9 || math.Abs(p.Row-0.1) > 1e-9 || math.Abs(p.SampledRow-0.5) > 1e-9 {
		t.Errorf("one-token steps slower while the kernels are chosen: steps %.3f, v %v, sampled v %v; want 1 + 0.1·k, 0.1 and 0.5", p.Steps, p.Row, p.SampledRow)
	}
	// A draft model whose first step after the target's costs 2 ms and
	// whose later ones cost 0.6 (the target's one-token step 1 ms): c is
	// the later steps' 0.6, and the first's extra 1.4 a round. Against a
	// sampled one-token step of 2 ms, a sampled serve's c is 0.3 and its
	// first step's extra 0.7 (priced at the first step alone, c was 1).
	// Its catch-up over two tokens costs 1.5 ms: 1.5 a greedy serve's
	// target token, 0.75 a sampled one's, 0.45 over a sampled draft.
	afterTarget := false
	target := func(_ context.Context, rows int, sampled bool) (time.Duration, error) {
		afterTarget = true
		if sampled {
			return ms(2 + float64(rows-1)), nil
		}
		return ms(1 + 0.1*float64(rows-1)), nil
	}
	draft := func(rows int, _ func(*model.Batch, int)) (time.Duration, error) {
		d := ms(0.6 * float64(rows))
		if afterTarget {
			d += ms(1.4)
		}
		afterTarget = false
		return d, nil
	}
	catchUp := func(rows int, _ func(*model.Batch, int)) (time.Duration, error) {
		return ms(0.6 + 0.9*float64(rows-1)), nil
	}
	p, err = measureSteps(context.Background(), target, measureRows, draft, catchUp, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.Cost-0.6) > 1e-9 || math.Abs(p.First-1.4) > 1e-9 || math.Abs(p.CatchUp-1.5) > 1e-9 {
		t.Errorf("a draft whose first step after the target's is dearer: c %v, first %v, catch-up %v; want 0.6, 1.4 and 1.5", p.Cost, p.First, p.CatchUp)
	}
	if math.Abs(p.SampledCost-0.3) > 1e-9 || math.Abs(p.SampledFirst-0.7) > 1e-9 || math.Abs(p.SampledCatchUp-0.75) > 1e-9 {
		t.Errorf("a draft whose first step after the target's sampled one is dearer: sampled c %v, first %v, catch-up %v; want 0.3, 0.7 and 0.75", p.SampledCost, p.SampledFirst, p.SampledCatchUp)
	}
	if s := p.Sampled(); math.Abs(s.Cost-0.3) > 1e-9 || math.Abs(s.First-0.7) > 1e-9 || math.Abs(s.CatchUp-0.45) > 1e-9 || s.Row != p.SampledRow {
		t.Errorf("the draft name's prices %+v; want c 0.3, first 0.7, the catch-up's 0.45 over c, v %v", s, p.SampledRow)
	}
	never := func(context.Context, int, bool) (time.Duration, error) {
		t.Fatal("a target that holds no window was stepped")
		return 0, nil
	}
	if _, err := MeasureSteps(context.Background(), never, measureWindow-1, nil, 3, 0); err == nil || !strings.Contains(err.Error(), "holds no window") {
		t.Errorf("steps of %d rows: err %v, want one that says it holds no window", measureWindow-1, err)
	}
	lost := errors.New("a stage was lost")
	failing := func(context.Context, int, bool) (time.Duration, error) { return 0, lost }
	if _, err := MeasureSteps(context.Background(), failing, measureRows, nil, 3, 0); !errors.Is(err, lost) {
		t.Errorf("a failing step: err %v, want the step's", err)
	}
}
