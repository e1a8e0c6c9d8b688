package api

import (
	"fmt"
	"math"
	"strings"

	"github.com/meshnode/meshnode/node/receipt"
)

// llama.cpp's other sampling filters, which llama-server's clients send
// on every endpoint (its web UI, SillyTavern's text completion presets)
// and Ollama's options name in part (typical_p): DRY, locally typical
// sampling, top-n-sigma, XTC, the dynamic temperature and min_keep. DRY
// changes logits, as the penalties do, greedy answers' too; the others
// weigh a sampled answer's draws, so a greedy request (temperature 0,
// meshnode's default) refuses them turned on, where llama.cpp would let
// some change its pick. Turned off they ask nothing. They are read into
// Generation and sealed as the request's sampling (receipt.Sampling's
// typical_p_e6 …, dry_multiplier_e6 …).

// llamaFilterFields are the filters' fields.
type llamaFilterFields struct {
	TypicalP         *float64 `json:"typical_p"`
	TypP             *float64 `json:"typ_p"` // the sampler's name in llama.cpp, which some clients send as a field
	TopNSigma        *float64 `json:"top_n_sigma"`
	XTCProbability   *float64 `json:"xtc_probability"`
	XTCThreshold     *float64 `json:"xtc_threshold"`
	DynaTempRange    *float64 `json:"dynatemp_range"`
	DynaTempExponent *float64 `json:"dynatemp_exponent"`
	MinKeep          *int     `json:"min_keep"`
	// DRY, which changes greedy answers too, as the penalties do.
	DRYMultiplier    *float64 `json:"dry_multiplier"`
	DRYBase          *float64 `json:"dry_base"`
	DRYAllowedLength *int     `json:"dry_allowed_length"`
	DRYLastN         *int     `json:"dry_penalty_last_n"`
	DRYBreakers      []string `json:"dry_sequence_breakers"`
	// Mirostat, which picks in place of the filters and the penalties
	// (gguf/sample's Mirostat): its version (0 off, 1 or 2) and, beside
	// it, its target surprise and learning rate.
	Mirostat    *int     `json:"mirostat"`
	MirostatTau *float64 `json:"mirostat_tau"`
	MirostatEta *float64 `json:"mirostat_eta"`
	// Adaptive-p, the chain's last draw where samplers lists adaptive_p
	// (gguf/sample's AdaptiveP): its target (negative off) and its
	// moving average's decay.
	AdaptiveTarget *float64 `json:"adaptive_target"`
	AdaptiveDecay  *float64 `json:"adaptive_decay"`
	// IgnoreEOS bans the model's end-of-generation tokens, as llama.cpp
	// does (Generation.IgnoreEOS).
	IgnoreEOS *bool `json:"ignore_eos"`
	// MinTokens, vLLM's, holds them back until the answer has that many
	// tokens (Generation.MinTokens).
	MinTokens *int `json:"min_tokens"`
}

// Bounds on the filters' fields (receipt.Sampling's).
const (
	maxTopNSigma        = receipt.MaxTopNSigmaE6 / 1e6
	maxDynaTempRange    = receipt.MaxDynaTempRangeE6 / 1e6
	maxDynaTempExponent = receipt.MaxDynaTempExponentE6 / 1e6
	maxMinKeep          = receipt.MaxMinKeep
	maxDRYMultiplier    = receipt.MaxDRYMultiplierE6 / 1e6
	maxDRYBase          = receipt.MaxDRYBaseE6 / 1e6
	maxMirostatTau      = receipt.MaxMirostatTauE6 / 1e6
	maxAdaptiveDecay    = receipt.MaxAdaptiveDecayE6 / 1e6
)

// llama.cpp's defaults where a filter is on and its companion is not
// given.
const (
	llamaXTCThreshold     = 0.1
	llamaDynaTempExponent = 1.0
	llamaDRYBase          = 1.75
	llamaDRYAllowedLength = 2
	llamaDRYLastN         = 64
	llamaMirostatTau      = 5.0
	llamaMirostatEta      = 0.1
	llamaAdaptiveTarget   = -1.0 // off
	llamaAdaptiveDecay    = 0.9
)

// typical is typical_p or typ_p, whichever the request gives.
func (f *llamaFilterFields) typical() (*float64, string, error) {
	switch {
	case f.TypicalP != nil && f.TypP != nil && *f.TypicalP != *f.TypP:
		return nil, "", badRequest("typ_p", "typical_p %v and typ_p %v disagree: send one", *f.TypicalP, *f.TypP)
	case f.TypP != nil:
		return f.TypP, "typ_p", nil
	}
	return f.TypicalP, "typical_p", nil
}

