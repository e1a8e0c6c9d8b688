package sample

import (
	"math"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// LogProb is a token and its natural-log probability.
type LogProb struct {
	ID      uint32
	LogProb float64
}

// MaxTopLogProbs bounds the alternatives LogProbs ranks (OpenAI's
// top_logprobs takes at most 20).
const MaxTopLogProbs = 20

// LogProbs returns id's log-probability under the model's distribution
// over logits, the log-softmax of the logits as they are (temperature 1,
// before any penalty, truncation or temperature a sampler applies: what
// OpenAI and llama.cpp's server report by default), and appends to
// dst[:0] the top likeliest tokens with theirs, likeliest first, the
// lower id first on a tie (so that a greedy pick, the lowest id of the
// largest logit, heads the list). top is capped at MaxTopLogProbs.
//
// The sum is taken in float64 over every logit, shifted by the largest,
// so that it neither overflows nor loses the small terms' mass.
func LogProbs(dst []LogProb, logits []float32, id uint32, top int) (float64, []LogProb) {
	dst = dst[:0]
	if len(logits) == 0 {
		return math.Inf(-1), dst
	}
	m := math.Inf(-1)
	for _, l := range logits {
		m = max(m, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += detmath.Exp(float64(l) - m) // the same bits on every platform
	}
	// (l − m) − ln sum, not l − (m + ln sum): the latter loses the
	// digits of ln sum to a large m.
	lnSum := detmath.Log(sum)
	lp := math.Inf(-1)
	if int(id) < len(logits) {
		lp = (float64(logits[id]) - m) - lnSum
	}
	top = min(top, MaxTopLogProbs, len(logits))
	if top <= 0 {
		return lp, dst
	}
	// Insertion into a sorted list of at most top entries: top is small,
	// and one pass over the vocabulary does it.
	for i, l := range logits {
		v := float64(l)
		if len(dst) == top && v <= dst[top-1].LogProb {
			continue // not better than the last kept (ties keep the lower id, seen first)
		}
		j := len(dst)
		if j < top {
			dst = append(dst, LogProb{})
		} else {
			j = top - 1
		}
		for j > 0 && v > dst[j-1].LogProb {
			dst[j] = dst[j-1]
			j--
		}
		dst[j] = LogProb{ID: uint32(i), LogProb: v}
	}
	for i := range dst {
		dst[i].LogProb = (dst[i].LogProb - m) - lnSum
	}
	return lp, dst
}
