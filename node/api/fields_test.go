package api

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestRefusedFields: every field of OpenAI's request schemas that
// meshnode does not honour is refused with a 400 naming it (param and
// message), on each endpoint that defines it; its inert values (what a
// client sends as a default) are accepted; a name no schema has is
// refused as unknown.
func TestRefusedFields(t *testing.T) {
	const chat = "/v1/chat/completions"
	const completions = "/v1/completions"
	const responses = "/v1/responses"
	base := map[string]string{
		chat:        `"messages":[{"role":"user","content":"x"}]`,
		completions: `"prompt":"x"`,
		responses:   `"input":"x"`,
	}
	tests := []struct {
		path, field, value string
		wantInMsg          string // "" : accepted
	}{
		{chat, "logit_bias", `{}`, ""},
		{chat, "service_tier", `"flex"`, "service_tier"},
		{chat, "service_tier", `"auto"`, ""},
		{responses, "service_tier", `"priority"`, "service_tier"},
		{chat, "store", `true`, "store"},
		{chat, "store", `false`, ""},
		{responses, "store", `true`, "store"},
		{chat, "modalities", `["text","audio"]`, "modalities"},
		{chat, "modalities", `["text"]`, ""},
		{chat, "audio", `{"voice":"alloy","format":"mp3"}`, "audio"},
		{chat, "prediction", `{"type":"content","content":"x"}`, ""},
		{chat, "prediction", `{"type":"content","content":[{"type":"text","text":"x"}]}`, ""},
		{chat, "prediction", `{"type":"content","content":"x","bogus":1}`, "bogus"},
		{chat, "prediction", `{"type":"text","content":"x"}`, "must be \"content\""},
		{chat, "prediction", `{"type":"content","content":[{"type":"image_url"}]}`, "text parts only"},
		{completions, "prediction", `{"type":"content","content":"x"}`, "taken by /v1/chat/completions"},
		{chat, "reasoning_effort", `"low"`, ""},
		{chat, "reasoning_effort", `"minimal"`, "not one of low, medium, high"},
		{completions, "reasoning_effort", `"low"`, "taken by /v1/chat/completions"},
		{responses, "reasoning", `{"effort":"high"}`, ""},
		{responses, "reasoning", `{"summary":"auto"}`, "no summarizer"},
		{responses, "reasoning", `{"effort":"high","bogus":1}`, `unknown field "bogus"`},
		{chat, "verbosity", `"low"`, "verbosity"},
		{chat, "web_search_options", `{}`, "web search"},
		{completions, "best_of", `3`, "best_of"},
		{completions, "best_of", `1`, ""},
		{completions, "echo", `true`, ""},
		{completions, "suffix", `"end"`, ""},
		{chat, "prompt_cache_retention", `"24h"`, "prompt_cache_retention"},
		{responses, "background", `true`, "background"},
		{responses, "conversation", `"conv_1"`, "conversation"},
		{responses, "previous_response_id", `"resp_1"`, "previous_response_id"},
		{responses, "prompt", `{"id":"pmpt_1"}`, "prompt"},
		{responses, "truncation", `"auto"`, "truncation"},
		{responses, "truncation", `"disabled"`, ""},
		{responses, "include", `["reasoning.encrypted_content"]`, "include"},
		{responses, "include", `["message.output_text.logprobs"]`, ""},
		{responses, "text", `{"format":{"type":"json_object"}}`, ""},
		{completions, "text", `{"format":{"type":"json_object"}}`, "structured outputs"},
		{responses, "max_tool_calls", `3`, "parallel_tool_calls false keeps the first"},
		{responses, "tools", `[{"type":"function","name":"f"}]`, "cannot take tools"},
		{responses, "tool_choice", `"required"`, "needs tools"},
		{completions, "tools", `[{"type":"function","function":{"name":"f"}}]`, "/v1/chat/completions and /v1/responses"},
		{chat, "tools", `[{"type":"function","function":{"name":"f"}}]`, "cannot take tools"},
		{chat, "tools", `[]`, ""},
		{chat, "tool_choice", `"required"`, "needs tools"},
		{chat, "functions", `[{"name":"f"}]`, "deprecated"},
		{chat, "function_call", `{"name":"f"}`, "deprecated"},
		{chat, "response_format", `{"type":"json_object"}`, ""},
		{chat, "response_format", `{"type":"text"}`, ""},
		{chat, "response_format", `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","format":"ipv6"}}}`, `"format" at /format`},
		{completions, "response_format", `{"type":"json_object"}`, "structured outputs"},
		{chat, "stream_options", `{"include_obfuscation":true}`, "include_obfuscation"},
		{chat, "user", `"user-1234"`, ""},
		{chat, "safety_identifier", `"h-1"`, ""},
		{chat, "prompt_cache_key", `"k"`, ""},
		{chat, "parallel_tool_calls", `true`, ""},
		{chat, "logprobs", `null`, ""},
		{chat, "top_logprobs", `21`, "top_logprobs"},
		{chat, "top_logprobs", `3`, "needs logprobs"},
		{completions, "logprobs", `6`, "logprobs"},
		{responses, "top_logprobs", `2`, "include"},
		{chat, "frobnicate", `1`, "unknown field"},
		{completions, "cache_prompt", `false`, ""},
		{completions, "cache_prompt", `0`, "cache_prompt"},
		{completions, "cache_prompt", `true`, ""},
		{completions, "ignore_eos", `true`, ""},
		{completions, "ignore_eos", `1`, "ignore_eos"},
		// llama-server's sampler settings at their defaults, as its web
		// UI sends them on chat completions; the filters that weigh
		// draws, set on a greedy request, refused by name.
		{chat, "typ_p", `1`, ""},
		{chat, "typ_p", `0.5`, "this request is greedy"},
		{chat, "typ_p", `0`, "above 0"},
		{chat, "dry_multiplier", `0`, ""},
		{chat, "dry_multiplier", `0.8`, ""}, // greedy answers too
		{chat, "dry_multiplier", `-1`, "dry_multiplier must be between 0"},
		{chat, "dry_base", `1.75`, ""},
		{chat, "dry_penalty_last_n", `-1`, ""},
		{chat, "xtc_threshold", `0.1`, ""},
		{chat, "xtc_probability", `0.5`, "this request is greedy"},
		{chat, "xtc_probability", `1.5`, "between 0 (off) and 1"},
		{chat, "dynatemp_range", `0`, ""},
		{chat, "dynatemp_range", `0.5`, "this request is greedy"},
		{chat, "dynatemp_exponent", `0`, "above 0"},
		{chat, "top_n_sigma", `-1`, ""},
		{chat, "top_n_sigma", `1.5`, "this request is greedy"},
		{chat, "min_keep", `1`, ""},
		{chat, "min_keep", `-1`, "min_keep must be from 0"},
		{chat, "backend_sampling", `false`, ""},
		{chat, "backend_sampling", `true`, "backend_sampling"},
		{chat, "mirostat", `2`, "this request is greedy"},
		{chat, "mirostat", `3`, "mirostat must be 0 (off), 1 or 2"},
		{chat, "mirostat", `0`, ""},
		{chat, "mirostat_tau", `0`, ""}, // asks nothing with mirostat off
		{chat, "mirostat_eta", `5`, ""},
		{chat, "adaptive_target", `0.5`, "adaptive_target"},
		{chat, "adaptive_target", `-1`, ""},
		{chat, "adaptive_decay", `5`, ""}, // asks nothing with adaptive-p off
		{chat, "post_sampling_probs", `true`, "post_sampling_probs is served on /completion"},
		{completions, "post_sampling_probs", `false`, ""},
		{chat, "return_tokens", `true`, "return_tokens is served on /completion"},
		{chat, "return_tokens", `false`, ""},
		{chat, "min_tokens", `3`, ""},
		{completions, "min_tokens", `-1`, "min_tokens must be from 0"},
		{completions, "typical_p", `1.0`, ""},
		{chat, "max_tokens", `-1`, ""},
		{completions, "max_tokens", `-1`, ""},
		{chat, "max_tokens", `-2`, "or -1"},
		{chat, "max_completion_tokens", `0`, "max_completion_tokens must be at least 1"},
		{responses, "max_output_tokens", `-1`, "must be at least 1"},
		{responses, "n_predict", `5`, "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.path+"/"+tt.field+"="+tt.value, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			body := `{"model":"tiny",` + base[tt.path] + `,"` + tt.field + `":` + tt.value + `}`
			resp := h.post(t, tt.path, body)
			defer resp.Body.Close()
			var got struct {
				Error struct {
					Message string `json:"message"`
					Param   string `json:"param"`
					Code    string `json:"code"`
				} `json:"error"`
			}
			decodeJSON(t, resp.Body, &got)
			if tt.wantInMsg == "" {
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %+v, want it accepted", body, resp.StatusCode, got.Error)
				}
				return
			}
			if resp.StatusCode != 400 || !strings.HasPrefix(got.Error.Param, tt.field) || !strings.Contains(got.Error.Message, tt.wantInMsg) {
				t.Fatalf("%s: %d %+v, want 400 naming %s, saying %q", body, resp.StatusCode, got.Error, tt.field, tt.wantInMsg)
			}
		})
	}
}

