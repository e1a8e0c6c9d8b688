package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// SillyTavern's text completion, set to llama.cpp, posts one body to
// /completion that is meant for every backend it knows: llama.cpp's
// fields, the same settings under other backends' names
// (text-generation-webui's max_new_tokens and stopping_strings,
// KoboldAI's rep_pen, Ollama's num_predict and num_ctx), and those
// backends' own samplers at their off values unless the user turned one
// on. llama-server reads the names it knows and drops the rest. A node
// reads each other name as the field it stands for, refuses two names of
// one setting that disagree, and refuses by name a sampler that is
// turned on and that it does not run (llamaRefusals), so a preset is
// served as asked or not at all.

// tavernFields are the names SillyTavern sends beside llama.cpp's own.
type tavernFields struct {
	MaxNewTokens           *int            `json:"max_new_tokens"` // text-generation-webui's n_predict
	NumPredict             *int            `json:"num_predict"`    // Ollama's
	StoppingStrings        json.RawMessage `json:"stopping_strings"`
	RepetitionPenalty      *float64        `json:"repetition_penalty"`
	RepPen                 *float64        `json:"rep_pen"`
	RepetitionPenaltyRange *int            `json:"repetition_penalty_range"`
	RepPenRange            *int            `json:"rep_pen_range"`
	SamplerSeed            *json.Number    `json:"sampler_seed"`
	Typical                *float64        `json:"typical"`
	NSigma                 *float64        `json:"nsigma"`
	GrammarString          *string         `json:"grammar_string"`
	MirostatMode           *int            `json:"mirostat_mode"` // text-generation-webui's mirostat
	BanEOSToken            *bool           `json:"ban_eos_token"` // and its ignore_eos
	MinLength              *int            `json:"min_length"`    // and its min_tokens
	// The context the client fits its prompt and answer to: bounds the
	// serve's as Ollama's num_ctx does (Generation.ContextLimit).
	TruncationLength *int `json:"truncation_length"`
	NumCtx           *int `json:"num_ctx"`
	// text-generation-webui's dynamic temperature, which SillyTavern
	// sends beside llama.cpp's dynatemp_range as the range's ends.
	DynamicTemperature *bool    `json:"dynamic_temperature"`
	DynaTempLow        *float64 `json:"dynatemp_low"`
	DynaTempHigh       *float64 `json:"dynatemp_high"`
	// The banned tokens' ids, which SillyTavern also sends as
	// logit_bias's [id, false] pairs: checked against them.
	CustomTokenBans json.RawMessage `json:"custom_token_bans"`
}

// tavernRefusals are other backends' options SillyTavern sends to
// /completion, with the values that ask for nothing (off, or its
// defaults), which are accepted: llamaRefusals holds them.
var tavernRefusals = map[string]refusal{
	"add_bos_token":              {"add_bos_token false is not supported: the prompt is tokenized by the model's own rule, with the BOS token where its file asks for one (true is accepted)", oneOf("true")},
	"skip_special_tokens":        {"skip_special_tokens false is not supported: an answer's text leaves out the model's special tokens (true is accepted)", oneOf("true")},
	"include_reasoning":          {"include_reasoning false is not supported: /completion's text is all the model wrote, its reasoning too (true is accepted)", oneOf("true")},
	"top_a":                      {"top-a sampling is not supported (0, off, is accepted)", isZero},
	"tfs":                        {"tail-free sampling is not supported (1, off, is accepted)", oneOf("1", "1.0")},
	"tfs_z":                      {"tail-free sampling is not supported (1, off, is accepted)", oneOf("1", "1.0")},
	"epsilon_cutoff":             {"epsilon_cutoff is not supported (0, off, is accepted)", isZero},
	"eta_cutoff":                 {"eta_cutoff is not supported (0, off, is accepted)", isZero},
	"smoothing_factor":           {"quadratic sampling (smoothing_factor) is not supported (0, off, is accepted)", isZero},
	"smoothing_curve":            {"", anyValue}, // asks nothing without smoothing_factor
	"skew":                       {"skew is not supported (0, off, is accepted)", isZero},
	"max_tokens_second":          {"max_tokens_second is not supported: a node streams as fast as it decodes (0 is accepted)", isZero},
	"guidance_scale":             {"classifier-free guidance (guidance_scale) is not supported (1, off, is accepted)", oneOf("1", "1.0")},
	"negative_prompt":            {"", anyValue}, // asks nothing without guidance_scale
	"banned_strings":             {"banned_strings is not supported: ban tokens with logit_bias (an empty list is accepted)", isEmpty},
	"repetition_decay":           {"repetition_decay is not supported (0 is accepted)", isZero},
	"rep_pen_slope":              {"rep_pen_slope (KoboldAI's ramp of the penalty over its range) is not supported: the penalties weigh every counted token alike, as llama.cpp's do (SillyTavern's 1 and 0 are accepted)", oneOf("0", "1", "1.0")},
	"temperature_last":           {"temperature_last is not supported: samplers orders the filters, temperature among them (false is accepted)", isFalse},
	"do_sample":                  {"do_sample false is not supported: a temperature of 0 decodes greedily (true is accepted)", oneOf("true")},
	"num_beams":                  {"beam search is not supported (1 is accepted)", oneOf("1")},
	"penalty_alpha":              {"contrastive search (penalty_alpha) is not supported (0, off, is accepted)", isZero},
	"no_repeat_ngram_size":       {"no_repeat_ngram_size is not supported: DRY (dry_multiplier) penalises repeats (0, off, is accepted)", isZero},
	"encoder_repetition_penalty": {"encoder_repetition_penalty is not supported (1, off, is accepted)", oneOf("1", "1.0")},
	// SillyTavern's own routing, which its server forwards with the
	// body: the backend it chose, asking nothing of the answer.
	"api_type":   {"", anyValue},
	"api_server": {"", anyValue},
	"legacy_api": {"legacy_api is not supported: /completion is llama.cpp's current API (false is accepted)", isFalse},
}

