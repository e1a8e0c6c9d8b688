package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/gguf/spec"
)

// sampling holds the fields the three generation endpoints share.
type sampling struct {
	Model            string          `json:"model"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	Seed             *json.Number    `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	N                *int            `json:"n"`
	Metadata         map[string]any  `json:"metadata"`
	JCPPresentation  json.RawMessage `json:"jcp_presentation"`

	// llama.cpp server's extensions, which its users send.
	TopK          *int64   `json:"top_k"`
	MinP          *float64 `json:"min_p"`
	RepeatPenalty *float64 `json:"repeat_penalty"`
	// RepeatLastN is which tokens the penalties count (llama-server's
	// and Ollama's): the last n of prompt and answer, -1 all of them, 0
	// none (no penalty).
	RepeatLastN *int `json:"repeat_last_n"`
	llamaFilterFields

	LogitBias json.RawMessage `json:"logit_bias"`

	// meshnode's: false decodes without the model's speculative draft.
	Speculative *bool `json:"speculative"`
	// llama-server's bounds on a request's speculative rounds.
	SpecNMax *int     `json:"speculative.n_max"`
	SpecNMin *int     `json:"speculative.n_min"`
	SpecPMin *float64 `json:"speculative.p_min"`

	// modelOptional: the endpoint serves a request that names no model
	// (llama.cpp's, whose server holds one) with the node's one model.
	modelOptional bool
	// maxStops is the most stop sequences the endpoint takes: OpenAI's
	// 4 where 0; llama.cpp's and Ollama's endpoints, which set no bound
	// and whose clients (SillyTavern) send a chat's several speakers,
	// take as many as a receipt holds.
	maxStops int
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// IncludeObfuscation: OpenAI pads stream events with random
	// characters against length side channels unless this is false.
	// meshnode sends no padding, so true is refused.
	IncludeObfuscation *bool `json:"include_obfuscation"`
}

// decodeBody parses a JSON request body into v, with errors that say where
// the body went wrong.
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return badRequest("", "request body is not valid JSON at byte %d: %v", syn.Offset, err)
		case errors.As(err, &typ):
			field := bodyPath(reflect.TypeOf(v), typ.Field)
			return badRequest(field, "field %q has the wrong type: got JSON %s, want %s", field, typ.Value, typ.Type)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("", "request body is not valid JSON: it ends in the middle of a value")
		}
		return badRequest("", "request body: %v", err)
	}
	// Anything after the value but white space (a second value, or a
	// stray bracket, which More does not see) is refused: the body must
	// be read as a whole by every check, the field check included.
	if rest := bytes.TrimSpace(body[dec.InputOffset():]); len(rest) > 0 {
		return badRequest("", "request body holds more than one JSON value: %q follows it at byte %d", clip(string(rest), 16), dec.InputOffset())
	}
	return nil
}

// applySpecLimits reads llama-server's bounds on the speculative rounds
// into g.SpecLimits. speculative.n_max 0 is llama-server's way to turn
// speculation off for one request, as "speculative": false does.
func (s *sampling) applySpecLimits(g *Generation) error {
	var l spec.Limits
	if n := s.SpecNMax; n != nil {
		if *n == 0 {
			if s.Speculative != nil && *s.Speculative {
				return badRequest("speculative.n_max", `speculative.n_max 0 turns speculation off, and "speculative": true asks for it`)
			}
			off := false
			g.Speculative = &off
		}
		l.Max = *n
	}
	if n := s.SpecNMin; n != nil {
		l.Min = *n
	}
	if p := s.SpecPMin; p != nil {
		l.PMin = *p
	}
	var le *spec.LimitError
	if err := l.Check(); errors.As(err, &le) {
		return badRequest(le.Field, "%s", le.Why)
	}
	g.SpecLimits = l
	return nil
}

// reasoningEffort checks a reasoning effort: the levels gpt-oss's
// template takes ("" is none asked for).
func reasoningEffort(param, effort string) (string, error) {
	switch effort {
	case "", "low", "medium", "high":
		return effort, nil
	}
	return "", badRequest(param, "%s %q is not one of low, medium, high (the levels a model's chat template takes, gpt-oss's)", param, effort)
}