// apply checks the filters' fields and copies them into g, whose
// temperature is read.
func (f *llamaFilterFields) apply(g *Generation) error {
	typ, typName, err := f.typical()
	if err != nil {
		return err
	}
	for _, c := range []error{
		inRange(typName, typ, math.SmallestNonzeroFloat64, 1, "above 0 and at most 1 (1 is off)"),
		inRange("top_n_sigma", f.TopNSigma, math.Inf(-1), maxTopNSigma, "at most 1000 (0 or less is off)"),
		inRange("xtc_probability", f.XTCProbability, 0, 1, "between 0 (off) and 1"),
		inRange("xtc_threshold", f.XTCThreshold, 0, 1, "between 0 and 1 (above 0.5 XTC drops nothing)"),
		inRange("dynatemp_range", f.DynaTempRange, 0, maxDynaTempRange, "between 0 (off) and 2"),
		inRange("dynatemp_exponent", f.DynaTempExponent, math.SmallestNonzeroFloat64, maxDynaTempExponent, "above 0 and at most 100"),
	} {
		if c != nil {
			return c
		}
	}
	if k := f.MinKeep; k != nil && (*k < 0 || *k > maxMinKeep) {
		return badRequest("min_keep", "min_keep must be from 0 to %d, got %d", maxMinKeep, *k)
	}
	if typ != nil {
		g.TypicalP = *typ
	}
	if f.TopNSigma != nil && *f.TopNSigma > 0 {
		g.TopNSigma = *f.TopNSigma
	}
	if f.XTCProbability != nil && *f.XTCProbability > 0 {
		g.XTCProbability, g.XTCThreshold = *f.XTCProbability, llamaXTCThreshold
		if f.XTCThreshold != nil {
			g.XTCThreshold = *f.XTCThreshold
		}
		if g.XTCThreshold > 0.5 {
			// At most one token is that likely: XTC drops nothing.
			g.XTCProbability, g.XTCThreshold = 0, 0
		}
	}
	if f.DynaTempRange != nil && *f.DynaTempRange > 0 {
		g.DynaTempRange, g.DynaTempExponent = *f.DynaTempRange, llamaDynaTempExponent
		if f.DynaTempExponent != nil {
			g.DynaTempExponent = *f.DynaTempExponent
		}
	}
	if f.MinKeep != nil && *f.MinKeep > 1 {
		g.MinKeep = *f.MinKeep
	}
	if err := f.applyDRY(g); err != nil {
		return err
	}
	if err := f.applyMirostat(g); err != nil {
		return err
	}
	if err := f.applyAdaptive(g); err != nil {
		return err
	}
	g.IgnoreEOS = f.IgnoreEOS != nil && *f.IgnoreEOS
	if n := f.MinTokens; n != nil {
		if *n < 0 || *n > math.MaxInt32 {
			return badRequest("min_tokens", "min_tokens must be from 0 to the answer's ceiling, got %d", *n)
		}
		g.MinTokens = *n
	}
	if name := g.LlamaFilters(); name != "" && (g.Temperature == nil || *g.Temperature == 0) {
		if name == "typical_p" {
			name = typName
		}
		return badRequest(name, "%s weighs a sampled answer's draws, and this request is greedy (temperature 0, meshnode's default): its answer is the likeliest token each time. Set a temperature above 0, or leave %s out", name, name)
	}
	return nil
}

// inRange refuses v, where sent, outside lo … hi (or NaN), naming the
// field and what it must be.
func inRange(name string, v *float64, lo, hi float64, what string) error {
	if v != nil && (math.IsNaN(*v) || *v < lo || *v > hi) {
		return badRequest(name, "%s must be %s, got %v", name, what, *v)
	}
	return nil
}

// applyMirostat checks mirostat's fields and copies them into g. Its
// parameters ask nothing where it is off (SillyTavern sends its defaults
// beside mirostat 0), so they are checked only beside it.
func (f *llamaFilterFields) applyMirostat(g *Generation) error {
	if f.Mirostat == nil || *f.Mirostat == 0 {
		return nil
	}
	if v := *f.Mirostat; v != 1 && v != 2 {
		return badRequest("mirostat", "mirostat must be 0 (off), 1 or 2, got %d", v)
	}
	if err := inRange("mirostat_tau", f.MirostatTau, math.SmallestNonzeroFloat64, maxMirostatTau, fmt.Sprintf("above 0 and at most %v bits", maxMirostatTau)); err != nil {
		return err
	}
	if err := inRange("mirostat_eta", f.MirostatEta, math.SmallestNonzeroFloat64, 1, "above 0 and at most 1"); err != nil {
		return err
	}
	g.Mirostat, g.MirostatTau, g.MirostatEta = *f.Mirostat, llamaMirostatTau, llamaMirostatEta
	if f.MirostatTau != nil {
		g.MirostatTau = *f.MirostatTau
	}
	if f.MirostatEta != nil {
		g.MirostatEta = *f.MirostatEta
	}
	return nil
}