// TestEveryRefusedField: each field of the refusal table, sent with a
// value that asks for something, is a 400 naming it on every endpoint
// whose request struct does not take it; the fields ignored by design
// are accepted with any value.
func TestEveryRefusedField(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, ep := range []struct {
		path, base string
		req        any
	}{
		{"/v1/chat/completions", `"messages":[{"role":"user","content":"x"}]`, &chatRequest{}},
		{"/v1/completions", `"prompt":"x"`, &completionRequest{}},
		{"/v1/responses", `"input":"x"`, &responsesRequest{}},
		{"/v1/embeddings", `"input":"x"`, &embeddingRequest{}},
	} {
		known := jsonFields(reflect.TypeOf(ep.req))
		for name, r := range refusedFields {
			if known[name] {
				continue
			}
			body := `{"model":"tiny",` + ep.base + `,"` + name + `":{"x":1}}`
			resp := h.post(t, ep.path, body)
			var got struct {
				Error struct {
					Param string `json:"param"`
				} `json:"error"`
			}
			decodeJSON(t, resp.Body, &got)
			resp.Body.Close()
			switch {
			case r.why == "" && resp.StatusCode != 200:
				t.Errorf("%s %s: %d, want it accepted (ignored by design)", ep.path, name, resp.StatusCode)
			case r.why != "" && (resp.StatusCode != 400 || got.Error.Param != name):
				t.Errorf("%s %s: %d param %q, want 400 naming it", ep.path, name, resp.StatusCode, got.Error.Param)
			}
		}
	}
}

