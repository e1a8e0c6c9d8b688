// Package sample picks the next token from a model's logits: greedy
// decoding, or sampling with temperature, top-k, top-p and min-p, after the
// repetition, frequency and presence penalties; and Stopper, which ends a
// generation at a stop string. A Sampler is deterministic: the same
// parameters (seed included), logits and history give the same tokens on
// every platform — its exponentials are its own (exp.go), the same bits
// everywhere, four or eight at a time on amd64 with AVX2 and FMA or
// AVX-512.
//
// The filters run in llama.cpp's default order: logit biases, penalties,
// DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC, then temperature
// (dynamic, where asked). So top-p and min-p see the untempered
// distribution, as in llama.cpp. Params.Order names another order, in
// llama.cpp's sampler letters (a request's samplers list), and may add
// llama.cpp's infill filter, which editors' fill-in-the-middle requests
// ask for (chain.go, infill.go, and llama.cpp's other filters in
// filters.go and dry.go); the default order, with those others off,
// keeps its own, faster path. Mirostat (mirostat.go) picks in place of
// the filters and penalties, after the biases and the temperature;
// adaptive-p (adaptivep.go) is the chain's last draw in place of the
// plain one.
package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// Params choose how tokens are picked. The zero value is greedy decoding
// with no penalties.
type Params struct {
	// Temperature divides the logits before sampling; 0 (or less) picks
	// the likeliest token.
	Temperature float64
	// TopK keeps the K likeliest tokens; 0 keeps all.
	TopK int
	// TopP keeps the likeliest tokens whose probabilities sum to at least
	// TopP; 0 or 1 keeps all.
	TopP float64
	// MinP drops tokens less likely than MinP times the likeliest; 0 keeps
	// all.
	MinP float64
	// RepeatPenalty divides a positive logit (multiplies a negative one)
	// of every token in the window (llama.cpp's repeat_penalty); 0 or 1
	// is off.
	RepeatPenalty float64
	// FrequencyPenalty and PresencePenalty subtract count·frequency and,
	// once, presence from the logit of each token the window holds, count
	// being how often it occurs there (OpenAI's penalties); 0 is off.
	FrequencyPenalty, PresencePenalty float64
	// PenaltyWindow is how many of the latest history tokens the penalties
	// look at; 0 means all of them.
	PenaltyWindow int
	// PenaltyContext, if set, is the tokens before the history (the
	// prompt) that the penalties count too: the window then spans both,
	// the last PenaltyWindow of context and history together (all of
	// both where PenaltyWindow is 0), as llama.cpp's penalty_last_n
	// does. The sampler reads it and does not change it.
	PenaltyContext []uint32
	// LogitBias adds a constant to the logits of the tokens it names, at
	// most once each, before the penalties (OpenAI's and llama.cpp's
	// logit_bias); greedy picks see it too.
	LogitBias []Bias
	// Seed fixes the random draws.
	Seed uint64
	// TypicalP keeps the locally typical tokens (llama.cpp's typ_p):
	// those whose surprise, −ln p, is nearest the distribution's entropy,
	// as many as reach TypicalP of the mass. 0 or 1 is off.
	TypicalP float64
	// TopNSigma keeps the tokens whose logit is within TopNSigma standard
	// deviations of the largest (the logits' deviation over the tokens
	// left); 0 or less is off.
	TopNSigma float64
	// XTCProbability is how often XTC (exclude top choices) runs: with
	// this probability, drawn from the sampler's stream, every token at
	// least XTCThreshold likely but the least likely of them is dropped.
	// 0 is off, and so is a threshold above 0.5 (at most one token is
	// that likely: nothing would go).
	XTCProbability, XTCThreshold float64
	// DynaTempRange makes the temperature follow the distribution's
	// entropy: T − range for a certain one to T + range for a uniform
	// one (never below 0), by the normalised entropy to the power
	// DynaTempExponent (llama.cpp's dynatemp). 0 is off.
	DynaTempRange, DynaTempExponent float64
	// MinKeep is the fewest tokens top-p, min-p, typical-p and XTC leave
	// (llama.cpp's min_keep); 0 or 1 changes nothing.
	MinKeep int
	// DRY is llama.cpp's DRY penalty, nil for none. Like the penalties
	// it changes greedy picks too.
	DRY *DRY
	// Mirostat, where set, picks in place of the penalties and the
	// filters, which must be off (mirostat.go); nil for none.
	Mirostat *Mirostat
	// AdaptiveP, where set, is the chain's last draw in place of the
	// plain one, whatever the order (adaptivep.go); nil for none.
	AdaptiveP *AdaptiveP
	// MinTokens holds the end-of-generation tokens EOG back while the
	// history (the answer so far) is shorter (vLLM's min_tokens): they
	// are left out of the tokens allowed, greedy picks too, unless
	// nothing else is allowed (a grammar that must end ends).
	MinTokens int
	EOG       []uint32
	// Order is the filters' order, in llama.cpp's sampler letters: 'e'
	// penalties, 'd' DRY, 's' top-n-sigma, 'k' top-k, 'y' typical-p, 'p' top-p,
	// 'm' min-p, 'x' XTC, 't' temperature, 'i' infill. "" is the default
	// chain, DefaultOrder. Logit biases always come first. A filter Order
	// leaves out does not run (its parameter does nothing), as in
	// llama.cpp.
	Order string
	// Vocab tells the infill filter which tokens end a generation and
	// each token's text; required when Order holds 'i'.
	Vocab Vocab
}

