package sample

import (
	"fmt"
	"math"
)

// Adaptive-p (llama.cpp's adaptive_p sampler): the chain's last draw
// prefers tokens near a target probability rather than the likeliest.
// Each candidate the filters left (a logit of −Inf excepted) is given a
// new logit by how far its probability p lies from an adapted target a:
// 5 − 10·d²/(1+d), d = |p − a|/0.3, quadratic near a and linear in the
// tails; the draw is from their softmax. a is 2·target minus the
// exponential moving average (decay per token) of the picked tokens'
// probabilities before the transform, clamped to [0, 1], so a run of
// likely picks lowers it and a run of unlikely ones raises it. The
// average starts as if the target had always been met. Like mirostat
// it keeps state that each pick moves: a Sampler that picks with it must
// see the answer's tokens in order, each once.

// AdaptiveP is adaptive-p's parameters.
type AdaptiveP struct {
	// Target is the probability the picks should average, 0 … 1.
	Target float64
	// Decay is the moving average's decay per token, 0 … MaxAdaptiveDecay.
	Decay float64
}

// MaxAdaptiveDecay bounds AdaptiveP.Decay, as llama.cpp clamps it: the
// average's weight, 1/(1−decay), stays finite.
const MaxAdaptiveDecay = 0.99

// adaptive-p's transform (llama.cpp's constants).
const (
	adaptivePeak      = 5.0
	adaptiveSharpness = 10.0
	adaptiveInvWidth  = 1 / 0.3
)

func (a *AdaptiveP) validate() error {
	switch {
	case !(a.Target >= 0 && a.Target <= 1):
		return fmt.Errorf("sample: adaptive-p target %v is not in [0, 1]", a.Target)
	case !(a.Decay >= 0 && a.Decay <= MaxAdaptiveDecay):
		return fmt.Errorf("sample: adaptive-p decay %v is not in [0, %v]", a.Decay, MaxAdaptiveDecay)
	}
	return nil
}

// adaptiveState is adaptive-p's moving average: the picks' probabilities
// weighed by decay^age, and the weights' sum.
type adaptiveState struct {
	sum, weight float64
}

func newAdaptiveState(a *AdaptiveP) adaptiveState {
	w := 1 / (1 - a.Decay)
	return adaptiveState{sum: float64(a.Target * w), weight: w}
}

// adaptiveWeights weighs the chain's candidates c (logits, likeliest
// first) for adaptive-p's draw: it keeps each candidate's probability
// under the chain in s.adaptP and returns the candidates with their new
// weights, and the weights' sum. The candidates of −Inf logit (last,
// as c is sorted) are dropped: the transform leaves them out.
func (s *Sampler) adaptiveWeights(c []candidate) ([]candidate, float64) {
	n := len(c)
	for n > 1 && math.IsInf(c[n-1].v, -1) {
		n--
	}
	c = c[:n]
	sum := softmaxWeights(c, c)
	s.adaptP = s.adaptP[:0]
	for _, x := range c {
		s.adaptP = append(s.adaptP, x.v/sum)
	}
	target := s.AdaptiveTarget()
	top := math.Inf(-1)
	for i, p := range s.adaptP {
		d := float64(math.Abs(p-target) * adaptiveInvWidth)
		c[i].v = adaptivePeak - float64(adaptiveSharpness*float64(d*d))/(1+d)
		top = max(top, c[i].v)
	}
	return c, softmaxWeightsAt(c, c, top)
}

// adaptiveAccept moves the average by the pick at c's index i (of the
// last adaptiveWeights).
func (s *Sampler) adaptiveAccept(i int) {
	d := s.p.AdaptiveP.Decay
	s.adapt.sum = s.adaptP[i] + float64(d*s.adapt.sum)
	s.adapt.weight = 1 + float64(d*s.adapt.weight)
}

// AdaptiveTarget is adaptive-p's adapted target now (0 without it): what
// the next pick's transform peaks at.
func (s *Sampler) AdaptiveTarget() float64 {
	a := s.p.AdaptiveP
	if a == nil {
		return 0
	}
	return min(max(float64(2*a.Target)-s.adapt.sum/s.adapt.weight, 0), 1)
}

// weighChain weighs the chain's candidates c (logits, likeliest first)
// for the last draw: their softmax, or adaptive-p's weights where it is
// on. It returns the candidates weighed and the weights' sum.
func (s *Sampler) weighChain(c []candidate) ([]candidate, float64) {
	if s.p.AdaptiveP != nil {
		return s.adaptiveWeights(c)
	}
	return c, softmaxWeights(c, c)
}
