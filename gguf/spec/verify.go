package spec

import (
	"fmt"
	"sync"

	"github.com/meshnode/meshnode/gguf/sample"
)

// Rows are the target's logits over a verified window: row j follows the
// window's token j (the last token generated, then each draft).
type Rows interface {
	Logits(j int) []float32
	// ArgMax is the likeliest token of row j (found where the logits
	// are, on a device backend).
	ArgMax(j int) uint32
}

// Verify decides how many of drafts the target accepts, given its rows
// over the window [last token, drafts...], and picks the token that
// follows the accepted ones: the target's correction where a draft fell,
// or one more token after them all. history is the penalties' history up
// to the window's first token (the tokens generated); drafts extend it
// row by row. smp is the request's sampler: greedy parameters accept
// while the draft is the target's pick (argMax: the pick is the row's
// argmax, Params.ArgMax), and take no draw; sampled ones apply the
// rejection rule (see the package doc), drawing from smp's stream.
func Verify(smp *sample.Sampler, argMax bool, rows Rows, drafts []Draft, history []uint32) (accepted int, next uint32) {
	return verify(smp, argMax, rows, drafts, history, nil)
}

// VerifyAllowed is Verify for output held to a grammar: row j's pick
// (greedy) or distribution (sampled) is over the tokens masks[j] allows
// (sample.Sampler.SampleAllowed; nil allows every token), as plain
// constrained decoding picks after the drafts before it. masks has a
// mask for each row: len(drafts)+1 of them (Masks).
func VerifyAllowed(smp *sample.Sampler, rows Rows, drafts []Draft, history []uint32, masks [][]uint64) (accepted int, next uint32) {
	if len(masks) != len(drafts)+1 {
		panic(fmt.Sprintf("spec: %d masks for a window of %d drafts", len(masks), len(drafts)))
	}
	return verify(smp, false, rows, drafts, history, masks)
}

func verify(smp *sample.Sampler, argMax bool, rows Rows, drafts []Draft, history []uint32, masks [][]uint64) (accepted int, next uint32) {
	allowed := func(j int) []uint64 {
		if masks == nil {
			return nil
		}
		return masks[j]
	}
	hist := append([]uint32(nil), history...)
	if smp.Params().Greedy() {
		for j := 0; ; j++ {
			var pick uint32
			if argMax {
				pick = rows.ArgMax(j)
			} else {
				pick = smp.SampleAllowed(rows.Logits(j), hist, allowed(j))
			}
			if j == len(drafts) || pick != drafts[j].Token {
				return j, pick
			}
			hist = append(hist, pick)
		}
	}
	pp := dists.Get().(*[]sample.Prob)
	p := (*pp)[:0]
	defer func() { *pp = p[:0]; dists.Put(pp) }()
	for j, d := range drafts {
		p = smp.DistAllowed(p[:0], rows.Logits(j), hist, allowed(j))
		px, qx := probOf(p, d.Token), d.q(d.Token)
		// Accept with probability min(1, p(x)/q(x)); a draw is taken
		// whatever the odds, so the stream's use depends only on how
		// many drafts were looked at.
		if smp.Float64()*qx < px {
			hist = append(hist, d.Token)
			continue
		}
		return j, smp.Draw(residual(p, d))
	}
	return len(drafts), smp.SampleAllowed(rows.Logits(len(drafts)), hist, allowed(len(drafts)))
}

// dists are Verify's distributions over the vocabulary, reused: one is
// hundreds of kilobytes, made for every draft verified.
var dists = sync.Pool{New: func() any { return new([]sample.Prob) }}

// probOf is id's probability in d.
func probOf(d []sample.Prob, id uint32) float64 {
	for _, x := range d {
		if x.ID == id {
			return x.P
		}
	}
	return 0
}

// residual is max(0, p − q) over p's tokens (unnormalised: Draw
// normalises), the distribution a rejected draft is replaced from; p
// itself where it has no mass left (p = q, up to rounding).
func residual(p []sample.Prob, d Draft) []sample.Prob {
	// q by token, dense: a draft's distribution spans the vocabulary,
	// which a map of it took milliseconds to build, every rejection.
	var q []float64
	if d.Q != nil {
		var top uint32
		for _, x := range d.Q {
			top = max(top, x.ID)
		}
		q = make([]float64, int(top)+1)
		for _, x := range d.Q {
			q[x.ID] = x.P
		}
	}
	r := make([]sample.Prob, 0, len(p))
	var sum float64
	for _, x := range p {
		qx := 0.0
		if q != nil {
			if int(x.ID) < len(q) {
				qx = q[x.ID]
			}
		} else if x.ID == d.Token {
			qx = 1
		}
		if v := x.P - qx; v > 0 {
			r = append(r, sample.Prob{ID: x.ID, P: v})
			sum += v
		}
	}
	if sum <= 0 {
		return p
	}
	return r
}

// LogprobRecorder takes the log-probabilities of each token a round
// yields, in order, from the target's row it was picked from
// (engine.LogprobQueue).
type LogprobRecorder interface {
	Pick(logits []float32, tok uint32)
}

// RecordLogprobs hands rec the target's row for each token a verified
// round yields: row j for the accepted draft j, row accepted for next.
// They are the target's distributions, whatever the draft proposed.
func RecordLogprobs(rec LogprobRecorder, rows Rows, drafts []Draft, accepted int, next uint32) {
	for j := range accepted {
		rec.Pick(rows.Logits(j), drafts[j].Token)
	}
	rec.Pick(rows.Logits(accepted), next)
}