// Bias is a constant added to one token's logit.
type Bias struct {
	Token uint32
	Bias  float64
}

// Greedy reports whether p picks the likeliest token (after biases and
// penalties).
func (p Params) Greedy() bool { return p.Temperature <= 0 }

// ArgMax reports whether p picks the likeliest token of the logits as
// they are: greedy, with no bias, no penalty the order runs, and no
// infill (which may pick another). Such a pick needs no Sampler; a
// caller may find it where the logits are (model.Session.EvalArgMax).
func (p Params) ArgMax() bool {
	o := p.order()
	return p.Greedy() && !strings.Contains(o, "i") && !(p.penalised() && strings.Contains(o, "e")) && len(p.LogitBias) == 0 &&
		!(p.DRY != nil && strings.Contains(o, "d")) && p.MinTokens == 0
}

// penalised reports whether any penalty is on.
func (p Params) penalised() bool {
	return (p.RepeatPenalty != 0 && p.RepeatPenalty != 1) || p.FrequencyPenalty != 0 || p.PresencePenalty != 0
}

// Stateful reports whether the picks move state of the sampler's own
// (mirostat's μ, adaptive-p's average): such a Sampler must pick the
// answer's tokens in order, each once, so it cannot verify speculative
// drafts.
func (p Params) Stateful() bool { return p.Mirostat != nil || p.AdaptiveP != nil }

