package sample

import (
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// Mirostat (Basu et al., 2021), as llama.cpp runs it: a sampler that
// steers each token's surprise, −log2 p, toward a target τ, in place of
// the filter chain. It truncates the distribution at a threshold μ that
// it learns as it goes: μ starts at 2τ, and after each token drawn moves
// by η times how far that token's surprise (under the truncated
// distribution) fell short of τ. Version 2 keeps the tokens whose surprise
// is at most μ (at least the likeliest). Version 1 estimates the
// distribution's Zipf exponent s from its 100 likeliest tokens and keeps
// the k likeliest that μ implies, k = (ε·2^μ / (1 − N^−ε))^(1/s), ε = s − 1,
// N the vocabulary. As in llama.cpp, only the logit biases and the
// temperature come before it: the penalties and the other filters do not
// run. Its state, μ, is the Sampler's, so a Sampler that picks with
// Mirostat must see the answer's tokens in order, each once (Sample); Dist
// reads μ without moving it.

// Mirostat is mirostat sampling's parameters.
type Mirostat struct {
	// Version is 1 or 2.
	Version int
	// Tau is the target surprise, in bits; Eta the rate μ learns at.
	Tau, Eta float64
}

// Bounds on Mirostat's parameters: a surprise past 100 bits is no
// token's in any vocabulary; η above 1 overshoots every step.
const (
	MaxMirostatTau = 100
	MaxMirostatEta = 1
)

// mirostatM is how many of the likeliest tokens version 1 estimates s
// from (llama.cpp's m).
const mirostatM = 100

func (m *Mirostat) validate() error {
	switch {
	case m.Version != 1 && m.Version != 2:
		return fmt.Errorf("sample: mirostat version %d (1 or 2)", m.Version)
	case !(m.Tau > 0 && m.Tau <= MaxMirostatTau):
		return fmt.Errorf("sample: mirostat tau %v is not in (0, %d]", m.Tau, MaxMirostatTau)
	case !(m.Eta > 0 && m.Eta <= MaxMirostatEta):
		return fmt.Errorf("sample: mirostat eta %v is not in (0, %d]", m.Eta, MaxMirostatEta)
	}
	return nil
}

// alone checks that p runs nothing mirostat replaces: it runs alone
// after the biases and the temperature, so a filter or penalty set
// beside it would do nothing.
func (p Params) mirostatAlone() error {
	switch {
	case p.Greedy():
		return fmt.Errorf("sample: mirostat draws; a temperature of 0 picks the likeliest token")
	case p.TopK != 0 || p.TopP != 0 && p.TopP != 1 || p.MinP != 0 || p.penalised() || p.extended() || p.DRY != nil || p.Order != "":
		return fmt.Errorf("sample: mirostat replaces the filters and penalties, which must be off beside it")
	}
	return nil
}

// mirostatKept is what mirostat draws from at the current μ: the tokens
// it keeps, likeliest first (ties to the lower id), each with its weight
// e^((v−top)/T), and their sum.
func (s *Sampler) mirostatKept(logits []float32, allowed []uint64) ([]candidate, float64) {
	c, top := s.candidates(s.cands[:0], logits, allowed, allowed == nil && len(s.p.LogitBias) == 0)
	t := s.p.Temperature
	if s.p.Mirostat.Version == 1 {
		c = s.mirostatTopK(c, len(logits), t)
		expWeights(c, c, top, t)
	} else {
		expWeights(c, c, top, t)
		var sum float64
		for _, x := range c {
			sum += x.v
		}
		// Surprise at most μ: p ≥ 2^−μ, a weight of at least sum·2^−μ.
		cut := float64(sum * detmath.Exp(float64(-s.mu*math.Ln2)))
		kept := c[:0]
		for _, x := range c {
			if x.v >= cut && x.v > 0 {
				kept = append(kept, x)
			}
		}
		if len(kept) == 0 {
			kept = coldest(c) // none is that likely: the likeliest alone
		}
		c = kept
		s.sortLikeliest(c)
	}
	var sum float64
	for _, x := range c {
		sum += x.v
	}
	return c, sum
}

// mirostatTopK is version 1's truncation of candidates c (logits v, n
// in the vocabulary, temperature t): the k likeliest, likeliest first,
// for the k that μ and the estimated Zipf exponent give.
func (s *Sampler) mirostatTopK(c []candidate, n int, t float64) []candidate {
	head := topK(c, min(mirostatM, len(c)))
	// ŝ = Σ tᵢbᵢ / Σ tᵢ², tᵢ = ln((i+2)/(i+1)), bᵢ = ln(pᵢ/pᵢ₊₁), which
	// is (vᵢ − vᵢ₊₁)/T: the logits' gaps, tempered.
	var tb, tt float64
	for i := 0; i+1 < len(head); i++ {
		ti := detmath.Log(float64(i+2) / float64(i+1))
		bi := (head[i].v - head[i+1].v) / t
		if math.IsInf(bi, 0) || bi != bi {
			break // a token with no mass: the estimate ends before it
		}
		tb += float64(ti * bi)
		tt += float64(ti * ti)
	}
	k := 1
	if shat := tb / tt; shat > 0 && !math.IsInf(shat, 0) {
		eps := shat - 1
		// ε·2^μ / (1 − N^−ε), whose limit at ε = 0 is 2^μ / ln N.
		x := float64(detmath.Exp(float64(s.mu*math.Ln2)) / detmath.Log(float64(n)))
		if eps != 0 {
			x = float64(eps*detmath.Exp(float64(s.mu*math.Ln2))) / float64(1-detmath.Exp(float64(-eps*detmath.Log(float64(n)))))
		}
		// x^(1/ŝ); past the candidates (or not a number), all of them.
		if x > 0 {
			if kf := detmath.Exp(detmath.Log(x) / shat); kf >= float64(len(c)) || kf != kf {
				k = len(c)
			} else if kf >= 1 {
				k = int(kf)
			}
		}
	}
	if k <= len(head) {
		return head[:k]
	}
	return topK(c, k)
}

// mirostatPick draws from what mirostat keeps and moves μ by the drawn
// token's surprise.
func (s *Sampler) mirostatPick(logits []float32, allowed []uint64) uint32 {
	c, sum := s.mirostatKept(logits, allowed)
	r := s.rng.Float64() * sum
	pick := c[len(c)-1] // r met the rounding of sum
	for _, x := range c {
		if r < x.v {
			pick = x
			break
		}
		r -= x.v
	}
	surprise := -detmath.Log(pick.v/sum) / math.Ln2
	m := s.p.Mirostat
	s.mu -= float64(m.Eta * float64(surprise-m.Tau))
	return pick.id
}

// mirostatDist is the distribution mirostatPick draws from, μ unmoved.
func (s *Sampler) mirostatDist(dst []Prob, logits []float32, allowed []uint64) []Prob {
	c, sum := s.mirostatKept(logits, allowed)
	for _, x := range c {
		dst = append(dst, Prob{x.id, x.v / sum})
	}
	return dst
}

// Mu is mirostat's threshold now, in bits (0 without mirostat): after n
// picks, what the next one truncates at.
func (s *Sampler) Mu() float64 { return s.mu }
