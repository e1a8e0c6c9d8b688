package sample

import (
	"cmp"
	"math"
	"slices"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// llama.cpp's other filters, which llama-server's clients (its web UI,
// SillyTavern) send: top-n-sigma, locally typical sampling, XTC and the
// dynamic temperature. Each runs on chain's path, in the order the
// request gives or llama.cpp's default one (DefaultOrder). They take
// llama.cpp's rules, in float64 and detmath's logarithms and
// exponentials (the same bits on every platform), where llama.cpp's
// float32 sums differ in the last bits; and a token with no mass left
// counts for nothing in an entropy (llama.cpp's 0·ln 0 is NaN).

// topNSigma keeps the candidates whose logit is at least the largest
// less n standard deviations of the logits (over the candidates above
// −Inf), in their order.
func topNSigma(c []candidate, n float64) []candidate {
	top, sum, count := math.Inf(-1), 0.0, 0
	for _, x := range c {
		if !math.IsInf(x.v, -1) {
			top = max(top, x.v)
			sum += x.v
			count++
		}
	}
	if count == 0 {
		return c
	}
	mean := sum / float64(count)
	var acc float64
	for _, x := range c {
		if !math.IsInf(x.v, -1) {
			d := x.v - mean
			acc += float64(d * d) // rounded: no fused multiply-add, the same bits everywhere
		}
	}
	floor := top - float64(n*math.Sqrt(acc/float64(count)))
	kept := c[:0]
	for _, x := range c {
		if x.v >= floor {
			kept = append(kept, x)
		}
	}
	return kept
}

// softmax sets s.exps to the softmax of the candidates c, in their
// order, and returns it.
func (s *Sampler) softmax(c []candidate) []candidate {
	top := math.Inf(-1)
	for _, x := range c {
		top = max(top, x.v) // no NaN: chain made them −Inf
	}
	s.exps = slices.Grow(s.exps[:0], len(c))[:len(c)]
	sum := softmaxWeightsAt(s.exps, c, top)
	for i := range s.exps {
		s.exps[i].v /= sum
	}
	return s.exps
}

// entropy is −Σ p ln p over the probabilities of p with mass.
func entropy(p []candidate) float64 {
	var h float64
	for _, x := range p {
		if x.v > 0 {
			h -= float64(x.v * detmath.Log(x.v))
		}
	}
	return h
}

// typicalCand is a candidate, its probability, and how far its
// surprise is from the entropy.
type typicalCand struct {
	c     candidate
	p     float64
	score float64
	at    int // its place in c: ties keep c's order
}

// typical keeps the locally typical candidates of c: ordered by |−ln p −
// H| (H the entropy; ties in c's order), the shortest head whose mass
// exceeds p, and at least MinKeep. They are returned in that order, not
// sorted.
func (s *Sampler) typical(c []candidate, p float64) []candidate {
	pr := s.softmax(c)
	t := slices.Grow(s.typ[:0], len(c))
	var h float64
	for i, x := range c {
		// score holds ln p until the entropy is known.
		q, lp := pr[i].v, math.Inf(-1)
		if q > 0 {
			lp = detmath.Log(q)
			h -= float64(q * lp)
		}
		t = append(t, typicalCand{x, q, lp, i})
	}
	for i := range t {
		t[i].score = math.Abs(-t[i].score - h) // +Inf where p is 0
	}
	s.typ = t
	t = typicalHead(t, p, s.p.MinKeep)
	slices.SortFunc(t, func(a, b typicalCand) int {
		if a.score != b.score {
			return cmp.Compare(a.score, b.score)
		}
		return cmp.Compare(a.at, b.at)
	})
	last := len(t)
	var cum float64
	for i, x := range t {
		cum += x.p
		if cum > p && (s.p.MinKeep == 0 || i >= s.p.MinKeep-1) {
			last = i + 1
			break
		}
	}
	for i, x := range t[:last] {
		c[i] = x.c
	}
	return c[:last]
}

// typicalHead keeps, in their order, the candidates of t a walk in
// score order takes before its mass exceeds p with minKeep taken (and
// some after, never fewer): those under a score that doubles until what
// is under it holds that mass. Sorted, they begin as all t sorted does,
// so the walk over them takes the same candidates, summed in the same
// order; and sorting a vocabulary was most of a pick's time.
func typicalHead(t []typicalCand, p float64, minKeep int) []typicalCand {
	for tau := 0.25; tau < 1e4; tau *= 2 {
		var mass float64
		n := 0
		for _, x := range t {
			if x.score <= tau {
				mass += x.p
				n++
			}
		}
		if n == len(t) {
			break
		}
		if mass > p && n >= minKeep {
			kept := t[:0]
			for _, x := range t {
				if x.score <= tau {
					kept = append(kept, x)
				}
			}
			return kept
		}
	}
	return t
}

// excludeTop is XTC over the sorted c: every candidate at least
// XTCThreshold likely but the last of them goes, where two or more are
// and MinKeep candidates stay.
func (s *Sampler) excludeTop(c []candidate) []candidate {
	pr := s.softmax(c)
	last := 0
	for i, x := range pr {
		if x.v < s.p.XTCThreshold {
			break
		}
		last = i
	}
	if last > 0 && len(c)-last >= s.p.MinKeep {
		return c[last:]
	}
	return c
}

// xtcDraw decides from the stream whether XTC runs for a pick.
func (s *Sampler) xtcDraw() bool { return s.rng.Float64() <= s.p.XTCProbability }

// xtcDist is distChain's distribution where XTC runs with probability
// q < 1: the chain's with XTC, times q, and without, times 1 − q, a
// token's two shares added (the order Sample walks is then neither's:
// Sample draws whether XTC runs first).
func (s *Sampler) xtcDist(dst []Prob, logits []float32, allowed []uint64) []Prob {
	q := s.p.XTCProbability
	start := len(dst)
	dst = s.chainDist(dst, logits, allowed, func() bool { return false }, 1-q)
	n := len(dst)
	if len(s.pos) < len(logits) {
		s.pos = make([]int32, len(logits))
		for i := range s.pos {
			s.pos[i] = -1
		}
	}
	for i := start; i < n; i++ {
		s.pos[dst[i].ID] = int32(i)
	}
	dst = s.chainDist(dst, logits, allowed, func() bool { return true }, q)
	out := n
	for _, x := range dst[n:] {
		if i := s.pos[x.ID]; i >= 0 {
			dst[i].P += x.P
		} else {
			dst[out] = x
			out++
		}
	}
	for _, x := range dst[start:n] {
		s.pos[x.ID] = -1
	}
	return dst[:out]
}

// dynamicTemperature is the temperature t becomes over the candidates c
// (two or more): from max(0, t − range) for a certain distribution to t
// + range for a uniform one, by the normalised entropy to the power
// DynaTempExponent.
func (s *Sampler) dynamicTemperature(c []candidate, t float64) float64 {
	lo, hi := max(0, t-s.p.DynaTempRange), t+s.p.DynaTempRange
	norm := entropy(s.softmax(c)) / detmath.Log(float64(len(c)))
	return lo + float64((hi-lo)*detmath.Pow(norm, s.p.DynaTempExponent))
}