// Validate checks the parameters' ranges.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return fmt.Errorf("sample: temperature %v", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top_k %d", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("sample: top_p %v is not in [0, 1]", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("sample: min_p %v is not in [0, 1]", p.MinP)
	case !(p.RepeatPenalty >= 0) || math.IsInf(p.RepeatPenalty, 0):
		return fmt.Errorf("sample: repeat penalty %v", p.RepeatPenalty)
	case math.IsNaN(p.FrequencyPenalty) || math.IsInf(p.FrequencyPenalty, 0) ||
		math.IsNaN(p.PresencePenalty) || math.IsInf(p.PresencePenalty, 0):
		return fmt.Errorf("sample: penalties %v, %v", p.FrequencyPenalty, p.PresencePenalty)
	case p.PenaltyWindow < 0:
		return fmt.Errorf("sample: penalty window %d", p.PenaltyWindow)
	case !(p.TypicalP >= 0 && p.TypicalP <= 1):
		return fmt.Errorf("sample: typical_p %v is not in [0, 1]", p.TypicalP)
	case math.IsNaN(p.TopNSigma) || math.IsInf(p.TopNSigma, 0):
		return fmt.Errorf("sample: top_n_sigma %v", p.TopNSigma)
	case !(p.XTCProbability >= 0 && p.XTCProbability <= 1) || !(p.XTCThreshold >= 0 && p.XTCThreshold <= 1):
		return fmt.Errorf("sample: xtc probability %v and threshold %v are not in [0, 1]", p.XTCProbability, p.XTCThreshold)
	case !(p.DynaTempRange >= 0) || math.IsInf(p.DynaTempRange, 0) || !(p.DynaTempExponent >= 0) || math.IsInf(p.DynaTempExponent, 0):
		return fmt.Errorf("sample: dynatemp range %v and exponent %v", p.DynaTempRange, p.DynaTempExponent)
	case p.MinKeep < 0:
		return fmt.Errorf("sample: min_keep %d", p.MinKeep)
	case p.MinTokens < 0 || p.MinTokens > 0 && len(p.EOG) == 0:
		return fmt.Errorf("sample: min_tokens %d with %d end tokens to hold back", p.MinTokens, len(p.EOG))
	case p.MinTokens > 0 && strings.Contains(p.Order, "i"):
		return fmt.Errorf("sample: min_tokens beside the infill filter, which falls back to the end of turn whatever is allowed")
	}
	if p.DRY != nil {
		if err := p.DRY.validate(); err != nil {
			return err
		}
	}
	if p.AdaptiveP != nil {
		if err := p.AdaptiveP.validate(); err != nil {
			return err
		}
	}
	if p.Mirostat != nil {
		if err := p.Mirostat.validate(); err != nil {
			return err
		}
		if err := p.mirostatAlone(); err != nil {
			return err
		}
	}
	seen := make(map[uint32]bool, len(p.LogitBias))
	for _, b := range p.LogitBias {
		if math.IsNaN(b.Bias) || math.IsInf(b.Bias, 0) {
			return fmt.Errorf("sample: logit bias %v for token %d", b.Bias, b.Token)
		}
		if seen[b.Token] {
			return fmt.Errorf("sample: two logit biases for token %d", b.Token)
		}
		seen[b.Token] = true
	}
	return p.validOrder()
}

// candidate is a token and its (penalised) logit, or later its weight.
type candidate struct {
	id uint32
	v  float64
}

// Sampler picks tokens under one set of parameters. It keeps its random
// stream and scratch between calls; it is not safe for concurrent use.
type Sampler struct {
	p      Params
	rng    *rand.Rand
	cands  []candidate
	exps   []candidate // nucleus's scratch: the candidates' e^(v−top)
	radix  []keyed     // sortLikeliest's scratch
	pen    []float64   // greedy's scratch: the penalised logits
	counts map[uint32]int

	// generic: the filters run on chain's path: the order is not the
	// default's, or a filter the fast path lacks is on (tests set it to
	// put the default order there too); infills: it holds 'i';
	// penalises: it holds 'e'.
	generic, infills, penalises bool
	pos                         []int32       // xtcDist's scratch: a token's place in the mixture, by id
	typ                         []typicalCand // typical's scratch

	// dries: DRY is on and the order runs it; dryPen each token's DRY
	// penalty after the history counted, drySeq and dryZ its scratch.
	dries  bool
	dryPen map[uint32]float64
	drySeq []uint32
	dryZ   []int
	probs  []float32 // infill's scratch: the candidates' probabilities,
	eog    []bool    // whether each ends a generation,
	pieces []string  // and its text

	mu float64 // mirostat's threshold, in bits

	adapt  adaptiveState // adaptive-p's moving average
	adaptP []float64     // and its scratch: the candidates' probabilities before its transform

	held []uint64 // minTokens's scratch: the tokens allowed less the end tokens
}

