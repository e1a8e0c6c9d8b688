package spec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestConfidence: the early-stopping confidence agrees with the full
// softmax (softmaxAt): the argmax's probability where it reaches the
// floor, 0 where it does not, and the probability itself with no floor;
// over random logits from sure (one logit far ahead) to unsure (all
// close); and argMax picks the first largest logit as the greedy sampler
// does.
func TestConfidence(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	agree, sure := 0, 0
	for trial := range 3000 {
		n := 1 + rng.IntN(4000)
		spread := []float64{0.1, 1, 4, 20}[trial%4]
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * spread)
		}
		if trial%3 == 0 {
			logits[rng.IntN(n)] += float32(rng.Float64() * 20)
		}
		id, top := argMax(logits)
		for j, l := range logits {
			if l > top || l == top && j < int(id) {
				t.Fatalf("argMax %d (%v), but logit %d is %v", id, top, j, l)
			}
		}
		p := softmaxAt(logits, id)
		if got := confidence(logits, logits[id]-top, top, 0); math.Abs(got-p) > 1e-5*p {
			t.Fatalf("trial %d: confidence %.9f with no floor, softmax %.9f", trial, got, p)
		}
		for _, th := range []float64{0.05, 0.4, 0.9} {
			// At the boundary the two sums round differently.
			if math.Abs(p-th) < 1e-5 {
				continue
			}
			want := p >= th
			got := confidence(logits, logits[id]-top, top, th)
			if (got >= th) != want || want && math.Abs(got-p) > 1e-5*p || !want && got != 0 {
				t.Fatalf("trial %d, floor %.2f: confidence %.9f, softmax %.9f", trial, th, got, p)
			}
			agree++
			if want {
				sure++
			}
		}
	}
	if sure == 0 || sure == agree {
		t.Fatalf("the cases do not cover both answers: %d sure of %d", sure, agree)
	}
}

// TestExpNeg holds expNeg to math.Exp over its domain, [−16, 0], to a
// relative 2e-7.
func TestExpNeg(t *testing.T) {
	for i := 0; i <= 160000; i++ {
		x := -float64(i) / 10000
		if got, want := expNeg(x), math.Exp(x); math.Abs(got-want) > 2e-7*want {
			t.Fatalf("expNeg(%v) = %v, math.Exp %v: relative error %.2g", x, got, want, math.Abs(got-want)/want)
		}
	}
}

func BenchmarkExpNeg(b *testing.B) {
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = -16 * float64(i) / float64(len(xs))
	}
	var s float64
	b.Run("expNeg", func(b *testing.B) {
		for range b.N {
			for _, x := range xs {
				s += expNeg(x)
			}
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		for range b.N {
			for _, x := range xs {
				s += math.Exp(x)
			}
		}
	})
	_ = s
}
