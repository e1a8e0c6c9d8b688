package sample

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// DefaultOrder is the chain Order "" means: llama.cpp's default order.
const DefaultOrder = "edskypmxt"

// fastOrder is the order of the filters the default chain's fast path
// (Sampler.weights) runs, in o: the others do nothing while they are off.
func fastOrder(o string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune("dsyx", r) {
			return -1
		}
		return r
	}, o)
}

// extended reports whether a filter the fast path lacks is on.
func (p Params) extended() bool {
	return p.TypicalP > 0 && p.TypicalP < 1 || p.TopNSigma > 0 || p.xtc() || p.DynaTempRange > 0 && p.Temperature > 0 || p.MinKeep > 1 ||
		p.DRY != nil || p.AdaptiveP != nil
}

// xtc reports whether XTC is on: a threshold above 0.5 can drop nothing.
func (p Params) xtc() bool { return p.XTCProbability > 0 && p.XTCThreshold <= 0.5 }

// MaxInfillCandidates bounds the candidates the infill filter compares
// pairwise: Order must run 'k' before 'i', with 1 <= TopK <=
// MaxInfillCandidates.
const MaxInfillCandidates = 1024

// Vocab is what the infill filter knows of the vocabulary. Its EOT must
// be a token of the logits (a vocabulary without one would give its EOS):
// Sample returns it as it is.
type Vocab interface {
	IsEOG(id uint32) bool   // the token ends a generation
	EOT() uint32            // the token infill falls back to when no text token is left
	Piece(id uint32) string // the token's text; "" for a control token
}

// samplers are the letters Order may hold, in the default chain's order
// and then infill's.
const samplers = DefaultOrder + "i"

// order is the chain p.Order names.
func (p Params) order() string {
	if p.Order == "" {
		return DefaultOrder
	}
	return p.Order
}

// validOrder checks p.Order: known letters, each once; infill with its
// vocabulary, and after a top-k that bounds its pairwise comparisons.
func (p Params) validOrder() error {
	for i, r := range p.Order {
		if !strings.ContainsRune(samplers, r) {
			return fmt.Errorf("sample: samplers order %q: %q is not a sampler (e d s k y p m x t i)", p.Order, r)
		}
		if strings.ContainsRune(p.Order[:i], r) {
			return fmt.Errorf("sample: samplers order %q: %q twice", p.Order, r)
		}
	}
	i := strings.IndexByte(p.Order, 'i')
	switch {
	case i < 0:
		return nil
	case p.Vocab == nil:
		return fmt.Errorf("sample: samplers order %q: infill needs the vocabulary", p.Order)
	case !strings.Contains(p.Order[:i], "k"):
		return fmt.Errorf("sample: samplers order %q: infill compares every pair of candidates, so it needs top_k before it", p.Order)
	case p.TopK < 1 || p.TopK > MaxInfillCandidates:
		return fmt.Errorf("sample: samplers order %q: infill needs top_k in [1, %d], not %d", p.Order, MaxInfillCandidates, p.TopK)
	}
	return nil
}

// sampleChain is SampleAllowed for an order other than the default: the
// history is counted (if the order penalises).
func (s *Sampler) sampleChain(logits []float32, allowed []uint64) uint32 {
	if s.p.Greedy() && !s.infills && !s.dries {
		// Top-k, top-p, min-p and a cold temperature all keep the
		// likeliest token: the pick is greedy's, without a sort.
		return s.greedy(logits, allowed)
	}
	c := s.chain(logits, allowed, s.xtcDraw)
	if s.p.Greedy() {
		return c[0].id
	}
	c, sum := s.weighChain(c)
	r := s.rng.Float64() * sum
	pick := -1
	for i, x := range c {
		if r < x.v {
			pick = i
			break
		}
		r -= x.v
	}
	if pick < 0 {
		// r met the rounding of sum: the last token with any weight
		// (one infill dropped to −Inf has none).
		pick = len(c) - 1
		for pick > 0 && !(c[pick].v > 0) {
			pick--
		}
	}
	if s.p.AdaptiveP != nil {
		s.adaptiveAccept(pick)
	}
	return c[pick].id
}