// New returns a Sampler; p must be valid (see Params.Validate).
func New(p Params) *Sampler {
	o := p.order()
	var mu float64
	if p.Mirostat != nil {
		mu = 2 * p.Mirostat.Tau
	}
	var adapt adaptiveState
	if p.AdaptiveP != nil {
		adapt = newAdaptiveState(p.AdaptiveP)
	}
	return &Sampler{
		mu:        mu,
		adapt:     adapt,
		p:         p,
		rng:       rand.New(rand.NewPCG(p.Seed, 0x6d65736873616d70)), // "meshsamp"
		counts:    map[uint32]int{},
		generic:   p.extended() || fastOrder(o) != "ekpmt",
		infills:   strings.Contains(o, "i"),
		penalises: strings.Contains(o, "e"),
		dries:     p.DRY != nil && strings.Contains(o, "d"),
		dryPen:    map[uint32]float64{},
	}
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// Sample picks the token that follows, given the logits and the tokens so
// far that the penalties look at (typically the tokens generated). It
// does not modify logits.
func (s *Sampler) Sample(logits []float32, history []uint32) uint32 {
	return s.SampleAllowed(logits, history, nil)
}

// SampleAllowed is Sample restricted to the tokens a bitset allows (bit
// id%64 of word id/64; nil allows all), as grammar-constrained decoding
// needs: the others are dropped before the penalties' and the filters'
// choices, so top-k, top-p and min-p pick among the allowed tokens. The
// bitset must allow at least one token below len(logits). (The infill
// filter's fallback, the vocabulary's EOT, is its pick whatever the
// bitset says, as in llama.cpp: a caller that masks should allow EOT or
// leave infill out.)
func (s *Sampler) SampleAllowed(logits []float32, history []uint32, allowed []uint64) uint32 {
	allowed = s.holdEnds(len(logits), history, allowed)
	if s.p.Mirostat != nil {
		return s.mirostatPick(logits, allowed) // no penalty runs beside it
	}
	s.countHistory(history)
	if s.generic {
		return s.sampleChain(logits, allowed)
	}
	if s.p.Greedy() {
		return s.greedy(logits, allowed)
	}
	c, sum := s.weights(logits, allowed)
	r := s.rng.Float64() * sum
	for _, x := range c {
		if r < x.v {
			return x.id
		}
		r -= x.v
	}
	return c[len(c)-1].id // r met the rounding of sum
}

// Prob is a token and its probability.
type Prob struct {
	ID uint32
	P  float64
}

// Dist is the distribution Sample draws from, given the same logits and
// history: after the filters (penalties, top-k, top-p, min-p,
// temperature, infill) in the sampler's order, as
// (token, probability) pairs in the order Sample walks them, the tokens
// with no mass left out. Greedy parameters give their pick with
// probability 1. It appends to dst and draws nothing from the stream.
// (Speculative decoding's rejection rule needs the distributions, not a
// draw.)
func (s *Sampler) Dist(dst []Prob, logits []float32, history []uint32) []Prob {
	return s.DistAllowed(dst, logits, history, nil)
}

// DistAllowed is Dist restricted as SampleAllowed is: the distribution
// SampleAllowed draws from, over the tokens allowed (nil: all).
func (s *Sampler) DistAllowed(dst []Prob, logits []float32, history []uint32, allowed []uint64) []Prob {
	allowed = s.holdEnds(len(logits), history, allowed)
	if s.p.Mirostat != nil {
		return s.mirostatDist(dst, logits, allowed)
	}
	s.countHistory(history)
	if s.generic {
		return s.distChain(dst, logits, allowed)
	}
	if s.p.Greedy() {
		return append(dst, Prob{s.greedy(logits, allowed), 1})
	}
	c, sum := s.weights(logits, allowed)
	for _, x := range c {
		dst = append(dst, Prob{x.id, x.v / sum})
	}
	return dst
}

// holdEnds is allowed (nil: all n tokens) less the end tokens while the
// history is shorter than MinTokens; allowed as it was where that leaves
// none.
func (s *Sampler) holdEnds(n int, history []uint32, allowed []uint64) []uint64 {
	if len(history) >= s.p.MinTokens {
		return allowed
	}
	words := (n + 63) / 64
	s.held = slices.Grow(s.held[:0], words)[:words]
	if allowed != nil {
		clear(s.held[copy(s.held, allowed):]) // past allowed's words, nothing is
	} else {
		for i := range s.held {
			s.held[i] = ^uint64(0)
		}
		if r := n % 64; r != 0 {
			s.held[words-1] = 1<<r - 1
		}
	}
	for _, id := range s.p.EOG {
		if int(id) < n {
			s.held[id/64] &^= 1 << (id % 64)
		}
	}
	for _, w := range s.held {
		if w != 0 {
			return s.held
		}
	}
	return allowed
}

// Float64 is the next draw in [0, 1) of the sampler's seeded stream (the
// stream Sample draws from).
func (s *Sampler) Float64() float64 { return s.rng.Float64() }

// Draw picks a token from d (probabilities that sum to about 1, walked
// in order) with one draw of the sampler's stream.
func (s *Sampler) Draw(d []Prob) uint32 {
	var sum float64
	for _, x := range d {
		sum += x.P
	}
	r := s.rng.Float64() * sum
	for _, x := range d {
		if r < x.P {
			return x.ID
		}
		r -= x.P
	}
	return d[len(d)-1].ID
}

// weights runs the filters and the temperature over the (penalised)
// logits, returning the candidates left with their weights, and the sum
// of the weights. The history must be counted.
func (s *Sampler) weights(logits []float32, allowed []uint64) ([]candidate, float64) {
	c := s.cands[:0]
	plain := allowed == nil && len(s.counts) == 0 && len(s.p.LogitBias) == 0
	var top float64
	if h, ok := s.topKPlain(logits, plain); ok {
		c, top = h, h[0].v
		s.cands = c
	} else {
		c, top = s.candidates(c, logits, allowed, plain)
	}
	if p := s.p.TopP; p > 0 && p < 1 {
		c = s.nucleus(c, top, p)
	}
	if m := s.p.MinP; m > 0 {
		// p_i ≥ m·p_top ⇔ v_i − top ≥ ln m; the likeliest always stays.
		cut := detmath.Log(m)
		kept := c[:0]
		for _, x := range c {
			if x.v-top >= cut {
				kept = append(kept, x)
			}
		}
		c = kept
	}

	// Temperature: the softmax weights of what is left, in the order the
	// filters left the candidates (by id, or likeliest first).
	expWeights(c, c, top, s.p.Temperature)
	var sum float64
	for _, x := range c {
		sum += x.v
	}
	return c, sum
}

// topKPlain is the top-k candidates straight from the logits, where
// plain (no mask, bias or penalty) and top-k bounds them: a candidate
// for every token of the vocabulary, then a heap over them, had been
// most of a sampled token's time. ok is false where it does not apply.
func (s *Sampler) topKPlain(logits []float32, plain bool) ([]candidate, bool) {
	if k := s.p.TopK; plain && k > 0 && k < len(logits) {
		return topKLogits(logits, k, s.cands)
	}
	return nil, false
}

// candidates are the biased and penalised logits of the tokens allowed,
// their top-k where it runs, and their largest (see weights); plain: no
// mask, bias or penalty.
func (s *Sampler) candidates(c []candidate, logits []float32, allowed []uint64, plain bool) ([]candidate, float64) {
	// top is the largest v, found by a comparison a candidate, where
	// max's handling of NaN and signed zeros had been most of a pick's
	// time (a top of −0 where max gives +0 changes nothing: v − top and
	// every test against it are the same); a NaN is only noted, and
	// limitLogits settles it with an infinite top.
	top, nan := math.Inf(-1), false
	switch {
	case plain:
		// No mask, bias or penalty: the logits as they are, without a
		// lookup per token (most of a sampled token's time over a large
		// vocabulary).
		c = slices.Grow(c, len(logits))
		for id, l := range logits {
			v := float64(l)
			c = append(c, candidate{uint32(id), v})
			if v > top {
				top = v
			} else if v != v {
				nan = true
			}
		}
	default:
		for id, l := range logits {
			if allowed != nil && !has(allowed, id) {
				continue
			}
			c = append(c, candidate{uint32(id), float64(l)})
		}
		// The biases and penalties touch the tokens they name and the
		// window holds, found among the candidates (in id order) by id:
		// a map lookup for every token of the vocabulary had cost five
		// times the rest of a pick. Biases first, as llama.cpp's chain
		// has them: a penalty scales the biased logit.
		for _, b := range s.p.LogitBias {
			if i, ok := find(c, b.Token, allowed); ok {
				c[i].v += b.Bias
			}
		}
		for id := range s.counts {
			if i, ok := find(c, id, allowed); ok {
				c[i].v = s.penalised(id, c[i].v)
			}
		}
		for _, x := range c {
			if x.v > top {
				top = x.v
			} else if x.v != x.v {
				nan = true
			}
		}
	}
	if nan || math.IsInf(top, 0) {
		top = limitLogits(c)
	}
	s.cands = c
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = topK(c, k)
	}
	return c, top
}

