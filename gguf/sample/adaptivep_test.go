package sample

import (
	"math"
	"testing"
)

// adaptiveRef is adaptive-p's distribution worked with the math
// package: probabilities p (the chain's), adapted target a.
func adaptiveRef(p []float64, a float64) []float64 {
	l := make([]float64, len(p))
	top := math.Inf(-1)
	for i, x := range p {
		d := math.Abs(x-a) / 0.3
		l[i] = 5 - 10*d*d/(1+d)
		top = math.Max(top, l[i])
	}
	var sum float64
	w := make([]float64, len(p))
	for i := range l {
		w[i] = math.Exp(l[i] - top)
		sum += w[i]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

// TestAdaptivePDist: the distribution adaptive-p draws from, against the
// transform worked by hand: at first the adapted target is the target
// (the average starts as if it had been met); after a pick it is
// 2·target minus the moving average, which the pick's probability
// before the transform moved; a token nearer the target outweighs a
// likelier one.
func TestAdaptivePDist(t *testing.T) {
	probs := []float64{0.5, 0.3, 0.2}
	logits := logitsOf(probs...)
	const target, decay = 0.3, 0.9
	s := New(Params{Temperature: 1, Seed: 5, AdaptiveP: &AdaptiveP{Target: target, Decay: decay}})
	if a := s.AdaptiveTarget(); math.Abs(a-target) > 1e-12 {
		t.Fatalf("adapted target at first %v, want %v", a, target)
	}
	check := func(a float64) {
		t.Helper()
		want := adaptiveRef(probs, a)
		d := s.Dist(nil, logits, nil)
		if len(d) != len(want) {
			t.Fatalf("dist %+v, want %v", d, want)
		}
		for _, x := range d {
			if math.Abs(x.P-want[x.ID]) > 1e-6 {
				t.Fatalf("at target %v: dist %+v, want %v", a, d, want)
			}
		}
	}
	check(target)
	d := s.Dist(nil, logits, nil)
	for _, x := range d {
		if x.ID != 1 && x.P >= d[1].P {
			t.Errorf("the token at the target (1) is not drawn likeliest: %+v", d)
		}
	}
	pick := s.Sample(logits, nil)
	ws, tw := probs[pick]+decay*target/(1-decay), 1+decay/(1-decay)
	a := math.Min(math.Max(2*target-ws/tw, 0), 1)
	if got := s.AdaptiveTarget(); math.Abs(got-a) > 1e-6 {
		t.Fatalf("after picking %d: adapted target %v, want %v", pick, got, a)
	}
	check(a)
}

// TestAdaptivePTail: the transform weighs every token the filters left,
// however unlikely (a probability of 0 lies 0.3/0.3 from a target of
// 0.3), as llama.cpp does; a token of logit −Inf it leaves out; the
// filters run before it (top-k 2 leaves two).
func TestAdaptivePTail(t *testing.T) {
	logits := []float32{0, -1000, float32(math.Inf(-1)), -1}
	s := New(Params{Temperature: 1, AdaptiveP: &AdaptiveP{Target: 0.3, Decay: 0.5}})
	d := s.Dist(nil, logits, nil)
	p0 := 1 / (1 + math.Exp(-1))
	want := adaptiveRef([]float64{p0, 0, 1 - p0}, 0.3)
	got := map[uint32]float64{}
	for _, x := range d {
		got[x.ID] = x.P
	}
	if len(d) != 3 || math.Abs(got[0]-want[0]) > 1e-6 || math.Abs(got[1]-want[1]) > 1e-6 || math.Abs(got[3]-want[2]) > 1e-6 {
		t.Errorf("dist %+v, want tokens 0, 1, 3 at %v", d, want)
	}
	k := New(Params{Temperature: 1, TopK: 2, AdaptiveP: &AdaptiveP{Target: 0.3, Decay: 0.5}})
	if d := k.Dist(nil, logits, nil); len(d) != 2 {
		t.Errorf("top-k 2 then adaptive-p: %+v", d)
	}
}

// TestAdaptivePSteers: what adaptive-p is for. Where tokens span the
// target, the picks' probabilities (before the transform) average within
// 0.03 of it, where plain sampling's average is the distribution's
// Σp²; on a peaked distribution, whose likeliest token lies far above
// every target, the average still rises with the target and stays below
// plain sampling's. The draws repeat under one seed.
func TestAdaptivePSteers(t *testing.T) {
	mean := func(probs []float64, target float64) float64 {
		logits := logitsOf(probs...)
		p := Params{Temperature: 1, Seed: 9, AdaptiveP: &AdaptiveP{Target: target, Decay: 0.9}}
		a, b := New(p), New(p)
		var total float64
		const picks = 4000
		for i := range picks {
			x, y := a.Sample(logits, nil), b.Sample(logits, nil)
			if x != y {
				t.Fatalf("pick %d: %d and %d under one seed", i, x, y)
			}
			total += probs[x]
		}
		return total / picks
	}
	plain := func(probs []float64) (m float64) {
		for _, p := range probs {
			m += p * p
		}
		return m
	}
	spread := []float64{0.35, 0.25, 0.2, 0.1, 0.06, 0.04}
	for _, target := range []float64{0.1, 0.2, 0.3} {
		if m := mean(spread, target); math.Abs(m-target) > 0.03 {
			t.Errorf("target %v: the picks' probabilities average %.3f (plain sampling's %.3f)", target, m, plain(spread))
		}
	}
	peaked := []float64{0.7, 0.15, 0.08, 0.04, 0.02, 0.01}
	last := 0.0
	for _, target := range []float64{0.1, 0.2, 0.3, 0.4} {
		m := mean(peaked, target)
		if m <= last || m >= plain(peaked) {
			t.Errorf("peaked, target %v: the picks average %.3f, after %.3f at a lower target (plain sampling's %.3f)", target, m, last, plain(peaked))
		}
		last = m
	}
}

// TestAdaptivePDistIsWhatSampleDraws: a draw from Dist, on a stream
// seeded alike, picks Sample's token, pick after pick (the averages
// moved alike), under a mask.
func TestAdaptivePDistIsWhatSampleDraws(t *testing.T) {
	logits := logitsOf(0.4, 0.3, 0.2, 0.05, 0.05)
	mask := []uint64{0b11101}
	for seed := range uint64(50) {
		p := Params{Temperature: 0.9, Seed: seed, AdaptiveP: &AdaptiveP{Target: 0.25, Decay: 0.8}}
		a, b := New(p), New(p)
		for i := range 6 {
			d := b.DistAllowed(nil, logits, nil, mask)
			y := b.Draw(d)
			if x := a.SampleAllowed(logits, nil, mask); x != y || x == 1 {
				t.Fatalf("seed %d pick %d: Sample %d, Draw(Dist) %d (1 is masked)", seed, i, x, y)
			}
			b.adapt = a.adapt // b drew outside Sample: its average moves as a's did
		}
	}
}

// TestAdaptivePValidate: its bounds, and that mirostat does not run
// beside it.
func TestAdaptivePValidate(t *testing.T) {
	for _, a := range []AdaptiveP{{Target: -0.1, Decay: 0.9}, {Target: 1.1, Decay: 0.9}, {Target: 0.5, Decay: 0.995}, {Target: 0.5, Decay: -1}, {Target: math.NaN()}} {
		if err := (Params{Temperature: 1, AdaptiveP: &a}).Validate(); err == nil {
			t.Errorf("%+v: valid", a)
		}
	}
	if err := (Params{Temperature: 1, AdaptiveP: &AdaptiveP{Target: 0.5, Decay: 0.9}, Mirostat: &Mirostat{Version: 2, Tau: 5, Eta: 0.1}}).Validate(); err == nil {
		t.Error("adaptive-p beside mirostat: valid")
	}
	if err := (Params{Temperature: 1, AdaptiveP: &AdaptiveP{Target: 0, Decay: 0}}).Validate(); err != nil {
		t.Errorf("target 0, decay 0: %v", err)
	}
}
