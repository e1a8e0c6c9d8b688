package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestGreedy(t *testing.T) {
	s := New(Params{})
	for _, tc := range []struct {
		logits []float32
		want   uint32
	}{
		{[]float32{0, 3, 1}, 1},
		{[]float32{5, 5, 1}, 0}, // a tie goes to the lowest id, as llama.cpp's greedy
		{[]float32{-3, -1, -2}, 1},
		{[]float32{float32(math.Inf(-1)), 0}, 1},
	} {
		if got := s.Sample(tc.logits, nil); got != tc.want {
			t.Errorf("greedy(%v) = %d, want %d", tc.logits, got, tc.want)
		}
	}
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, 1.9, -1, -1.05}
	for _, tc := range []struct {
		name    string
		p       Params
		history []uint32
		want    uint32
	}{
		{"none", Params{}, []uint32{0}, 0},
		// 2/1.1 = 1.82 < 1.9.
		{"repeat divides a positive logit", Params{RepeatPenalty: 1.1}, []uint32{0}, 1},
		// 2 − 0.05·2 = 1.9 ties 1.9, and the lower id wins; 0.06·2 passes it.
		{"frequency counts", Params{FrequencyPenalty: 0.06}, []uint32{0, 0}, 1},
		{"frequency once", Params{FrequencyPenalty: 0.06}, []uint32{0}, 0},
		{"presence", Params{PresencePenalty: 0.2}, []uint32{0, 0, 0}, 1},
		{"window leaves old tokens out", Params{PresencePenalty: 0.2, PenaltyWindow: 1}, []uint32{0, 3}, 0},
		{"a negative penalty encourages", Params{PresencePenalty: -3.1}, []uint32{3}, 3},
		// The context (a prompt) counts before the history: token 0 in
		// it is penalised where the window reaches it.
		{"the context counts", Params{PresencePenalty: 0.2, PenaltyContext: []uint32{0}}, nil, 1},
		{"the window reaches into the context", Params{PresencePenalty: 0.2, PenaltyWindow: 2, PenaltyContext: []uint32{3, 0}}, []uint32{2}, 1},
		{"the window stops short of it", Params{PresencePenalty: 0.2, PenaltyWindow: 2, PenaltyContext: []uint32{3, 0}}, []uint32{2, 2}, 0},
		{"context and history counted together", Params{FrequencyPenalty: 0.06, PenaltyContext: []uint32{0}}, []uint32{0}, 1},
		{"no window: all the context", Params{PresencePenalty: 0.2, PenaltyContext: []uint32{0, 3, 3, 3}}, []uint32{2}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := New(tc.p).Sample(logits, tc.history); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
	// Repeat penalty multiplies a negative logit: token 2 (−1 → −1.5)
	// falls below token 3 (−1.05) once 0 and 1 are masked out.
	masked := []float32{float32(math.Inf(-1)), float32(math.Inf(-1)), -1, -1.05}
	if got := New(Params{RepeatPenalty: 1.5}).Sample(masked, []uint32{2}); got != 3 {
		t.Fatalf("repeat penalty on a negative logit: got %d, want 3", got)
	}
}

// TestArgMax: the parameters whose pick is the logits' argmax, whatever
// the history, are exactly the greedy ones with no penalty in effect.
func TestArgMax(t *testing.T) {
	logits := []float32{2, 1.9, -1, -1.05}
	history := []uint32{0, 0, 2}
	for _, tc := range []struct {
		p    Params
		want bool
	}{
		{Params{}, true},
		{Params{TopK: 1, TopP: 0.5, MinP: 0.1, Seed: 7}, true}, // filters a greedy pick ignores
		{Params{RepeatPenalty: 1}, true},                       // 1 is off
		{Params{PenaltyWindow: 4}, true},
		{Params{Temperature: 0.7}, false},
		{Params{RepeatPenalty: 1.5}, false},
		{Params{FrequencyPenalty: 0.1}, false},
		{Params{PresencePenalty: -0.1}, false},
	} {
		if got := tc.p.ArgMax(); got != tc.want {
			t.Errorf("%+v: ArgMax() = %v, want %v", tc.p, got, tc.want)
		}
		if tc.want {
			if got := New(tc.p).Sample(logits, history); got != 0 {
				t.Errorf("%+v: Sample = %d, not the argmax 0", tc.p, got)
			}
		}
	}
}

// softmax is the float64 reference distribution of logits/temperature.
func softmax(logits []float32, temp float64) []float64 {
	p := make([]float64, len(logits))
	top := float64(slices.Max(logits))
	var sum float64
	for i, l := range logits {
		p[i] = math.Exp((float64(l) - top) / temp)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// TestDistribution draws many tokens and compares the frequencies with the
// distribution the filters leave, within 5 standard errors.
func TestDistribution(t *testing.T) {
	logits := []float32{2, 1.5, 1, 0.5, 0, -1, -3}
	for _, tc := range []struct {
		name string
		p    Params
		keep int // candidates the filters leave (logits are sorted)
	}{
		{"temperature", Params{Temperature: 1}, 7},
		{"hot", Params{Temperature: 2}, 7},
		{"cold", Params{Temperature: 0.5}, 7},
		{"top-k", Params{Temperature: 1, TopK: 3}, 3},
		// Cumulative: .41 .66 .81 .90 → the first 4 reach 0.85.
		{"top-p", Params{Temperature: 1, TopP: 0.85}, 4},
		// p_i/p_0 = e^(l_i−2): 1, .61, .37, .22, .14, … → min-p 0.2 keeps 4.
		{"min-p", Params{Temperature: 1, MinP: 0.2}, 4},
		{"top-k and top-p", Params{Temperature: 1, TopK: 2, TopP: 0.99}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := softmax(logits[:tc.keep], tc.p.Temperature)
			tc.p.Seed = 42
			s := New(tc.p)
			const n = 40000
			counts := make([]int, len(logits))
			for range n {
				counts[s.Sample(logits, nil)]++
			}
			for i, c := range counts {
				var p float64
				if i < tc.keep {
					p = want[i]
				}
				got := float64(c) / n
				se := math.Sqrt(p*(1-p)/n) + 1e-9
				if math.Abs(got-p) > 5*se+1e-4 {
					t.Errorf("token %d: frequency %.4f, want %.4f (±%.4f)", i, got, p, 5*se)
				}
			}
		})
	}
}

func TestSeedDeterminism(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)) * 3)
	}
	draw := func(seed uint64) []uint32 {
		s := New(Params{Temperature: 0.8, TopP: 0.95, Seed: seed, FrequencyPenalty: 0.1})
		var out []uint32
		for range 50 {
			out = append(out, s.Sample(logits, out))
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 7 and 8 drew the same 50 tokens")
	}
	// Pinned: the stream must not change under a refactor, since replays
	// of sealed receipts depend on it.
	if want := []uint32{379, 888, 567, 800, 981, 303, 762, 341}; !slices.Equal(a[:len(want)], want) {
		t.Fatalf("seed 7 draws %v, pinned %v", a[:len(want)], want)
	}
	// Without a penalty the logits skip the penalties' lookup: the same
	// draws as through it (pinned before the shortcut).
	for _, c := range []struct {
		p    Params
		want []uint32
	}{
		{Params{Temperature: 0.8, Seed: 7}, []uint32{598, 655, 83, 623, 838, 234, 235, 203}},
		{Params{Temperature: 0.8, TopP: 0.95, Seed: 7}, []uint32{379, 178, 567, 90, 981, 385, 303, 14}},
	} {
		s := New(c.p)
		var got []uint32
		for range len(c.want) {
			got = append(got, s.Sample(logits, got))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v draws %v, pinned %v", c.p, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{
		{Temperature: math.NaN()}, {TopK: -1}, {TopP: 1.5}, {MinP: -0.1}, {RepeatPenalty: -1},
		{FrequencyPenalty: math.Inf(1)}, {PenaltyWindow: -2},
	} {
		if p.Validate() == nil {
			t.Errorf("%+v: no error", p)
		}
	}
	if err := (Params{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSample measures a sampled pick over a 32000-token vocabulary.
func BenchmarkSample(b *testing.B) {
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37) * 5)
	}
	for _, p := range []Params{{}, {Temperature: 0.8}, {Temperature: 0.8, TopK: 40}, {Temperature: 0.8, TopP: 0.9, MinP: 0.05}} {
		b.Run(fmtParams(p), func(b *testing.B) {
			s := New(p)
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(logits, nil)
			}
		})
	}
}