// apply validates the shared fields and copies them into g.
func (s *sampling) apply(g *Generation) error {
	if strings.TrimSpace(s.Model) == "" && !s.modelOptional {
		return badRequest("model", "model is required")
	}
	g.Model = s.Model
	if o := s.StreamOptions; o != nil {
		if o.IncludeObfuscation != nil && *o.IncludeObfuscation {
			return badRequest("stream_options.include_obfuscation", "stream_options.include_obfuscation is not supported: meshnode pads no stream events (false is accepted)")
		}
	}
	if s.N != nil {
		if *s.N < 1 || *s.N > maxChoices {
			return badRequest("n", "n must be between 1 and %d, got %d", maxChoices, *s.N)
		}
		g.N = *s.N
	}
	if t := s.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			return badRequest("temperature", "temperature must be between 0 and 2, got %v", *t)
		}
		g.Temperature = t
	}
	if p := s.TopP; p != nil {
		if math.IsNaN(*p) || *p <= 0 || *p > 1 {
			return badRequest("top_p", "top_p must be in (0, 1], got %v", *p)
		}
		g.TopP = p
	}
	if k := s.TopK; k != nil {
		if *k < 0 || *k > math.MaxInt32 {
			return badRequest("top_k", "top_k must be a whole number from 0 (off) to %d, got %d", math.MaxInt32, *k)
		}
		g.TopK = int(*k)
	}
	if p := s.MinP; p != nil {
		if math.IsNaN(*p) || *p < 0 || *p > 1 {
			return badRequest("min_p", "min_p must be between 0 (off) and 1, got %v", *p)
		}
		g.MinP = *p
	}
	if r := s.RepeatPenalty; r != nil {
		if math.IsNaN(*r) || *r < 0 || *r > maxRepeatPenalty {
			return badRequest("repeat_penalty", "repeat_penalty must be between 0 and %v (0 and 1 are off), got %v", maxRepeatPenalty, *r)
		}
		g.RepeatPenalty = *r
	}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"presence_penalty", s.PresencePenalty, &g.PresencePenalty}, {"frequency_penalty", s.FrequencyPenalty, &g.FrequencyPenalty}} {
		if f.v == nil {
			continue
		}
		if math.IsNaN(*f.v) || *f.v < -2 || *f.v > 2 {
			return badRequest(f.name, "%s must be between -2 and 2, got %v", f.name, *f.v)
		}
		*f.dst = *f.v
	}
	if n := s.RepeatLastN; n != nil {
		penalised := g.RepeatPenalty != 0 && g.RepeatPenalty != 1 || g.PresencePenalty != 0 || g.FrequencyPenalty != 0
		switch {
		case *n < -1 || *n > math.MaxInt32:
			return badRequest("repeat_last_n", "repeat_last_n must be -1 (every token of prompt and answer), 0 (no penalties) or how many of the latest tokens of prompt and answer the penalties count, at most %d; got %d", math.MaxInt32, *n)
		case !penalised:
			// Without a penalty it asks nothing.
		case *n == 0:
			// As llama.cpp's penalty_last_n 0: the penalties count no
			// token.
			g.PenaltiesOff = true
		default:
			g.PenaltyLastN = *n
		}
	}
	if err := s.llamaFilterFields.apply(g); err != nil {
		return err
	}
	bias, err := parseLogitBias(s.LogitBias)
	if err != nil {
		return err
	}
	g.LogitBias = bias
	g.Speculative = s.Speculative
	if err := s.applySpecLimits(g); err != nil {
		return err
	}
	if s.Seed != nil {
		seed, err := parseSeed(*s.Seed)
		if err != nil {
			return badRequest("seed", "%v", err)
		}
		g.Seed = &seed
	}
	stop, err := parseStop(s.Stop, cmp.Or(s.maxStops, maxStops))
	if err != nil {
		return err
	}
	g.Stop = stop
	if err := s.applyMetadata(g); err != nil {
		return err
	}
	if len(s.JCPPresentation) > 0 && !bytes.Equal(bytes.TrimSpace(s.JCPPresentation), []byte("null")) {
		g.Presentation = s.JCPPresentation
	}
	return nil
}

// parseSeed accepts any integer that fits 64 bits; negative seeds (which
// some clients send) are reinterpreted as their two's complement.
func parseSeed(n json.Number) (uint64, error) {
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return u, nil
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return uint64(i), nil
	}
	return 0, fmt.Errorf("seed must be an integer, got %s", n)
}

const maxStops = 4

// Bounds on logit_bias, OpenAI's: at most 300 tokens, each biased by at
// most ±100.
const (
	maxLogitBias      = 300
	maxLogitBiasValue = 100
)

