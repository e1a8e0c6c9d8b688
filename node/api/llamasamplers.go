package api

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// llama-server's samplers option: which sampling filters run, in what
// order (an array of names, or a string of its one-letter codes). Code
// editors' plugins send it (llama.vim and llama.vscode ask for top_k,
// top_p, then the infill filter). It is read into Generation.Samplers in
// gguf/sample's letters (receipt.Sampling.Samplers).

// llamaSamplerNames maps llama.cpp's sampler names to the letter of the
// filter meshnode runs.
var llamaSamplerNames = map[string]byte{
	"penalties": 'e', "dry": 'd', "top_n_sigma": 's', "top_k": 'k', "typ_p": 'y', "top_p": 'p', "min_p": 'm', "xtc": 'x', "temperature": 't', "infill": 'i',
	"adaptive_p": 'a', // the last draw, wherever it stands (llamaFilterFields.adaptiveOrder)
}

// llamaSamplerAliases are the other names llama.cpp takes for a sampler
// (besides each name in kebab case and without its underscores, which
// samplerLetter reads too): its own, and typical_p, the name older
// releases and SillyTavern's older presets use. tfs_z, tail-free
// sampling, which llama.cpp no longer runs, is no filter (0): its option
// off, it does nothing (llamaRefusals refuses it on).
var llamaSamplerAliases = map[string]byte{
	"nucleus": 'p', "temp": 't', "typ": 'y', "typical_p": 'y', "tfs_z": 0,
}

// llamaSamplerLetters are the string form's letters: llama.cpp's, which
// are gguf/sample's, and its a for adaptive_p.
const llamaSamplerLetters = "edskypmxtia"

// squash is a sampler's name as samplerLetter matches it: lower case,
// without dashes and underscores.
func squash(name string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(name))
}

// samplerLetter is the letter of the filter a sampler's name (llama.cpp's,
// in any case, kebab case or without underscores, or an alias) names, 0
// for tfs_z; ok is false for no sampler.
func samplerLetter(name string) (c byte, ok bool) {
	n := squash(name)
	for _, m := range []map[string]byte{llamaSamplerNames, llamaSamplerAliases} {
		for k, c := range m {
			if squash(k) == n {
				return c, true
			}
		}
	}
	return 0, false
}

// maxInfillTopK bounds top_k before the infill filter, which compares
// every pair of the tokens left (gguf/sample's MaxInfillCandidates).
const maxInfillTopK = 1024

// maxSamplerNames bounds the names samplers may list (llama.cpp has ten
// samplers).
const maxSamplerNames = 16

// llamaSamplers reads samplers into the letters of its filters, in
// order; given is false when the request leaves the order to the
// default.
func llamaSamplers(raw json.RawMessage) (order string, given bool, err error) {
	if isAbsent(raw) {
		return "", false, nil
	}
	var names []string
	var letters []byte // each name's letter
	switch raw = bytes.TrimSpace(raw); raw[0] {
	case '"':
		var codes string
		if err := json.Unmarshal(raw, &codes); err != nil || len(codes) > maxSamplerNames {
			return "", false, badRequest("samplers", "samplers must be an array of at most %d sampler names or a string of their letters", maxSamplerNames)
		}
		for i := 0; i < len(codes); i++ {
			c := codes[i]
			if strings.IndexByte(llamaSamplerLetters, c) < 0 {
				return "", false, badRequest("samplers", "samplers %q: %q is not a sampler's letter (e penalties, d dry, s top_n_sigma, k top_k, y typ_p, p top_p, m min_p, x xtc, t temperature, i infill, a adaptive_p)", codes, codes[i])
			}
			names, letters = append(names, string(codes[i])), append(letters, c)
		}
	default:
		if err := json.Unmarshal(raw, &names); err != nil || len(names) > maxSamplerNames {
			return "", false, badRequest("samplers", "samplers must be an array of at most %d sampler names or a string of their letters", maxSamplerNames)
		}
		for _, n := range names {
			c, ok := samplerLetter(n)
			if !ok {
				return "", false, badRequest("samplers", "samplers: %q is not a sampler (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature, infill, adaptive_p)", n)
			}
			letters = append(letters, c)
		}
	}
	kept := make([]byte, 0, len(letters))
	for i, c := range letters {
		switch {
		case c == 0:
			continue // a sampler that is no filter
		case slices.Contains(letters[:i], c):
			return "", false, badRequest("samplers", "samplers names %s twice", names[i])
		}
		kept = append(kept, c)
	}
	return string(kept), true, nil
}

// samplerName is llama.cpp's name of a filter's letter.
func samplerName(c byte) string {
	for n, l := range llamaSamplerNames {
		if l == c {
			return n
		}
	}
	return string(rune(c))
}

// checkSamplerOrder refuses an option set on a filter the order leaves
// out (llama-server would ignore it silently), and an infill filter not
// bounded by top_k before it.
func checkSamplerOrder(order string, req *sampling) error {
	runs := func(c byte) bool { return strings.IndexByte(order, c) >= 0 }
	for _, o := range []struct {
		set   bool
		c     byte
		param string
	}{
		{req.TopK != nil && *req.TopK > 0, 'k', "top_k"},
		{req.TopP != nil && *req.TopP < 1, 'p', "top_p"},
		{req.MinP != nil && *req.MinP > 0, 'm', "min_p"},
		{req.Temperature != nil && *req.Temperature > 0, 't', "temperature"},
		{req.RepeatPenalty != nil && *req.RepeatPenalty != 1 && *req.RepeatPenalty != 0, 'e', "repeat_penalty"},
		{req.PresencePenalty != nil && *req.PresencePenalty != 0, 'e', "presence_penalty"},
		{req.FrequencyPenalty != nil && *req.FrequencyPenalty != 0, 'e', "frequency_penalty"},
		{req.TypicalP != nil && *req.TypicalP < 1, 'y', "typical_p"},
		{req.TypP != nil && *req.TypP < 1, 'y', "typ_p"},
		{req.TopNSigma != nil && *req.TopNSigma > 0, 's', "top_n_sigma"},
		{req.XTCProbability != nil && *req.XTCProbability > 0 && (req.XTCThreshold == nil || *req.XTCThreshold <= 0.5), 'x', "xtc_probability"},
		{req.DynaTempRange != nil && *req.DynaTempRange > 0, 't', "dynatemp_range"},
		{req.DRYMultiplier != nil && *req.DRYMultiplier > 0 && (req.DRYLastN == nil || *req.DRYLastN != 0), 'd', "dry_multiplier"},
	} {
		if o.set && !runs(o.c) {
			return badRequest(o.param, "%s is set, but samplers does not run %s: add it to samplers, or leave %s out", o.param, samplerName(o.c), o.param)
		}
	}
	if i := strings.IndexByte(order, 'i'); i >= 0 {
		k := strings.IndexByte(order, 'k')
		if k < 0 || k > i || req.TopK == nil || *req.TopK < 1 || *req.TopK > maxInfillTopK {
			return badRequest("samplers", "the infill sampler compares every pair of the tokens left, so it must follow top_k, with top_k from 1 to %d (llama.vim and llama.vscode send top_k 40)", maxInfillTopK)
		}
	}
	return nil
}