// named is a setting's value under one of its names (nil: not sent).
type named[T comparable] struct {
	name string
	v    *T
}

// agreed is the value a setting is sent with under any of its names,
// refusing names that disagree; nil where none was sent.
func agreed[T comparable](names ...named[T]) (*T, error) {
	var got *named[T]
	for i, n := range names {
		switch {
		case n.v == nil:
		case got == nil:
			got = &names[i]
		case *n.v != *got.v:
			return nil, badRequest(n.name, "%s %v and %s %v disagree: they are one setting, send one", got.name, *got.v, n.name, *n.v)
		}
	}
	if got == nil {
		return nil, nil
	}
	return got.v, nil
}

// resolve folds SillyTavern's names into the llama.cpp fields of req
// they stand for.
func (t *tavernFields) resolve(req *llamaCompletionRequest) error {
	var err error
	if req.NPredict, err = agreed(named[int]{"n_predict", req.NPredict}, named[int]{"max_new_tokens", t.MaxNewTokens}, named[int]{"num_predict", t.NumPredict}); err != nil {
		return err
	}
	if req.RepeatPenalty, err = agreed(named[float64]{"repeat_penalty", req.RepeatPenalty}, named[float64]{"repetition_penalty", t.RepetitionPenalty}, named[float64]{"rep_pen", t.RepPen}); err != nil {
		return err
	}
	if req.RepeatLastN, err = agreed(named[int]{"repeat_last_n", req.RepeatLastN}, named[int]{"repetition_penalty_range", t.RepetitionPenaltyRange}, named[int]{"rep_pen_range", t.RepPenRange}); err != nil {
		return err
	}
	if req.Seed, err = agreed(named[json.Number]{"seed", req.Seed}, named[json.Number]{"sampler_seed", t.SamplerSeed}); err != nil {
		return err
	}
	if req.TypicalP, err = agreed(named[float64]{"typical_p", req.TypicalP}, named[float64]{"typical", t.Typical}); err != nil {
		return err
	}
	if req.TopNSigma, err = agreed(named[float64]{"top_n_sigma", req.TopNSigma}, named[float64]{"nsigma", t.NSigma}); err != nil {
		return err
	}
	if req.Mirostat, err = agreed(named[int]{"mirostat", req.Mirostat}, named[int]{"mirostat_mode", t.MirostatMode}); err != nil {
		return err
	}
	if req.IgnoreEOS, err = agreed(named[bool]{"ignore_eos", req.IgnoreEOS}, named[bool]{"ban_eos_token", t.BanEOSToken}); err != nil {
		return err
	}
	if req.MinTokens, err = agreed(named[int]{"min_tokens", req.MinTokens}, named[int]{"min_length", t.MinLength}); err != nil {
		return err
	}
	if req.Grammar, err = agreed(named[string]{"grammar", req.Grammar}, named[string]{"grammar_string", t.GrammarString}); err != nil {
		return err
	}
	stop, stopping := compact(req.Stop), compact(t.StoppingStrings)
	switch {
	case isAbsent(t.StoppingStrings):
	case isAbsent(req.Stop):
		req.Stop = t.StoppingStrings
	case !bytes.Equal(stop, stopping):
		return badRequest("stopping_strings", "stop %s and stopping_strings %s disagree: they are one setting, send one", stop, stopping)
	}
	return t.dynamicTemperature(req)
}