// distChain is Dist for an order other than the default.
func (s *Sampler) distChain(dst []Prob, logits []float32, allowed []uint64) []Prob {
	if s.p.Greedy() {
		return append(dst, Prob{s.sampleChain(logits, allowed), 1}) // greedy draws nothing
	}
	if s.p.xtc() && s.p.XTCProbability < 1 {
		return s.xtcDist(dst, logits, allowed)
	}
	return s.chainDist(dst, logits, allowed, func() bool { return true }, 1)
}

// chainDist appends the distribution of the chain's candidates, each
// probability times scale, with XTC run where xtc says.
func (s *Sampler) chainDist(dst []Prob, logits []float32, allowed []uint64, xtc func() bool, scale float64) []Prob {
	c, sum := s.weighChain(s.chain(logits, allowed, xtc))
	for _, x := range c {
		if x.v > 0 {
			dst = append(dst, Prob{x.id, scale * x.v / sum})
		}
	}
	return dst
}

// chain runs the filters in the sampler's order over the biased logits
// and returns the candidates left with their logits, likeliest first
// (then by id). A NaN logit counts as −Inf: it has no mass, and the
// order stays total. XTC, where it is on and has two candidates or
// more, runs if xtc says so (a draw of the stream, or a branch of
// Dist's mixture).
//
// The candidates are sorted only once a filter needs them so (top-p,
// infill, the pick): until then they stay in id order, where the
// penalties find their tokens by id and top-k selects its head with a
// heap.
func (s *Sampler) chain(logits []float32, allowed []uint64, xtc func() bool) []candidate {
	c := slices.Grow(s.cands[:0], len(logits))
	for id, l := range logits {
		if allowed != nil && !has(allowed, id) {
			continue
		}
		v := float64(l)
		if v != v {
			v = math.Inf(-1)
		}
		c = append(c, candidate{uint32(id), v})
	}
	for _, b := range s.p.LogitBias {
		if i, ok := find(c, b.Token, allowed); ok {
			c[i].v += b.Bias
		}
	}
	// full: c holds every candidate, in id order (find works); sorted:
	// c is in before's order.
	full, sorted := true, false
	order := s.p.order()
	for j := range len(order) {
		switch order[j] {
		case 'e':
			if len(s.counts) == 0 {
				continue
			}
			if full {
				for id := range s.counts {
					if i, ok := find(c, id, allowed); ok {
						c[i].v = s.penalised(id, c[i].v)
					}
				}
			} else {
				for i, x := range c {
					c[i].v = s.penalised(x.id, x.v)
				}
			}
			sorted = false
		case 'd':
			if len(s.dryPen) == 0 {
				continue
			}
			if full {
				for id, pen := range s.dryPen {
					if i, ok := find(c, id, allowed); ok {
						c[i].v -= pen
					}
				}
			} else {
				for i, x := range c {
					c[i].v -= s.dryPen[x.id]
				}
			}
			sorted = false
		case 'k':
			if k := s.p.TopK; k > 0 && k < len(c) {
				c, full, sorted = topK(c, k), false, true
			}
		case 'p':
			if p := s.p.TopP; p > 0 && p < 1 {
				c = s.sortCands(c, sorted)
				c, full, sorted = s.topP(c, p), false, true
			}
		case 'm':
			if m := s.p.MinP; m > 0 {
				var now bool
				c, now = minP(c, m, s.p.MinKeep)
				full, sorted = false, sorted || now
			}
		case 's':
			if n := s.p.TopNSigma; n > 0 && len(c) > 1 {
				c, full = topNSigma(c, n), false
			}
		case 'y':
			if p := s.p.TypicalP; p > 0 && p < 1 {
				c, full, sorted = s.typical(c, p), false, false
			}
		case 'x':
			if s.p.xtc() && len(c) > 1 && xtc() {
				c = s.sortCands(c, sorted)
				c, full, sorted = s.excludeTop(c), false, true
			}
		case 't':
			if t := s.p.Temperature; t > 0 {
				if s.p.DynaTempRange > 0 && len(c) > 1 {
					t = s.dynamicTemperature(c, t)
				}
				if t <= 0 {
					c, full, sorted = coldest(c), false, true
					continue
				}
				for i := range c {
					c[i].v /= t
				}
				// Dividing can round two logits to one, whose tie
				// the ids then order.
				sorted = sorted && slices.IsSortedFunc(c, beforeNumber)
				continue
			}
			c, full, sorted = coldest(c), false, true
		case 'i':
			c = s.sortCands(c, sorted)
			c = s.infill(c)
			full, sorted = false, slices.IsSortedFunc(c, beforeNumber) // a merged-away EOG token went to −Inf
		}
	}
	c = s.sortCands(c, sorted)
	s.cands = c
	return c
}