// parseLogitBias reads logit_bias, OpenAI's form: an object from token
// ids, as decimal strings, to a bias of −100 … 100 added to the token's
// logit. Null and {} ask for nothing. Token ids are checked against the
// model's vocabulary when it serves.
func parseLogitBias(raw json.RawMessage) (map[uint32]float64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, badRequest("logit_bias", "logit_bias must be an object from token ids to biases, as {\"50256\": -100}")
	}
	var m map[string]json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, badRequest("logit_bias", "logit_bias must map token ids to numbers: %v", err)
	}
	if len(m) > maxLogitBias {
		return nil, badRequest("logit_bias", "logit_bias names %d tokens, at most %d", len(m), maxLogitBias)
	}
	var out map[uint32]float64
	for _, k := range slices.Sorted(maps.Keys(m)) { // the same error for the same body
		v := m[k]
		id, err := strconv.ParseUint(k, 10, 32)
		if err != nil || strconv.FormatUint(id, 10) != k {
			return nil, badRequest("logit_bias", "logit_bias key %q is not a token id (a decimal integer, as the tokenizer numbers tokens)", k)
		}
		b, err := v.Float64()
		if err != nil || math.IsNaN(b) || b < -maxLogitBiasValue || b > maxLogitBiasValue {
			return nil, badRequest("logit_bias", "logit_bias of token %s must be between -%d and %d, got %s", k, maxLogitBiasValue, maxLogitBiasValue, v)
		}
		if out == nil {
			out = make(map[uint32]float64, len(m))
		}
		out[uint32(id)] = b
	}
	return out, nil
}

// maxRepeatPenalty bounds repeat_penalty well past any useful value (1.1
// to 1.5 are usual), so that its millionths fit the receipt.
const maxRepeatPenalty = 10

func parseStop(raw json.RawMessage, limit int) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(many) > limit {
		return nil, badRequest("stop", "stop takes at most %d sequences, got %d", limit, len(many))
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// maxLatencyBudgetMS bounds metadata.latency_budget_ms: a day.
const maxLatencyBudgetMS = 24 * 60 * 60 * 1000

// applyMetadata reads meshnode's mesh/1 bounds from metadata. OpenAI's
// metadata values are strings; numbers are accepted too.
func (s *sampling) applyMetadata(g *Generation) error {
	for _, f := range []struct {
		key string
		dst **uint64
	}{{"fidelity_floor", &g.FidelityFloor}, {"joule_ceiling_uj", &g.JouleCeilingUJ}, {"latency_budget_ms", &g.LatencyBudgetMS}} {
		v, ok := s.Metadata[f.key]
		if !ok || v == nil {
			continue
		}
		var text string
		switch v := v.(type) {
		case string:
			text = v
		case json.Number:
			text = v.String()
		default:
			return badRequest("metadata."+f.key, "metadata.%s must be a non-negative integer", f.key)
		}
		u, err := strconv.ParseUint(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return badRequest("metadata."+f.key, "metadata.%s must be a non-negative integer, got %q", f.key, text)
		}
		*f.dst = &u
	}
	if b := g.LatencyBudgetMS; b != nil && (*b == 0 || *b > maxLatencyBudgetMS) {
		return badRequest("metadata.latency_budget_ms", "metadata.latency_budget_ms must be 1..%d (milliseconds), got %d", maxLatencyBudgetMS, *b)
	}
	if g.FidelityFloor != nil && *g.FidelityFloor > 4 {
		return badRequest("metadata.fidelity_floor", "metadata.fidelity_floor must be 0..4 (F0..F4), got %d", *g.FidelityFloor)
	}
	return nil
}

// maxTokens is the answer's bound a request field gives: at least 1; 0
// where it is nil.
func maxTokens(param string, v *int) (int, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, badRequest(param, "%s must be at least 1, got %d", param, *v)
	}
	return *v, nil
}

// llamaMaxTokens is maxTokens on the endpoints llama-server serves too
// (chat and text completions), where -1, as llama-server and its web UI
// send it, is until the model ends (the context bounds it), as n_predict
// -1 is.
func llamaMaxTokens(param string, v *int) (int, error) {
	switch {
	case v == nil || *v >= 1:
		return maxTokens(param, v)
	case *v == -1:
		return math.MaxInt32, nil
	}
	return 0, badRequest(param, "%s must be at least 1, or -1 (until the model ends), got %d", param, *v)
}

// messageContent flattens an OpenAI message content (a string, null, or an
// array of parts) to text. Only text parts are accepted: meshnode's models
// read text.
func messageContent(raw json.RawMessage, field string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "%s must be a string or an array of content parts", field)
	}
	var b strings.Builder
	for i, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			if p.Text == nil {
				return "", badRequest(field, "%s[%d] is a text part without text", field, i)
			}
			b.WriteString(*p.Text)
		default:
			return "", badRequest(field, "%s[%d] has type %q; meshnode accepts text parts only", field, i, p.Type)
		}
	}
	return b.String(), nil
}

var knownRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}