// limitLogits makes candidates whose largest logit is not a finite
// number weighable, as the chain does (chain, softmaxWeights): a NaN
// counts as −Inf, and an infinite top leaves the candidates equal to it
// at 0 and the others at −Inf, the limit the softmax tends to, where
// e^(v−top) is NaN (every allowed token −Inf, or a +Inf bias). It
// returns the new top. (Left as they were, the NaN weights had made
// top-p and min-p keep nothing, and the pick index c[−1].)
func limitLogits(c []candidate) float64 {
	top := math.Inf(-1)
	for i, x := range c {
		if x.v != x.v {
			c[i].v = math.Inf(-1)
		} else if x.v > top {
			top = x.v
		}
	}
	if !math.IsInf(top, 0) {
		return top
	}
	for i, x := range c {
		c[i].v = math.Inf(-1)
		if x.v == top {
			c[i].v = 0
		}
	}
	return 0
}

// find is the index of token id among candidates c, which hold every
// token in id order where allowed is nil, and the allowed ones otherwise.
func find(c []candidate, id uint32, allowed []uint64) (int, bool) {
	if allowed == nil {
		return int(id), int(id) < len(c)
	}
	return slices.BinarySearchFunc(c, id, func(x candidate, id uint32) int { return cmp.Compare(x.id, id) })
}

