package sample

import (
	"math"
	"testing"
)

// TestMirostatV2: version 2 keeps the tokens whose surprise is at most μ
// (2τ at first), renormalised, and after each pick moves μ by η times
// how far the pick's surprise under them fell short of τ; with μ below
// every surprise, the likeliest alone.
func TestMirostatV2(t *testing.T) {
	logits := logitsOf(0.5, 0.25, 0.125, 0.125)
	m := &Mirostat{Version: 2, Tau: 1.25, Eta: 0.1}
	p := Params{Temperature: 1, Seed: 3, Mirostat: m}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	s := New(p)
	if s.Mu() != 2.5 {
		t.Fatalf("μ starts at %v, want 2τ = 2.5", s.Mu())
	}
	// μ 2.5: p ≥ 2^−2.5 ≈ 0.177 keeps tokens 0 and 1, as 2/3 and 1/3.
	d := s.Dist(nil, logits, nil)
	if len(d) != 2 || d[0].ID != 0 || d[1].ID != 1 || math.Abs(d[0].P-2.0/3) > 1e-6 || math.Abs(d[1].P-1.0/3) > 1e-6 {
		t.Fatalf("dist at μ 2.5: %+v, want 0: 2/3, 1: 1/3", d)
	}
	mu := s.Mu()
	pick := s.Sample(logits, nil)
	want := mu - 0.1*(-math.Log2(d[pick].P)-1.25)
	if math.Abs(s.Mu()-want) > 1e-12 {
		t.Fatalf("after picking %d, μ %v, want %v", pick, s.Mu(), want)
	}
	// A low target drives μ down until only the likeliest is kept.
	low := New(Params{Temperature: 1, Seed: 3, Mirostat: &Mirostat{Version: 2, Tau: 0.05, Eta: 1}})
	for range 20 {
		low.Sample(logits, nil)
	}
	if d := low.Dist(nil, logits, nil); len(d) != 1 || d[0].ID != 0 || d[0].P != 1 {
		t.Fatalf("μ %v: dist %+v, want the likeliest alone", low.Mu(), d)
	}
}

// TestMirostatV1: version 1 keeps the k likeliest tokens for the Zipf
// exponent its 100 likeliest show: on a Zipf distribution of exponent s
// the estimate is s, and k is (ε·2^μ / (1 − N^−ε))^(1/s), ε = s − 1,
// computed here with the math package.
func TestMirostatV1(t *testing.T) {
	const n, s = 5000, 1.3
	p := make([]float64, n)
	for i := range p {
		p[i] = math.Pow(float64(i+1), -s)
	}
	logits := logitsOf(p...)
	for _, tau := range []float64{2.1, 3.3, 4.6} {
		smp := New(Params{Temperature: 1, Seed: 1, Mirostat: &Mirostat{Version: 1, Tau: tau, Eta: 0.1}})
		mu, eps := 2*tau, s-1
		k := math.Pow(eps*math.Exp2(mu)/(1-math.Pow(n, -eps)), 1/s)
		if frac := k - math.Floor(k); frac < 0.01 || frac > 0.99 {
			t.Fatalf("τ %v: k %v is too near a whole number to test", tau, k)
		}
		d := smp.Dist(nil, logits, nil)
		if len(d) != int(k) {
			t.Errorf("τ %v: %d tokens kept, want %d (k %v)", tau, len(d), int(k), k)
		}
		for i, x := range d {
			if x.ID != uint32(i) {
				t.Fatalf("τ %v: kept %d at %d, want the likeliest first", tau, x.ID, i)
			}
		}
	}
}

