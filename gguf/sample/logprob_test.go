package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// TestLogProbsAgainstSoftmax checks LogProbs against the textbook softmax
// computed naively (the logits are small enough not to overflow), to
// 1e-12, and its ranking against a full sort.
func TestLogProbsAgainstSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		n := 1 + rng.IntN(300)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 4)
			if trial%3 == 0 && i%7 == 0 {
				logits[i] = logits[0] // ties
			}
		}
		var z float64
		for _, l := range logits {
			z += math.Exp(float64(l))
		}
		ref := make([]LogProb, n)
		for i, l := range logits {
			ref[i] = LogProb{uint32(i), math.Log(math.Exp(float64(l)) / z)}
		}
		sorted := append([]LogProb(nil), ref...)
		sort.SliceStable(sorted, func(a, b int) bool { return logits[sorted[a].ID] > logits[sorted[b].ID] })
		id := uint32(rng.IntN(n))
		for _, top := range []int{0, 1, 5, 20, 40} {
			lp, alts := LogProbs(nil, logits, id, top)
			if math.Abs(lp-ref[id].LogProb) > 1e-12 {
				t.Fatalf("trial %d: logprob of %d = %v, softmax says %v", trial, id, lp, ref[id].LogProb)
			}
			want := min(top, MaxTopLogProbs, n)
			if len(alts) != want {
				t.Fatalf("trial %d top %d: %d alternatives, want %d", trial, top, len(alts), want)
			}
			for i, a := range alts {
				if a.ID != sorted[i].ID || math.Abs(a.LogProb-sorted[i].LogProb) > 1e-12 {
					t.Fatalf("trial %d top %d: alternative %d is %+v, want %+v", trial, top, i, a, sorted[i])
				}
			}
		}
	}
}

// TestLogProbsGreedyHeads checks that the greedy pick (the sampler's,
// lowest id among the largest logits) is the first alternative, with the
// largest log-probability, also under huge logits.
func TestLogProbsGreedyHeads(t *testing.T) {
	logits := []float32{3e4, 5e4, -1e30, 5e4, 1}
	pick := New(Params{}).Sample(logits, nil)
	lp, alts := LogProbs(nil, logits, pick, 3)
	if alts[0].ID != pick || alts[0].LogProb != lp {
		t.Fatalf("greedy pick %d (logprob %v) is not the head of %+v", pick, lp, alts)
	}
	if want := -math.Ln2; math.Abs(lp-want) > 1e-12 {
		t.Fatalf("two equal largest logits: logprob %v, want ln ½ = %v", lp, want)
	}
	for _, a := range alts {
		if math.IsNaN(a.LogProb) || math.IsInf(a.LogProb, 0) {
			t.Fatalf("alternative %+v is not finite", a)
		}
	}
}