func fmtParams(p Params) string {
	switch {
	case p.Greedy():
		return "greedy"
	case p.TopK > 0:
		return "top-k"
	case p.TopP > 0:
		return "top-p+min-p"
	}
	return "temperature"
}

// TestDistIsWhatSampleDraws: Dist is the distribution Sample draws from:
// drawing from it with Draw, on a stream seeded alike, picks Sample's
// token every time, under every filter and penalty; its probabilities
// sum to 1; greedy parameters give their pick alone, and Dist draws
// nothing from the stream.
func TestDistIsWhatSampleDraws(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	history := []uint32{3, 3, 7, 11, 40}
	for _, p := range []Params{
		{Temperature: 0.8, Seed: 1},
		{Temperature: 1.3, TopK: 10, Seed: 2},
		{Temperature: 0.7, TopP: 0.9, Seed: 3},
		{Temperature: 1, MinP: 0.05, RepeatPenalty: 1.3, Seed: 4},
		{Temperature: 1, TopK: 20, TopP: 0.8, MinP: 0.02, FrequencyPenalty: 0.5, PresencePenalty: 0.3, Seed: 5},
	} {
		checkDistIsDrawn(t, p, logits, history, nil, 200)
		// Restricted: every third token, and not the likeliest.
		allowed := make([]uint64, 1)
		for id := 0; id < len(logits); id += 3 {
			allowed[0] |= 1 << id
		}
		checkDistIsDrawn(t, p, logits, history, allowed, 200)
		for _, x := range New(p).DistAllowed(nil, logits, history, allowed) {
			if x.ID%3 != 0 {
				t.Fatalf("%+v: DistAllowed gives %d, which the mask does not allow, %v", p, x.ID, x.P)
			}
		}
	}
	g := New(Params{RepeatPenalty: 2, Seed: 9})
	d := g.Dist(nil, logits, history)
	if len(d) != 1 || d[0].P != 1 || d[0].ID != g.Sample(logits, history) {
		t.Errorf("greedy Dist %v, Sample %d", d, g.Sample(logits, history))
	}
	odd := []uint64{0xAAAAAAAAAAAAAAAA}
	if d := g.DistAllowed(nil, logits, history, odd); len(d) != 1 || d[0].P != 1 || d[0].ID != g.SampleAllowed(logits, history, odd) || d[0].ID%2 != 1 {
		t.Errorf("greedy DistAllowed %v, SampleAllowed %d", d, g.SampleAllowed(logits, history, odd))
	}
	// Dist drew nothing: the stream is where a fresh one starts.
	if g.Float64() != New(Params{Seed: 9}).Float64() {
		t.Error("Dist or greedy Sample drew from the stream")
	}
}

