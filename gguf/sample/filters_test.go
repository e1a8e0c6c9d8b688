package sample

import (
	"math"
	"slices"
	"testing"
)

// logitsOf are the logits whose softmax is p.
func logitsOf(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, x := range p {
		l[i] = float32(math.Log(x))
	}
	return l
}

// probsOf is the softmax of l at temperature t, over the tokens keep
// holds (all where keep is nil), by token.
func probsOf(l []float32, t float64, keep []uint32) []Prob {
	var d []Prob
	var sum float64
	for i, x := range l {
		if keep == nil || slices.Contains(keep, uint32(i)) {
			w := math.Exp(float64(x) / t)
			d = append(d, Prob{uint32(i), w})
			sum += w
		}
	}
	for i := range d {
		d[i].P /= sum
	}
	return d
}

// TestTypicalP: locally typical sampling keeps the tokens whose surprise
// is nearest the entropy until their mass exceeds p, which can leave the
// likeliest token out; MinKeep keeps more.
func TestTypicalP(t *testing.T) {
	// H = −0.4 ln 0.4 − 4·0.15 ln 0.15 = 1.505: the 0.15s' surprise
	// (1.897) is nearer it than the 0.4's (0.916).
	l := logitsOf(0.4, 0.15, 0.15, 0.15, 0.15)
	for _, tc := range []struct {
		p       float64
		minKeep int
		keep    []uint32
	}{
		{0.5, 0, []uint32{1, 2, 3, 4}}, // 0.60 > 0.5 after four
		{0.35, 0, []uint32{1, 2, 3}},   // 0.45 > 0.35 after three
		{0.35, 4, []uint32{1, 2, 3, 4}},
		{0.7, 0, nil}, // all five: 1.0 > 0.7 only with the 0.4
		{0.05, 0, []uint32{1}},
	} {
		p := Params{Temperature: 1, TypicalP: tc.p, MinKeep: tc.minKeep, Seed: 1}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		sameDist(t, "typical", New(p).Dist(nil, l, nil), probsOf(l, 1, tc.keep), 1e-9)
	}
	// Under the order that runs it after the temperature, the entropy
	// is the tempered distribution's.
	p := Params{Temperature: 0.5, TypicalP: 0.5, Order: "ty"}
	got := distMap(New(p).Dist(nil, l, nil))
	if got[0] == 0 {
		// At T 0.5: 0.4² : 0.15² → 0.64 : 0.09 each, H = 1.13;
		// the 0.64's surprise 0.45 is the nearest, and alone past 0.5.
		t.Fatalf("typical after temperature 0.5 dropped the likeliest: %v", got)
	}
	if len(got) != 1 {
		t.Fatalf("typical after temperature 0.5 kept %v, want the likeliest alone", got)
	}
}

// TestTopNSigma: the tokens within n standard deviations of the largest
// logit stay, counting only the logits above −Inf.
func TestTopNSigma(t *testing.T) {
	// Mean 4, deviation √(110/6) = 4.28.
	l := []float32{10, 9, 5, 0, 0, 0, float32(math.Inf(-1))}
	for _, tc := range []struct {
		n    float64
		keep []uint32
	}{
		{1, []uint32{0, 1}},      // above 5.72
		{1.2, []uint32{0, 1, 2}}, // above 4.86
		{0.1, []uint32{0}},
		{3, []uint32{0, 1, 2, 3, 4, 5}},
	} {
		p := Params{Temperature: 1, TopNSigma: tc.n}
		sameDist(t, "top-n-sigma", New(p).Dist(nil, l, nil), probsOf(l, 1, tc.keep), 1e-9)
	}
}

// TestXTC: XTC drops every token at least the threshold likely but the
// least likely of them, as often as its probability says: Dist gives
// the mixture, and Sample's draws follow it.
func TestXTC(t *testing.T) {
	l := logitsOf(0.4, 0.3, 0.2, 0.1)
	all, cut := probsOf(l, 1, nil), probsOf(l, 1, []uint32{1, 2, 3})
	mix := func(q float64) []Prob {
		d := slices.Clone(all)
		for i := range d {
			d[i].P *= 1 - q
		}
		for _, x := range cut {
			d[x.ID].P += q * x.P
		}
		return d
	}
	for _, tc := range []struct {
		name       string
		p          Params
		want       []Prob
		drawsFirst bool // Sample draws whether XTC runs
	}{
		{"always", Params{XTCProbability: 1, XTCThreshold: 0.25}, cut, true},
		{"half", Params{XTCProbability: 0.5, XTCThreshold: 0.25}, mix(0.5), true},
		{"min_keep", Params{XTCProbability: 1, XTCThreshold: 0.25, MinKeep: 4}, all, true},
		{"one above", Params{XTCProbability: 1, XTCThreshold: 0.35}, all, true},
		{"threshold over 0.5", Params{XTCProbability: 1, XTCThreshold: 0.6}, all, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Temperature, tc.p.Seed = 1, 7
			s := New(tc.p)
			sameDist(t, "xtc", s.Dist(nil, l, nil), tc.want, 1e-9)
			// Draws: each token's share of 40000 within 5 standard
			// deviations of its probability.
			const n = 40000
			counts := make([]int, len(l))
			for range n {
				counts[s.Sample(l, nil)]++
			}
			for _, x := range tc.want {
				sd := math.Sqrt(x.P * (1 - x.P) / n)
				if got := float64(counts[x.ID]) / n; math.Abs(got-x.P) > 5*sd+1e-12 {
					t.Errorf("token %d drawn %.4f of the time, Dist %.4f", x.ID, got, x.P)
				}
			}
			// The stream: XTC's draw comes before the token's where it
			// can drop something.
			a, b := New(tc.p), New(Params{Temperature: 1, Seed: 7})
			a.Sample(l, nil)
			draws := 1 // the token's
			if tc.drawsFirst {
				draws++
			}
			for range draws {
				b.Float64()
			}
			if a.Float64() != b.Float64() {
				t.Errorf("the stream after a pick is not where %d draws leave it", draws)
			}
		})
	}
}

