package spec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestConfident: the early-stopping threshold test agrees with the full
// softmax (softmaxAt) on whether the argmax reaches the threshold, over
// random logits from sure (one logit far ahead) to unsure (all close),
// and argMax picks the first largest logit as the greedy sampler does.
func TestConfident(t *testing.T) {
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
		for _, th := range []float64{0.05, 0.4, 0.9} {
			p := softmaxAt(logits, id)
			// At the boundary the two sums round differently.
			if math.Abs(p-th) < 1e-9 {
				continue
			}
			want := p >= th
			if got := confident(logits, logits[id]-top, top, th); got != want {
				t.Fatalf("trial %d, threshold %.2f: confident %v, softmax %.6f", trial, th, got, p)
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