// coldest is what a cold temperature leaves: the likeliest alone.
func coldest(c []candidate) []candidate {
	best := 0
	for i := range c {
		if beforeNumber(c[i], c[best]) < 0 {
			best = i
		}
	}
	c[0] = c[best]
	return c[:1]
}

// sortCands sorts c in before's order unless it is sorted. Its logits
// hold no NaN (chain made them −Inf), so the plain comparisons do.
func (s *Sampler) sortCands(c []candidate, sorted bool) []candidate {
	if !sorted {
		s.sortLikeliest(c)
	}
	return c
}

// softmaxWeights sets w[i].v to c[i]'s weight e^(v−top), top being
// c[0]'s logit (c sorted), and returns their sum; w may be c. An
// infinite top (every logit −Inf, or a +Inf, say from a tiny
// temperature's division) gives the candidates equal to it weight 1 and
// the others none, the limit the softmax tends to, where e^(v−top) is NaN.
func softmaxWeights(w, c []candidate) float64 { return softmaxWeightsAt(w, c, c[0].v) }

// softmaxWeightsAt is softmaxWeights for candidates in any order whose
// largest logit is top.
func softmaxWeightsAt(w, c []candidate, top float64) float64 {
	w = w[:len(c)]
	if math.IsInf(top, 0) {
		for i, x := range c {
			w[i].v = 0
			if x.v == top {
				w[i].v = 1
			}
		}
	} else {
		expWeights(w, c, top, 1)
	}
	var sum float64
	for _, x := range w {
		sum += x.v
	}
	return sum
}

// topP keeps the shortest head of the sorted candidates whose
// probabilities (the softmax over c) reach p: the default chain's
// nucleus, walked over the whole sorted list.
func (s *Sampler) topP(c []candidate, p float64) []candidate {
	s.exps = slices.Grow(s.exps[:0], len(c))[:len(c)]
	sum := softmaxWeights(s.exps, c)
	var cum float64
	for i, x := range s.exps {
		cum += x.v / sum
		if cum >= p && i+1 >= s.p.MinKeep {
			return c[:i+1]
		}
	}
	return c
}

// minP drops the candidates less likely than m times the likeliest,
// keeping their order: p_i ≥ m·p_top ⇔ v_i − top ≥ ln m. The likeliest
// stays (where top is infinite, so do those equal to it). Where fewer
// than minKeep would stay, the minKeep likeliest do, sorted (sorted
// says so).
func minP(c []candidate, m float64, minKeep int) (kept []candidate, sorted bool) {
	top := math.Inf(-1)
	for _, x := range c {
		top = max(top, x.v)
	}
	cut := detmath.Log(m)
	n := 0
	for _, x := range c {
		if x.v == top || x.v-top >= cut {
			n++
		}
	}
	if n < minKeep && n < len(c) {
		slices.SortFunc(c, beforeNumber)
		return c[:min(minKeep, len(c))], true
	}
	kept = c[:0]
	for _, x := range c {
		if x.v == top || x.v-top >= cut {
			kept = append(kept, x)
		}
	}
	return kept, false
}
