package spec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTopProb: the pick and confidence agree with the full softmax
// (softmaxAt, math.Exp's) to 0.2%, as does probAt at another logit, and
// the pick is the first largest logit as the greedy sampler's, over random logits from sure (one logit far
// ahead) to unsure (all close), with the largest logit anywhere (so the
// sum is rescaled 0 to many times), and on ties.
func TestTopProb(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		n := 1 + rng.IntN(4000)
		spread := []float64{0.1, 1, 4, 20}[trial%4]
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * spread)
		}
		switch trial % 5 {
		case 0:
			logits[rng.IntN(n)] += float32(rng.Float64() * 20)
		case 1:
			slices.Sort(logits) // each logit a new top
		case 2:
			logits[n-1] = logits[0] // a tie, or the first again
		}
		id, p := topProb(logits)
		top := slices.Max(logits)
		for j, l := range logits {
			if l == top {
				if int(id) != j {
					t.Fatalf("trial %d: topProb picks %d, the first largest logit is %d", trial, id, j)
				}
				break
			}
		}
		if want := softmaxAt(logits, id); math.Abs(p-want) > 2e-3*want {
			t.Fatalf("trial %d: topProb %.6f, softmax %.6f", trial, p, want)
		}
		other := uint32(rng.IntN(n))
		if got, want := probAt(logits, other), softmaxAt(logits, other); math.Abs(got-want) > 2e-3*want {
			t.Fatalf("trial %d: probAt %d %.6g, softmax %.6g", trial, other, got, want)
		}
	}
	if id, p := topProb(nil); id != 0 || p != 0 {
		t.Errorf("no logits: %d, %v", id, p)
	}
}

// BenchmarkTopProb times topProb against the two passes it replaces, the
// greedy pick and a softmax sum of math.Exp, on a vocabulary of 32000
// logits spread as a small draft model's are (most within 16 of the top).
func BenchmarkTopProb(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	var sink float64
	b.Run("topProb", func(b *testing.B) {
		for range b.N {
			_, p := topProb(logits)
			sink += p
		}
	})
	b.Run("twoPasses", func(b *testing.B) {
		for range b.N {
			id := 0
			for i, l := range logits {
				if l > logits[id] {
					id = i
				}
			}
			sink += softmaxAt(logits, uint32(id))
		}
	})
	_ = sink
}

// softmaxAt is the probability of id under the softmax of logits, with
// math.Exp: the reference for topProb and probAt. Logits more than
// softmaxSpan below the top are left out, as they leave them out.
func softmaxAt(logits []float32, id uint32) float64 {
	top := slices.Max(logits)
	var sum float64
	for _, l := range logits {
		if l > top-softmaxSpan {
			sum += math.Exp(float64(l - top))
		}
	}
	if logits[id] <= top-softmaxSpan {
		return 0
	}
	return math.Exp(float64(logits[id]-top)) / sum
}