// dynamicTemperature checks text-generation-webui's dynamic temperature
// against llama.cpp's, which SillyTavern sends with it: a temperature
// drawn between dynatemp_low and dynatemp_high is llama.cpp's
// temperature ± dynatemp_range, their middle ± half their span.
func (t *tavernFields) dynamicTemperature(req *llamaCompletionRequest) error {
	on := t.DynamicTemperature != nil && *t.DynamicTemperature
	if !on {
		if t.DynaTempLow != nil || t.DynaTempHigh != nil {
			return badRequest("dynatemp_low", "dynatemp_low and dynatemp_high are the ends of a dynamic temperature: send them with dynamic_temperature true, or send dynatemp_range")
		}
		return nil
	}
	if t.DynaTempLow == nil || t.DynaTempHigh == nil || math.IsNaN(*t.DynaTempLow) || math.IsNaN(*t.DynaTempHigh) || *t.DynaTempLow > *t.DynaTempHigh {
		return badRequest("dynamic_temperature", "dynamic_temperature takes dynatemp_low and dynatemp_high, low at most high")
	}
	lo, hi := *t.DynaTempLow, *t.DynaTempHigh
	mid, half := (lo+hi)/2, (hi-lo)/2
	// SillyTavern computes the middle and the half span from the ends
	// in float64, so they may differ from these in the last bits.
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }
	if req.Temperature != nil && !near(*req.Temperature, mid) {
		return badRequest("temperature", "temperature %v is not the middle of dynatemp_low %v and dynatemp_high %v (%v): a dynamic temperature is drawn around the temperature", *req.Temperature, lo, hi, mid)
	}
	if req.DynaTempRange != nil && !near(*req.DynaTempRange, half) {
		return badRequest("dynatemp_range", "dynatemp_range %v is not half of dynatemp_low %v to dynatemp_high %v (%v)", *req.DynaTempRange, lo, hi, half)
	}
	req.Temperature, req.DynaTempRange = &mid, &half
	return nil
}

// apply reads what the names add to g, once the rest is read: the
// context bound, and the banned tokens' check against logit_bias.
func (t *tavernFields) apply(g *Generation) error {
	for _, c := range []named[int]{{"truncation_length", t.TruncationLength}, {"num_ctx", t.NumCtx}} {
		if c.v == nil {
			continue
		}
		if *c.v < 1 {
			return badRequest(c.name, "%s must be at least 1, got %d", c.name, *c.v)
		}
		if g.ContextLimit == 0 || *c.v < g.ContextLimit {
			g.ContextLimit = *c.v
		}
	}
	return t.checkBans(g)
}

// checkBans refuses custom_token_bans that name a token logit_bias does
// not ban: SillyTavern sends each ban twice, and a node bans through
// logit_bias alone.
func (t *tavernFields) checkBans(g *Generation) error {
	raw := bytes.TrimSpace(t.CustomTokenBans)
	if !holdsSomething(raw) {
		return nil
	}
	var ids []string
	var list string
	var nums []json.Number
	switch {
	case json.Unmarshal(raw, &list) == nil:
		ids = strings.Split(list, ",")
	case json.Unmarshal(raw, &nums) == nil:
		for _, n := range nums {
			ids = append(ids, n.String())
		}
	default:
		return badRequest("custom_token_bans", "custom_token_bans must be token ids, as a comma-separated string or an array")
	}
	if len(ids) > maxLogitBias {
		return badRequest("custom_token_bans", "custom_token_bans names %d tokens, at most %d", len(ids), maxLogitBias)
	}
	for _, s := range ids {
		id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return badRequest("custom_token_bans", "custom_token_bans: %q is not a token id", s)
		}
		if b, ok := g.LogitBias[uint32(id)]; !ok || b > -maxLogitBiasValue {
			return badRequest("custom_token_bans", "custom_token_bans names token %d, which logit_bias does not ban: a node bans tokens through logit_bias ([%d, false])", id, id)
		}
	}
	return nil
}
