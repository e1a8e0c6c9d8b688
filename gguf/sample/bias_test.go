package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLogitBiasIsAddedLogits: a sampler with logit biases picks, draw for
// draw on the same seed, what one without them picks from logits with
// the biases added (the reference), under every filter, with and
// without penalties and a grammar's mask; its Dist is the reference's.
func TestLogitBiasIsAddedLogits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	logits := make([]float32, 64)
	for i := range logits {
		// Multiples of 2⁻⁸, so that adding a bias is exact in float32
		// as in float64.
		logits[i] = float32(math.Round(rng.NormFloat64()*2*256) / 256)
	}
	bias := []Bias{{Token: 5, Bias: 3.5}, {Token: 0, Bias: -100}, {Token: 63, Bias: 1.25}, {Token: 17, Bias: -0.75}}
	added := append([]float32(nil), logits...)
	for _, b := range bias {
		added[b.Token] = float32(float64(logits[b.Token]) + b.Bias)
	}
	history := []uint32{5, 5, 9, 17}
	allowed := []uint64{0}
	for id := range 64 {
		if id%3 != 1 {
			allowed[0] |= 1 << id
		}
	}
	for _, p := range []Params{
		{},
		{Temperature: 0.8, Seed: 1},
		{Temperature: 1.2, TopK: 8, Seed: 2},
		{Temperature: 0.7, TopP: 0.85, MinP: 0.02, Seed: 3},
	} {
		for _, pen := range []Params{{}, {RepeatPenalty: 1.3, FrequencyPenalty: 0.2, PresencePenalty: 0.1}} {
			p := p
			p.RepeatPenalty, p.FrequencyPenalty, p.PresencePenalty = pen.RepeatPenalty, pen.FrequencyPenalty, pen.PresencePenalty
			ref := p
			p.LogitBias = bias
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			for _, mask := range [][]uint64{nil, allowed} {
				a, b := New(p), New(ref)
				for i := range 300 {
					got, want := a.SampleAllowed(logits, history, mask), b.SampleAllowed(added, history, mask)
					if got != want {
						t.Fatalf("%+v, mask %v, draw %d: biased %d, reference %d", p, mask != nil, i, got, want)
					}
				}
				if mask != nil {
					continue
				}
				da, db := a.Dist(nil, logits, history), b.Dist(nil, added, history)
				if len(da) != len(db) {
					t.Fatalf("%+v: Dist of %d tokens, reference %d", p, len(da), len(db))
				}
				for i := range da {
					if da[i] != db[i] {
						t.Fatalf("%+v: Dist[%d] = %v, reference %v", p, i, da[i], db[i])
					}
				}
			}
		}
	}
}

// TestLogitBias: a bias moves a greedy pick, −100 bans a token from
// sampling, a bias comes before a penalty (which scales the biased
// logit, as in llama.cpp's chain), and biased parameters are not an
// argmax of the raw logits.
func TestLogitBias(t *testing.T) {
	logits := []float32{2, 1.9, -1, 0.5}
	if got := New(Params{LogitBias: []Bias{{Token: 3, Bias: 1.6}}}).Sample(logits, nil); got != 3 {
		t.Errorf("greedy with +1.6 on token 3 = %d, want 3", got)
	}
	if got := New(Params{LogitBias: []Bias{{Token: 9, Bias: 50}}}).Sample(logits, nil); got != 0 {
		t.Errorf("a bias past the vocabulary moved the pick to %d", got)
	}
	s := New(Params{Temperature: 1, Seed: 4, LogitBias: []Bias{{Token: 0, Bias: -100}, {Token: 1, Bias: -100}}})
	for range 2000 {
		if got := s.Sample(logits, nil); got < 2 {
			t.Fatalf("drew banned token %d", got)
		}
	}
	// Token 2's logit −1, biased by 4 and then divided by the repeat
	// penalty 2, is 1.5, below token 0's 1.7; penalised first (−1·2)
	// and then biased it would be 2, above it.
	p := Params{RepeatPenalty: 2, LogitBias: []Bias{{Token: 2, Bias: 4}}}
	l := []float32{1.7, -5, -1, -5}
	if got := New(p).Sample(l, []uint32{2}); got != 0 {
		t.Errorf("bias then penalty: token 2 at 1.5 must lose to 1.7, got %d", got)
	}
	if (Params{LogitBias: []Bias{{Token: 1, Bias: 0.5}}}).ArgMax() {
		t.Error("biased greedy parameters claim to be the raw logits' argmax")
	}
	for _, bad := range [][]Bias{{{Token: 1, Bias: math.NaN()}}, {{Token: 1, Bias: math.Inf(-1)}}, {{Token: 2, Bias: 1}, {Token: 2, Bias: -1}}} {
		if (Params{LogitBias: bad}).Validate() == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