// before orders candidates likeliest first, then by id, a total order.
func before(a, b candidate) int {
	if a.v != b.v {
		return cmp.Compare(b.v, a.v)
	}
	return cmp.Compare(a.id, b.id)
}

// beforeNumber is before for candidates none of which is NaN (a nucleus
// head's: a NaN passes no threshold), by plain comparisons, which order
// numbers as cmp.Compare does (−0 and +0 alike) and cost less.
func beforeNumber(a, b candidate) int {
	switch {
	case a.v > b.v:
		return -1
	case a.v < b.v:
		return 1
	}
	return cmp.Compare(a.id, b.id)
}

// topK returns the k likeliest of c, likeliest first, selecting them with
// a heap rather than sorting all of c. c holds no NaN (the callers have
// made them −Inf), so plain comparisons order it as before does, and
// cost a fraction of cmp.Compare's.
func topK(c []candidate, k int) []candidate {
	h := c[:k]
	heapify(h)
	for _, x := range c[k:] {
		if worse(h[0], x) {
			h[0] = x
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, beforeNumber)
	return h
}

// topKLogits is topK over the logits as candidates in id order, without
// making one for every token: the k likeliest, likeliest first, in buf's
// memory. ok is false, and nothing chosen, where a logit is not finite
// (NaN and the infinities are weighed on the general path). A token
// later in the scan never ties its way in: ties go to the lower id,
// which every token in the heap has.
func topKLogits(logits []float32, k int, buf []candidate) (h []candidate, ok bool) {
	h = slices.Grow(buf[:0], k)
	for id, l := range logits[:k] {
		if l-l != 0 { // NaN or ±Inf
			return nil, false
		}
		h = append(h, candidate{uint32(id), float64(l)})
	}
	heapify(h)
	for id := k; id < len(logits); id++ {
		l := logits[id]
		if l-l != 0 {
			return nil, false
		}
		if v := float64(l); v > h[0].v {
			h[0] = candidate{uint32(id), v}
			siftDown(h, 0)
		}
	}
	slices.SortFunc(h, beforeNumber)
	return h, true
}

// worse reports whether a is less likely than b under before's order,
// for candidates that are not NaN.
func worse(a, b candidate) bool { return a.v < b.v || a.v == b.v && a.id > b.id }

// heapify makes h a min-heap under worse: its least likely at h[0].
func heapify(h []candidate) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
}

