package engine

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/gguf/sample"
)

// TestPostSamplingRecords: with PostSampling the queue records each pick
// under the distribution the sampler drew it from — top-k 2 leaves two
// tokens, whose probabilities (the softmax of their tempered logits) are
// the record's, likeliest first, and sum to 1 — where without it the
// record is the model's, over every token; the picks are the same.
func TestPostSamplingRecords(t *testing.T) {
	logits := []float32{2, 1, 0.5, -1}
	params := sample.Params{Temperature: 0.7, TopK: 2, Seed: 4}
	for _, post := range []bool{false, true} {
		var got []TokenLogprob
		q := NewLogprobQueue(&Logprobs{Top: 3, PostSampling: post, Record: func(r TokenLogprob) { got = append(got, r) }})
		smp, plain := sample.New(params), sample.New(params)
		for range 20 {
			tok := q.SampleAllowed(smp, logits, nil, nil)
			if want := plain.SampleAllowed(logits, nil, nil); tok != want {
				t.Fatalf("post %v: picked %d, the sampler alone %d", post, tok, want)
			}
			if err := q.Emit(tok); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range got {
			if !post {
				lp, _ := sample.LogProbs(nil, logits, r.Token, 3)
				if r.Logprob != lp || len(r.Top) != 3 {
					t.Fatalf("model's record %+v, want logprob %v and 3 alternatives", r, lp)
				}
				continue
			}
			e0, e1 := math.Exp(2/0.7), math.Exp(1/0.7)
			want := []float64{math.Log(e0 / (e0 + e1)), math.Log(e1 / (e0 + e1))}
			if len(r.Top) != 2 || r.Top[0].ID != 0 || r.Top[1].ID != 1 ||
				math.Abs(r.Top[0].LogProb-want[0]) > 1e-9 || math.Abs(r.Top[1].LogProb-want[1]) > 1e-9 ||
				math.Abs(r.Logprob-want[r.Token]) > 1e-9 {
				t.Fatalf("post-sampling record %+v, want tokens 0 and 1 at %v", r, want)
			}
		}
	}
}

// TestDistLogprob: the top of a distribution, likeliest first and ties
// to the lower id, bounded by top; a token it leaves out has −Inf.
func TestDistLogprob(t *testing.T) {
	d := []sample.Prob{{ID: 5, P: 0.1}, {ID: 2, P: 0.3}, {ID: 9, P: 0.3}, {ID: 1, P: 0.25}, {ID: 7, P: 0.05}}
	r := distLogprob(d, 9, 3)
	if r.Logprob != math.Log(0.3) || len(r.Top) != 3 || r.Top[0].ID != 2 || r.Top[1].ID != 9 || r.Top[2].ID != 1 {
		t.Errorf("record %+v", r)
	}
	if r := distLogprob(d, 4, 0); !math.IsInf(r.Logprob, -1) || r.Top != nil {
		t.Errorf("a token left out: %+v", r)
	}
	if r := distLogprob([]sample.Prob{{ID: 3, P: 1}}, 3, 5); r.Logprob != 0 || len(r.Top) != 1 {
		t.Errorf("a greedy pick: %+v", r)
	}
}