// TestRefusedFieldsDocumented: every field the refusal table names is in
// docs/api.md's table of fields, and so is every field the endpoints'
// request structs honour.
func TestRefusedFieldsDocumented(t *testing.T) {
	doc := readAPIDoc(t)
	names := map[string]bool{}
	for name := range refusedFields {
		names[name] = true
	}
	for _, req := range []any{&chatRequest{}, &completionRequest{}, &responsesRequest{}, &embeddingRequest{}} {
		for name := range jsonFields(reflectType(req)) {
			names[name] = true
		}
	}
	for name := range names {
		if !strings.Contains(doc, "| `"+name+"`") {
			t.Errorf("docs/api.md's field table has no row for `%s`", name)
		}
	}
}

func reflectType(v any) reflect.Type { return reflect.TypeOf(v) }

// readAPIDoc is docs/api.md.
func readAPIDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWrongTypeParam: a wrong-typed field is named as the body names it,
// whether it is the request's own, an embedded struct's (the sampling
// fields every endpoint shares, /infill's /completion fields) or nested.
func TestWrongTypeParam(t *testing.T) {
	for _, tc := range []struct {
		parse func([]byte) error
		body  string
		param string
	}{
		{func(b []byte) error { _, _, err := parseChat(b); return err }, `{"model":"m","temperature":"x","messages":[]}`, "temperature"},
		{func(b []byte) error { _, _, err := parseChat(b); return err }, `{"model":"m","max_tokens":"x","messages":[]}`, "max_tokens"},
		{func(b []byte) error { _, _, err := parseChat(b); return err }, `{"model":"m","messages":[{"role":1}]}`, "messages.role"},
		{func(b []byte) error { _, _, err := parseInfill(b); return err }, `{"input_prefix":"a","input_suffix":"b","top_k":"x"}`, "top_k"},
		{func(b []byte) error { _, _, err := parseInfill(b); return err }, `{"input_prefix":1,"input_suffix":"b"}`, "input_prefix"},
	} {
		var e *Error
		if err := tc.parse([]byte(tc.body)); !errors.As(err, &e) || e.Param != tc.param || !strings.Contains(e.Message, "wrong type") {
			t.Errorf("%s: %v, want a wrong type of %q", tc.body, err, tc.param)
		}
	}
}