// siftDown moves h[i] down the heap to its place.
func siftDown(h []candidate, i int) {
	for {
		l, m := 2*i+1, i
		if l < len(h) && worse(h[l], h[m]) {
			m = l
		}
		if r := l + 1; r < len(h) && worse(h[r], h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// nucleus returns the likeliest candidates whose probabilities (the
// softmax over c) first reach p, likeliest first. Only the candidates
// above a probability threshold are sorted: the threshold starts high and
// drops until what is above it holds mass p, so the sorted prefix is the
// one a full sort would give. Each candidate's e^(v−top) is found once
// (expWeights), in e, which moves with it.
func (s *Sampler) nucleus(c []candidate, top, p float64) []candidate {
	s.exps = slices.Grow(s.exps[:0], len(c))[:len(c)]
	e := s.exps
	expWeights(e, c, top, 1)
	var sum float64
	for _, x := range e {
		sum += x.v
	}
	for lnTau := -4.0; ; lnTau -= 8 {
		// Move the candidates with v − top ≥ lnTau to the front.
		n, mass := 0, 0.0
		for i, x := range c {
			if x.v-top >= lnTau {
				c[n], c[i] = c[i], c[n]
				e[n], e[i] = e[i], e[n]
				mass += e[n].v
				n++
			}
		}
		if mass/sum < p && n < len(c) && lnTau > -800 { // below e^-745 nothing has mass
			continue
		}
		n = narrow(c[:n], e, top, lnTau, mass, sum, p)
		head := c[:n]
		s.sortLikeliest(head)
		// The head's exponentials again, in its order now (e's bits are
		// detmath.Exp's): the walk sums them as it goes.
		e = e[:n]
		expWeights(e, head, top, 1)
		var cum float64
		for i, x := range e {
			cum += x.v / sum
			if cum >= p {
				return head[:i+1]
			}
		}
		return head
	}
}

// nucleusMargin is how far past p the mass above a narrowed threshold
// must be: far more than the rounding by which the sorted walk's running
// sum can differ from it (n·ε for n candidates), so that the walk still
// reaches p inside the head and stops where it would in a larger one.
const nucleusMargin = 1e-6

// narrow raises the threshold lnTau of a head of candidates (c, their
// exponentials e beside them) holding mass, of sum in all, as far as what
// stays above it still holds p and the margin: a flat distribution's
// first threshold can leave most of a large vocabulary to sort. One pass
// weighs the candidates into narrowBuckets steps of the 8 above lnTau
// (those higher, the top step's), the steps' masses give the highest
// step edge that keeps enough, and a second pass moves the candidates at
// or above it to the front. It returns how many there are; the sorted
// walk over them stops where it would over the whole head.
func narrow(c, e []candidate, top, lnTau, mass, sum, p float64) int {
	n := len(c)
	if mass/sum < p+nucleusMargin {
		return n
	}
	const scale = narrowBuckets / 8
	step := func(v float64) int {
		return min(int((v-top-lnTau)*scale), narrowBuckets-1) // v − top ≥ lnTau: never below 0
	}
	var masses [narrowBuckets]float64
	for i, x := range c {
		masses[step(x.v)] += e[i].v
	}
	want := (p + nucleusMargin) * sum
	edge, above := 0, 0.0
	for k := narrowBuckets - 1; k >= 0; k-- {
		if above += masses[k]; above >= want {
			edge = k
			break
		}
	}
	if edge == 0 {
		return n
	}
	kept := 0
	for i, x := range c {
		if step(x.v) >= edge {
			c[kept], c[i] = c[i], c[kept]
			e[kept], e[i] = e[i], e[kept]
			kept++
		}
	}
	return kept
}

// narrowBuckets is how finely narrow weighs the 8 above a threshold: a
// step of 1/128 in the logit, whose candidates are all a sort would add.
const narrowBuckets = 1024

// greedy is the argmax of the biased and penalised logits, the lowest id
// on a tie (as llama.cpp's greedy takes the first); a NaN loses to every
// number, and where none is above −Inf the pick is the first allowed
// token, as backend.ArgMax's is the first.
func (s *Sampler) greedy(logits []float32, allowed []uint64) uint32 {
	best, bestV := -1, math.Inf(-1)
	if len(s.counts) == 0 && len(s.p.LogitBias) == 0 {
		for id, l := range logits {
			if allowed != nil && !has(allowed, id) {
				continue
			}
			if best < 0 {
				best = id
			}
			if v := float64(l); v > bestV {
				best, bestV = id, v
			}
		}
		return uint32(max(best, 0))
	}
	// The biased and penalised logits: the tokens named and the window's
	// changed in a copy, not a map lookup for every token (see weights).
	s.pen = slices.Grow(s.pen[:0], len(logits))[:len(logits)]
	for id, l := range logits {
		s.pen[id] = float64(l)
	}
	for _, b := range s.p.LogitBias {
		if int(b.Token) < len(s.pen) {
			s.pen[b.Token] += b.Bias
		}
	}
	for id := range s.counts {
		if int(id) < len(s.pen) {
			s.pen[id] = s.penalised(id, s.pen[id])
		}
	}
	for id, v := range s.pen {
		if allowed != nil && !has(allowed, id) {
			continue
		}
		if best < 0 {
			best = id
		}
		if v > bestV {
			best, bestV = id, v
		}
	}
	return uint32(max(best, 0))
}

// has reports whether bitset allowed holds id.
func has(allowed []uint64, id int) bool {
	return id>>6 < len(allowed) && allowed[id>>6]&(1<<(id&63)) != 0
}

// countHistory counts the tokens in the penalty window, and finds the
// DRY penalties.
func (s *Sampler) countHistory(history []uint32) {
	s.dryPenalties(history)
	clear(s.counts)
	p := &s.p
	if !p.penalised() || !s.penalises {
		return
	}
	ctx := p.PenaltyContext
	if w := p.PenaltyWindow; w > 0 {
		if len(history) >= w {
			history, ctx = history[len(history)-w:], nil
		} else if rest := w - len(history); len(ctx) > rest {
			ctx = ctx[len(ctx)-rest:]
		}
	}
	for _, t := range ctx {
		s.counts[t]++
	}
	for _, t := range history {
		s.counts[t]++
	}
}

// penalised applies the penalties to token id's logit l.
func (s *Sampler) penalised(id uint32, l float64) float64 {
	n, ok := s.counts[id]
	if !ok {
		return l
	}
	if rp := s.p.RepeatPenalty; rp != 0 && rp != 1 {
		if l > 0 {
			l /= rp
		} else {
			l *= rp
		}
	}
	return l - float64(float64(n)*s.p.FrequencyPenalty) - s.p.PresencePenalty
}