// applyAdaptive checks adaptive-p's fields and copies them into g. A
// negative target is off (SillyTavern sends -0.01 and a decay of 0.9),
// and the decay asks nothing beside it.
func (f *llamaFilterFields) applyAdaptive(g *Generation) error {
	t := f.AdaptiveTarget
	if t == nil || *t < 0 {
		return nil
	}
	if err := inRange("adaptive_target", t, 0, 1, "from 0 to 1 (negative is off)"); err != nil {
		return err
	}
	if err := inRange("adaptive_decay", f.AdaptiveDecay, 0, maxAdaptiveDecay, fmt.Sprintf("from 0 to %v", maxAdaptiveDecay)); err != nil {
		return err
	}
	target := *t
	g.AdaptiveTarget, g.AdaptiveDecay = &target, llamaAdaptiveDecay
	if f.AdaptiveDecay != nil {
		g.AdaptiveDecay = *f.AdaptiveDecay
	}
	return nil
}

// adaptiveOrder checks that adaptive-p, where on, runs: as in llama.cpp,
// only an order that lists adaptive_p (its letter a, wherever it stands:
// it is the last draw) runs it, and llama-server's default order does not.
// It returns the order without the a, the filters' order.
func (f *llamaFilterFields) adaptiveOrder(order string, ordered bool) (string, error) {
	on := f.AdaptiveTarget != nil && *f.AdaptiveTarget >= 0
	if on && !strings.Contains(order, "a") {
		how := "samplers does not list it"
		if !ordered {
			how = "llama.cpp's default samplers do not list it"
		}
		return "", badRequest("adaptive_target", "adaptive_target is set, but adaptive-p runs only where samplers lists adaptive_p and %s: add it to samplers, or leave adaptive_target out", how)
	}
	return strings.ReplaceAll(order, "a", ""), nil
}

// LlamaFilters is the field of the first of llama.cpp's other filters g
// turns on, "" where none is.
func (g *Generation) LlamaFilters() string {
	switch {
	case g.Mirostat > 0:
		return "mirostat"
	case g.AdaptiveTarget != nil:
		return "adaptive_target"
	case g.TypicalP > 0 && g.TypicalP < 1:
		return "typical_p"
	case g.TopNSigma > 0:
		return "top_n_sigma"
	case g.XTCProbability > 0:
		return "xtc_probability"
	case g.DynaTempRange > 0:
		return "dynatemp_range"
	case g.MinKeep > 1:
		return "min_keep"
	}
	return ""
}

// applyDRY checks DRY's fields and copies them into g, with llama.cpp's
// defaults for those not given; off (dry_multiplier 0, or
// dry_penalty_last_n 0, which scans nothing), the others ask nothing.
func (f *llamaFilterFields) applyDRY(g *Generation) error {
	m := f.DRYMultiplier
	if m == nil || *m == 0 || f.DRYLastN != nil && *f.DRYLastN == 0 {
		return nil
	}
	switch {
	case math.IsNaN(*m) || *m < 0 || *m > maxDRYMultiplier:
		return badRequest("dry_multiplier", "dry_multiplier must be between 0 (off) and %v, got %v", maxDRYMultiplier, *m)
	case f.DRYBase != nil && (math.IsNaN(*f.DRYBase) || *f.DRYBase < 1 || *f.DRYBase > maxDRYBase):
		return badRequest("dry_base", "dry_base must be from 1 to %v, got %v (llama-server puts its default, 1.75, in place of one under 1; meshnode refuses it)", maxDRYBase, *f.DRYBase)
	case f.DRYAllowedLength != nil && (*f.DRYAllowedLength < 0 || *f.DRYAllowedLength > receipt.MaxDRYAllowedLength):
		return badRequest("dry_allowed_length", "dry_allowed_length must be from 0 to %d, got %d", receipt.MaxDRYAllowedLength, *f.DRYAllowedLength)
	case f.DRYLastN != nil && *f.DRYLastN < -1:
		return badRequest("dry_penalty_last_n", "dry_penalty_last_n must be -1 (every token of prompt and answer), 0 (off) or how many of the latest tokens DRY scans; got %d", *f.DRYLastN)
	case f.DRYBreakers != nil && (len(f.DRYBreakers) == 0 || len(f.DRYBreakers) > receipt.MaxDRYBreakers):
		return badRequest("dry_sequence_breakers", "dry_sequence_breakers must be 1 to %d strings, got %d", receipt.MaxDRYBreakers, len(f.DRYBreakers))
	}
	for i, b := range f.DRYBreakers {
		if b == "" || len(b) > receipt.MaxDRYBreakerBytes {
			return badRequest("dry_sequence_breakers", "dry_sequence_breakers[%d] must be 1 to %d bytes (llama-server cuts a longer one; meshnode refuses it), got %d", i, receipt.MaxDRYBreakerBytes, len(b))
		}
	}
	g.DRYMultiplier, g.DRYBase, g.DRYAllowedLength, g.DRYLastN = *m, llamaDRYBase, llamaDRYAllowedLength, llamaDRYLastN
	if f.DRYBase != nil {
		g.DRYBase = *f.DRYBase
	}
	if f.DRYAllowedLength != nil {
		g.DRYAllowedLength = *f.DRYAllowedLength
	}
	if f.DRYLastN != nil {
		g.DRYLastN = *f.DRYLastN
	}
	g.DRYBreakers = f.DRYBreakers
	return nil
}