// TestDynamicTemperature: the temperature is T − range … T + range by
// the normalised entropy to the exponent's power.
func TestDynamicTemperature(t *testing.T) {
	l := []float32{3, 1, 0.5, 0, -1, -2}
	p0 := probsOf(l, 1, nil)
	var h float64
	for _, x := range p0 {
		h -= x.P * math.Log(x.P)
	}
	norm := h / math.Log(float64(len(l)))
	for _, tc := range []struct{ temp, rng, exp float64 }{
		{0.8, 0.5, 1},
		{0.8, 0.5, 2},
		{0.3, 0.5, 1}, // the floor is 0
		{1, 0.2, 0},   // entropy^0: T + range
	} {
		want := max(0, tc.temp-tc.rng) + (tc.temp+tc.rng-max(0, tc.temp-tc.rng))*math.Pow(norm, tc.exp)
		p := Params{Temperature: tc.temp, DynaTempRange: tc.rng, DynaTempExponent: tc.exp}
		sameDist(t, "dynatemp", New(p).Dist(nil, l, nil), probsOf(l, want, nil), 1e-9)
	}
	// Off with a range of 0: the temperature as it is.
	sameDist(t, "no range", New(Params{Temperature: 0.7, DynaTempExponent: 3}).Dist(nil, l, nil), probsOf(l, 0.7, nil), 1e-9)
}

// TestMinKeep: top-p and min-p leave at least MinKeep tokens; top-k does
// not read it (as in llama.cpp).
func TestMinKeep(t *testing.T) {
	l := logitsOf(0.5, 0.2, 0.15, 0.1, 0.05)
	for _, tc := range []struct {
		name string
		p    Params
		keep []uint32
	}{
		{"top-p", Params{TopP: 0.4}, []uint32{0}},
		{"top-p min_keep", Params{TopP: 0.4, MinKeep: 3}, []uint32{0, 1, 2}},
		{"min-p", Params{MinP: 0.5}, []uint32{0}},
		{"min-p min_keep", Params{MinP: 0.5, MinKeep: 2}, []uint32{0, 1}},
		{"min-p min_keep met", Params{MinP: 0.25, MinKeep: 2}, []uint32{0, 1, 2}},
		{"top-k", Params{TopK: 1, MinKeep: 3}, []uint32{0}},
	} {
		tc.p.Temperature = 1
		sameDist(t, tc.name, New(tc.p).Dist(nil, l, nil), probsOf(l, 1, tc.keep), 1e-9)
	}
}

// TestExtendedOff: with llama.cpp's other filters off, any order whose
// other filters run as the default's takes the default's fast path, and
// the new letters do nothing.
func TestExtendedOff(t *testing.T) {
	for _, o := range []string{"", DefaultOrder, "ekpmt", "sekypmxt"} {
		if New(Params{Temperature: 1, TopK: 4, Order: o}).generic {
			t.Errorf("order %q off the fast path", o)
		}
	}
	for _, p := range []Params{{TypicalP: 0.9}, {TopNSigma: 1}, {XTCProbability: 0.1, XTCThreshold: 0.1}, {DynaTempRange: 0.1}, {MinKeep: 2}} {
		p.Temperature = 1
		if !New(p).generic {
			t.Errorf("%+v on the fast path", p)
		}
	}
	l := []float32{2, 1, 0.5, 3, -1}
	a := New(Params{Temperature: 0.9, TopP: 0.9, Seed: 3, Order: "skyxpt", TypicalP: 1, XTCThreshold: 0.1})
	b := New(Params{Temperature: 0.9, TopP: 0.9, Seed: 3, Order: "pt"})
	sameDist(t, "off filters", a.Dist(nil, l, nil), b.Dist(nil, l, nil), 0)
}