// checkDistIsDrawn checks n draws under p, restricted to allowed (nil:
// every token): DistAllowed's probabilities are positive and sum to 1,
// and drawing from it with Draw picks SampleAllowed's token, on streams
// seeded alike.
func checkDistIsDrawn(t *testing.T, p Params, logits []float32, history []uint32, allowed []uint64, n int) {
	t.Helper()
	a, b := New(p), New(p)
	var d []Prob
	for i := range n {
		d = b.DistAllowed(d[:0], logits, history, allowed)
		var sum float64
		for _, x := range d {
			sum += x.P
			if !(x.P > 0) {
				t.Fatalf("%+v: Dist holds %v", p, x)
			}
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("%+v: Dist sums to %v", p, sum)
		}
		if got, want := b.Draw(d), a.SampleAllowed(logits, history, allowed); got != want {
			t.Fatalf("%+v, draw %d: Draw(Dist) %d, Sample %d", p, i, got, want)
		}
	}
}

func TestSampleAllowed(t *testing.T) {
	logits := []float32{5, 1, 4, 3, 2, 0.5, 6, 1.5}
	allowed := []uint64{1<<1 | 1<<3 | 1<<4} // tokens 1, 3, 4
	if got := New(Params{}).SampleAllowed(logits, nil, allowed); got != 3 {
		t.Fatalf("greedy among 1, 3, 4 = %d, want 3", got)
	}
	counts := map[uint32]int{}
	s := New(Params{Temperature: 1, TopK: 2, Seed: 7})
	for range 2000 {
		counts[s.SampleAllowed(logits, nil, allowed)]++
	}
	// top-k 2 among the allowed keeps 3 and 4: p(3) = e/(e+1).
	if len(counts) != 2 || counts[3]+counts[4] != 2000 {
		t.Fatalf("picks %v, want only 3 and 4", counts)
	}
	if p := float64(counts[3]) / 2000; math.Abs(p-0.731) > 0.04 {
		t.Fatalf("p(3) = %.3f, want 0.731 ± 0.04", p)
	}
	// Allowing every token is Sample, draw for draw.
	all := []uint64{0xff}
	a, b := New(Params{Temperature: 0.8, TopP: 0.9, Seed: 3}), New(Params{Temperature: 0.8, TopP: 0.9, Seed: 3})
	for range 100 {
		if x, y := a.Sample(logits, nil), b.SampleAllowed(logits, nil, all); x != y {
			t.Fatalf("Sample %d, SampleAllowed with all %d", x, y)
		}
	}
}