// TestMirostatSteers: what mirostat is for. Over many picks the mean
// surprise of the tokens drawn, under the truncated distribution each was
// drawn from (as mirostat measures it), comes to τ, where plain sampling
// would give the distribution's entropy: μ settles, so the surprises'
// shortfalls from τ, which move it, cancel out. For either version, and
// the draws repeat under the same seed.
func TestMirostatSteers(t *testing.T) {
	const n = 2000
	p := make([]float64, n)
	for i := range p {
		p[i] = math.Pow(float64(i+1), -1.1)
	}
	logits := logitsOf(p...)
	for _, version := range []int{1, 2} {
		for _, tau := range []float64{3, 5} {
			params := Params{Temperature: 1, Seed: 11, Mirostat: &Mirostat{Version: version, Tau: tau, Eta: 0.1}}
			a, b := New(params), New(params)
			var total float64
			const picks = 4000
			for i := range picks {
				d := a.Dist(nil, logits, nil)
				x, y := a.Sample(logits, nil), b.Sample(logits, nil)
				if x != y || a.Mu() != b.Mu() {
					t.Fatalf("v%d: pick %d: %d and %d (μ %v, %v) under one seed", version, i, x, y, a.Mu(), b.Mu())
				}
				for _, q := range d {
					if q.ID == x {
						total += -math.Log2(q.P)
					}
				}
			}
			if mean := total / picks; math.Abs(mean-tau) > 0.05 {
				t.Errorf("v%d τ %v: mean surprise %.3f bits (μ ends at %.2f)", version, tau, mean, a.Mu())
			}
		}
	}
}

// TestMirostatDistIsWhatSampleDraws: a draw from Dist, on a stream
// seeded alike, picks Sample's token; the logit biases apply before
// mirostat (a banned token is never kept) and a mask too.
func TestMirostatDistIsWhatSampleDraws(t *testing.T) {
	logits := logitsOf(0.4, 0.3, 0.2, 0.05, 0.05)
	for _, version := range []int{1, 2} {
		for seed := range uint64(200) {
			p := Params{Temperature: 0.9, Seed: seed, Mirostat: &Mirostat{Version: version, Tau: 3, Eta: 0.2},
				LogitBias: []Bias{{Token: 0, Bias: -100}}}
			a, b := New(p), New(p)
			mask := []uint64{0b11101}
			d := b.DistAllowed(nil, logits, nil, mask)
			for _, x := range d {
				if x.ID == 0 || x.ID == 1 {
					t.Fatalf("v%d: token %d kept (banned or masked): %+v", version, x.ID, d)
				}
			}
			if x, y := a.SampleAllowed(logits, nil, mask), b.Draw(d); x != y {
				t.Fatalf("v%d seed %d: Sample %d, Draw(Dist) %d", version, seed, x, y)
			}
		}
	}
}

// TestMirostatValidate: its own bounds, and that it runs alone.
func TestMirostatValidate(t *testing.T) {
	m := func(v int, tau, eta float64) *Mirostat { return &Mirostat{Version: v, Tau: tau, Eta: eta} }
	for _, p := range []Params{
		{Temperature: 1, Mirostat: m(3, 5, 0.1)},
		{Temperature: 1, Mirostat: m(2, 0, 0.1)},
		{Temperature: 1, Mirostat: m(2, 101, 0.1)},
		{Temperature: 1, Mirostat: m(2, 5, 0)},
		{Temperature: 1, Mirostat: m(2, 5, 1.5)},
		{Temperature: 1, Mirostat: m(2, math.NaN(), 0.1)},
		{Mirostat: m(2, 5, 0.1)},
		{Temperature: 1, TopK: 40, Mirostat: m(2, 5, 0.1)},
		{Temperature: 1, TopP: 0.9, Mirostat: m(2, 5, 0.1)},
		{Temperature: 1, MinP: 0.05, Mirostat: m(1, 5, 0.1)},
		{Temperature: 1, RepeatPenalty: 1.1, Mirostat: m(1, 5, 0.1)},
		{Temperature: 1, TypicalP: 0.9, Mirostat: m(2, 5, 0.1)},
		{Temperature: 1, DRY: &DRY{Multiplier: 0.8, Base: 1.75, AllowedLength: 2}, Mirostat: m(2, 5, 0.1)},
		{Temperature: 1, Order: "t", Mirostat: m(2, 5, 0.1)},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v (mirostat %+v): valid", p, *p.Mirostat)
		}
	}
	if err := (Params{Temperature: 0.8, TopP: 1, Mirostat: m(1, 5, 1)}).Validate(); err != nil {
		t.Errorf("mirostat alone: %v", err)
	}
}