// TestNonFiniteLogits: logits that are not all finite numbers are
// sampled as the softmax's limit, the same on the default path and the
// chain's: a NaN is −Inf; where the largest allowed logit is infinite
// (every allowed token −Inf, or a +Inf), the tokens equal to it share
// the mass evenly and the rest get none. Greedy takes the first of them.
// Before, top-p and min-p over an all −Inf mask kept nothing and the pick
// indexed c[−1].
func TestNonFiniteLogits(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := []struct {
		name    string
		logits  []float32
		allowed []uint64
		want    []uint32 // the tokens that share the mass
	}{
		{"allowed all -Inf", []float32{-inf, -inf, 3, -inf}, []uint64{0b1011}, []uint32{0, 1, 3}},
		{"one allowed, -Inf", []float32{2, -inf, 3}, []uint64{0b010}, []uint32{1}},
		{"NaN beside -Inf", []float32{nan, -inf, nan}, nil, []uint32{0, 1, 2}},
		{"+Inf", []float32{1, inf, 2, inf, nan}, nil, []uint32{1, 3}},
		{"NaN beside numbers", []float32{nan, 0, 0, nan}, nil, []uint32{1, 2}},
	}
	params := []Params{
		{Temperature: 0.8},
		{Temperature: 0.8, TopP: 0.999},
		{Temperature: 0.8, MinP: 0.1},
		{Temperature: 1.2, TopK: 40, TopP: 0.999, MinP: 0.05},
		{Temperature: 0.8, TopP: 0.999, MinP: 0.05, Order: "pmt"},
		{Temperature: 0.8, RepeatPenalty: 1.3, TopP: 0.999, Order: "kpmte"},
	}
	for _, tc := range cases {
		for _, p := range params {
			what := tc.name + " " + fmtParams(p)
			s := New(p)
			want := make([]Prob, len(tc.want))
			for i, id := range tc.want {
				want[i] = Prob{id, 1 / float64(len(tc.want))}
			}
			if tc.allowed == nil {
				sameDist(t, what, s.Dist(nil, tc.logits, []uint32{0}), want, 1e-12)
			}
			seen := map[uint32]int{}
			for range 400 {
				seen[s.SampleAllowed(tc.logits, []uint32{0}, tc.allowed)]++
			}
			for id := range seen {
				if !slices.Contains(tc.want, id) {
					t.Fatalf("%s: picked %d, want one of %v", what, id, tc.want)
				}
			}
			if len(seen) != len(tc.want) {
				t.Fatalf("%s: 400 picks drew %v, want each of %v", what, seen, tc.want)
			}
		}
		if got := New(Params{}).SampleAllowed(tc.logits, nil, tc.allowed); got != tc.want[0] {
			t.Fatalf("%s: greedy picked %d, want %d", tc.name, got, tc.want[0])
		}
	}
}
