package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/identity"
)

// llamaAnswer is /completion's answer, or an event of its stream, as a
// client reads it.
type llamaAnswer struct {
	Index              int            `json:"index"`
	Content            string         `json:"content"`
	Tokens             []uint32       `json:"tokens"`
	Stop               bool           `json:"stop"`
	Model              string         `json:"model"`
	TokensPredicted    int            `json:"tokens_predicted"`
	TokensEvaluated    int            `json:"tokens_evaluated"`
	GenerationSettings map[string]any `json:"generation_settings"`
	Prompt             string         `json:"prompt"`
	StopType           string         `json:"stop_type"`
	StoppingWord       string         `json:"stopping_word"`
	Timings            map[string]any `json:"timings"`
	Energy             map[string]any `json:"energy"`
	Error              *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// TestLlamaCompletion: /completion reads llama-server's request into a
// Generation with llama-server's sampler defaults (greedy, as every
// endpoint, unless a temperature is given), answers in its shape, and
// streams data: events whose last holds the whole answer's fields.
func TestLlamaCompletion(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	code, ct, b := ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":"Once"}`)
	var a llamaAnswer
	if err := json.Unmarshal(b, &a); err != nil || code != 200 || ct != "application/json" || a.Content != "Hello, world!" || !a.Stop ||
		a.Model != "tiny" || a.TokensPredicted != 4 || a.TokensEvaluated != 3 || a.StopType != "eos" || a.Prompt != "Once" ||
		a.Tokens == nil || a.Timings["predicted_n"] != 4.0 || a.Energy["energy_provenance"] != "Estimator" ||
		a.GenerationSettings["n_predict"] != -1.0 || a.GenerationSettings["temperature"] != 0.0 || a.GenerationSettings["top_k"] != 40.0 {
		t.Fatalf("%d %s %s", code, ct, b)
	}
	g := h.model.lastCall()
	if g.Prompt != "Once" || g.Messages != nil || g.Temperature != nil || g.TopK != 40 || *g.TopP != 0.95 || g.MinP != 0.05 ||
		g.Seed != nil || g.MaxTokens != math.MaxInt32 {
		t.Fatalf("llama-server's defaults: %+v", g)
	}

	// Every option named, a token-id prompt, the array logit_bias.
	code, _, b = ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":[1,2,3],"n_predict":7,"temperature":0,"top_k":0,"top_p":1,"min_p":0,
		"seed":5,"stop":["\n"],"repeat_penalty":1.1,"repeat_last_n":64,"presence_penalty":0.5,"frequency_penalty":0.25,"logit_bias":[[5,1.5],[9,false]],
		"cache_prompt":true,"id_slot":-1,"n_probs":0,"typical_p":1,"mirostat":0,"samplers":null,"stream":false}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	g = h.model.lastCall()
	if !reflect.DeepEqual(g.PromptIDs, []uint32{1, 2, 3}) || g.MaxTokens != 7 || *g.Temperature != 0 || g.TopK != 0 || *g.Seed != 5 ||
		!reflect.DeepEqual(g.Stop, []string{"\n"}) || g.RepeatPenalty != 1.1 || g.PenaltyLastN != 64 || g.PresencePenalty != 0.5 || g.FrequencyPenalty != 0.25 ||
		!reflect.DeepEqual(g.LogitBias, map[uint32]float64{5: 1.5, 9: -100}) {
		t.Fatalf("generation %+v", g)
	}
	code, _, _ = ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":"x","json_schema":{"type":"integer"}}`)
	if g = h.model.lastCall(); code != 200 || g.Format != FormatJSONSchema {
		t.Fatalf("json_schema: %d, format %q", code, g.Format)
	}
	code, _, _ = ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":"x","grammar":"root ::= [0-9]+"}`)
	if g = h.model.lastCall(); code != 200 || g.Format != FormatGBNF {
		t.Fatalf("grammar: %d, format %q", code, g.Format)
	}

	// Streamed: a data: event a piece, then the whole answer's fields,
	// content empty, and no [DONE].
	code, ct, b = ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":"Once","stream":true,"stop":["d!"]}`)
	var events []llamaAnswer
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			t.Fatalf("line %q", line)
		}
		var e llamaAnswer
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	var text strings.Builder
	for _, e := range events[:len(events)-1] {
		if e.Stop || e.Energy != nil || e.Tokens == nil {
			t.Fatalf("a piece %+v", e)
		}
		text.WriteString(e.Content)
	}
	last := events[len(events)-1]
	if code != 200 || ct != "text/event-stream" || text.String() != "Hello, world!" || !last.Stop || last.Content != "" ||
		last.Energy == nil || last.GenerationSettings["stream"] != true || last.Timings == nil {
		t.Fatalf("%d %s: %s", code, ct, b)
	}

	// A failure mid-stream ends it with an event holding the error.
	h.model.midErr = errBoom
	_, _, b = ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":"x","stream":true}`)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !strings.Contains(lines[len(lines)-1], "boom") {
		t.Fatalf("stream's end: %s", b)
	}
}

// TestLlamaCompletionRefusals: what /completion cannot honour is a 400
// naming the field; the values that ask for nothing are accepted.
func TestLlamaCompletionRefusals(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct{ field, value string }{
		{"cache_prompt", `"no"`}, {"id_slot", "-2"}, {"ignore_eos", `"yes"`}, {"n_probs", "21"}, {"n_probs", "-1"}, {"return_tokens", "1"},
		{"n_keep", "4"}, {"n_indent", "-1"}, {"n_indent", "5000"}, {"repeat_last_n", "-2"}, {"repeat_last_n", "4294967296"}, {"typical_p", "0.9"}, {"dynatemp_range", "0.5"},
		{"mirostat", "2"}, {"mirostat", "-1"}, {"adaptive_target", "0.5"}, {"dry_multiplier", "101"}, {"xtc_probability", "0.5"}, {"min_keep", "2"}, {"min_keep", "-1"}, {"n_cmpl", "0"}, {"n_cmpl", "65"},
		{"top_n_sigma", "1"}, {"top_n_sigma", "1e9"}, {"typ_p", "0.5"}, {"xtc_threshold", "2"}, {"dynatemp_exponent", "-1"},
		{"dry_sequence_breakers", `"\n"`}, {"dry_sequence_breakers", `[1]`},
		{"samplers", `["top_k","nope"]`}, {"samplers", `"kz"`}, {"samplers", `["top_k","top_k"]`}, {"samplers", `{}`},
		{"samplers", `["infill"]`}, {"samplers", `["top_p","infill","top_k"]`},
		{"t_max_predict_ms", "3600001"}, {"image_data", `[{"data":"x","id":1}]`}, {"lora", `[{"id":0,"scale":1}]`},
		{"response_fields", `[` + strings.Repeat(`"a",`, maxResponseFields) + `"a"]`},
		{"n_predict", "-2"}, {"logit_bias", `[["Hello",-1]]`}, {"logit_bias", `[[1]]`}, {"prompt", `["a",[1,2]]`}, {"prompt", `[["a"],["b"]]`},
		{"grammar", `"root ::= \"a"`}, {"nope", "1"},
	} {
		n := len(h.model.calls)
		code, _, b := ollamaPost(t, h, "/completion", `{"model":"tiny","prompt":"x","`+tc.field+`":`+tc.value+`}`)
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || code != 400 || e.Error.Param != tc.field || len(h.model.calls) != n {
			t.Errorf("%s %s: %d %s", tc.field, tc.value, code, b)
		}
	}
	for body, param := range map[string]string{
		// An option the order leaves out would not run: refused, not
		// ignored as llama-server ignores it.
		`{"model":"tiny","prompt":"x","top_k":5,"samplers":["top_p"]}`:                             "top_k",
		`{"model":"tiny","prompt":"x","temperature":0.5,"samplers":["top_k"]}`:                     "temperature",
		`{"model":"tiny","prompt":"x","repeat_penalty":1.1,"samplers":"kt"}`:                       "repeat_penalty",
		`{"model":"tiny","prompt":"x","temperature":0.5,"typical_p":0.9,"samplers":"kt"}`:          "typical_p",
		`{"model":"tiny","prompt":"x","temperature":0.5,"xtc_probability":0.5,"samplers":"kt"}`:    "xtc_probability",
		`{"model":"tiny","prompt":"x","temperature":0.5,"top_n_sigma":1,"samplers":"kt"}`:          "top_n_sigma",
		`{"model":"tiny","prompt":"x","temperature":0.5,"typical_p":0.9,"typ_p":0.8}`:              "typ_p",
		`{"model":"tiny","prompt":"x","dry_multiplier":0.5,"samplers":"k"}`:                        "dry_multiplier",
		`{"model":"tiny","prompt":"x","dry_multiplier":0.5,"dry_base":0.9}`:                        "dry_base",
		`{"model":"tiny","prompt":"x","dry_multiplier":0.5,"dry_penalty_last_n":-2}`:               "dry_penalty_last_n",
		`{"model":"tiny","prompt":"x","dry_multiplier":0.5,"dry_sequence_breakers":[]}`:            "dry_sequence_breakers",
		`{"model":"tiny","prompt":"x","dry_multiplier":0.5,"dry_sequence_breakers":[""]}`:          "dry_sequence_breakers",
		`{"model":"tiny","prompt":"x","top_k":2000,"samplers":["top_k","infill"]}`:                 "samplers",
		`{"model":"tiny","prompt":"x","grammar":"root ::= \"a\"","json_schema":{"type":"string"}}`: "grammar",
		`{"model":"tiny"}`: "prompt",
	} {
		code, _, b := ollamaPost(t, h, "/completion", body)
		if code != 400 || !strings.Contains(string(b), `"param":"`+param+`"`) {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
}

// TestLlamaEditorOptions: what code editors' plugins send to /completion
// and /infill is read into the generation: the sampler order (names or
// letters; the filters meshnode does not run are dropped, asking
// nothing), llama-server's truncation defaults only for the filters the
// order runs, n_predict 0 as the prompt alone, n_indent, the time
// limits, and a missing model as the node's one model.
func TestLlamaEditorOptions(t *testing.T) {
	for _, tc := range []struct {
		body string
		want func(g *Generation) bool
	}{
		{`"samplers":["top_k","top_p","infill"],"top_k":40,"top_p":0.9`, func(g *Generation) bool {
			return g.Samplers == "kpi" && g.TopK == 40 && *g.TopP == 0.9 && g.MinP == 0 && g.Temperature == nil
		}},
		{`"samplers":"dkypmxt","temperature":0.5`, func(g *Generation) bool {
			return g.Samplers == "dkypmxt" && g.TopK == 40 && *g.TopP == 0.95 && g.MinP == 0.05 && *g.Temperature == 0.5
		}},
		// llama.cpp's other filters, as its web UI and SillyTavern set
		// them; XTC's threshold and the dynamic temperature's exponent
		// default to llama.cpp's.
		{`"temperature":0.8,"typical_p":0.9,"top_n_sigma":1.5,"xtc_probability":0.5,"dynatemp_range":0.3,"min_keep":3`, func(g *Generation) bool {
			return g.TypicalP == 0.9 && g.TopNSigma == 1.5 && g.XTCProbability == 0.5 && g.XTCThreshold == 0.1 &&
				g.DynaTempRange == 0.3 && g.DynaTempExponent == 1 && g.MinKeep == 3
		}},
		{`"temperature":0.8,"typ_p":0.7,"xtc_probability":0.5,"xtc_threshold":0.2,"dynatemp_range":0.3,"dynatemp_exponent":2`, func(g *Generation) bool {
			return g.TypicalP == 0.7 && g.XTCThreshold == 0.2 && g.DynaTempExponent == 2
		}},
		// DRY, greedy too, with llama.cpp's defaults; off where it
		// scans nothing.
		{`"dry_multiplier":0.8`, func(g *Generation) bool {
			return g.DRYMultiplier == 0.8 && g.DRYBase == 1.75 && g.DRYAllowedLength == 2 && g.DRYLastN == 64 && g.DRYBreakers == nil
		}},
		{`"dry_multiplier":0.8,"dry_base":2,"dry_allowed_length":3,"dry_penalty_last_n":-1,"dry_sequence_breakers":["\n","Bob:"]`, func(g *Generation) bool {
			return g.DRYBase == 2 && g.DRYAllowedLength == 3 && g.DRYLastN == -1 && slices.Equal(g.DRYBreakers, []string{"\n", "Bob:"})
		}},
		{`"dry_multiplier":0.8,"dry_penalty_last_n":0,"dry_base":0.5`, func(g *Generation) bool { return g.DRYMultiplier == 0 }},
		// Off: typical_p 1, top_n_sigma -1, XTC over 0.5, min_keep 1.
		{`"temperature":0.8,"typical_p":1,"top_n_sigma":-1,"xtc_probability":0.5,"xtc_threshold":0.6,"min_keep":1`, func(g *Generation) bool {
			return g.LlamaFilters() == ""
		}},
		// On a greedy request, their off values.
		{`"typical_p":1,"top_n_sigma":-1,"xtc_probability":0,"xtc_threshold":0.1,"dynatemp_range":0,"dynatemp_exponent":1,"min_keep":0`, func(g *Generation) bool {
			return g.LlamaFilters() == ""
		}},
		{`"samplers":["min_p","temperature"],"min_p":0.1,"temperature":0.1`, func(g *Generation) bool {
			return g.Samplers == "mt" && g.TopK == 0 && g.TopP == nil && g.MinP == 0.1
		}},
		{`"samplers":[],"temperature":0`, func(g *Generation) bool { return g.Samplers == "" && g.TopK == 0 }},
		{`"n_predict":0`, func(g *Generation) bool { return g.PromptOnly && g.MaxTokens == 0 }},
		{`"n_predict":-1`, func(g *Generation) bool { return !g.PromptOnly && g.MaxTokens == math.MaxInt32 }},
		{`"n_indent":4,"t_max_prompt_ms":500,"t_max_predict_ms":250`, func(g *Generation) bool {
			return g.MinIndent == 4 && g.PromptTimeLimit == 500*time.Millisecond && g.PredictTimeLimit == 250*time.Millisecond
		}},
		{`"t_max_prompt_ms":-1,"t_max_predict_ms":0,"id_slot":0,"n_cmpl":1,"response_fields":[""]`, func(g *Generation) bool {
			return g.PromptTimeLimit == 0 && g.PredictTimeLimit == 0
		}},
	} {
		g, _, err := parseLlamaCompletion([]byte(`{"prompt":"x",` + tc.body + `}`))
		if err != nil || g.Model != "" || !tc.want(g) {
			t.Errorf("%s: %+v, %v", tc.body, g, err)
		}
	}
}

// TestLlamaNCmpl: n_cmpl answers an array of completions, each with its
// index: greedy, one serve answered n_cmpl times; sampled, a serve each.
// Streamed, every event carries its answer's index, each answer's pieces
// make its text and each ends with its own last event (stop, energy);
// nothing follows the last. A failure is one error event.
func TestLlamaNCmpl(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct {
		body   string
		serves int
	}{
		{`{"prompt":"x","n_cmpl":2,"response_fields":["index","content"]}`, 1},
		{`{"prompt":"x","n_cmpl":2,"temperature":0.7,"seed":1,"response_fields":["index","content"]}`, 2},
	} {
		n := len(h.model.calls)
		code, _, b := ollamaPost(t, h, "/completion", tc.body)
		var got []map[string]any
		if err := json.Unmarshal(b, &got); err != nil || code != 200 || len(got) != 2 || got[0]["index"] != 0.0 || got[1]["index"] != 1.0 ||
			got[1]["content"] != "Hello, world!" || len(h.model.calls)-n != tc.serves {
			t.Fatalf("%s: %d %s (%d serves)", tc.body, code, b, len(h.model.calls)-n)
		}
	}
	for _, tc := range []struct {
		body   string
		serves int
	}{
		{`{"prompt":"x","n_cmpl":3,"stream":true}`, 1},
		{`{"prompt":"x","n_cmpl":3,"stream":true,"temperature":0.7,"seed":1}`, 3},
	} {
		n := len(h.model.calls)
		code, ct, b := ollamaPost(t, h, "/completion", tc.body)
		if code != 200 || ct != "text/event-stream" || len(h.model.calls)-n != tc.serves {
			t.Fatalf("%s: %d %s (%d serves): %s", tc.body, code, ct, len(h.model.calls)-n, b)
		}
		texts, ended := make([]strings.Builder, 3), make([]bool, 3)
		for _, ev := range readSSE(t, bytes.NewReader(b)) {
			var e llamaAnswer
			if err := json.Unmarshal([]byte(ev.data), &e); err != nil || ev.name != "" || e.Index < 0 || e.Index > 2 || ended[e.Index] {
				t.Fatalf("%s: event %q (%v) after the ends %v", tc.body, ev.data, err, ended)
			}
			if e.Stop {
				ended[e.Index] = e.Energy != nil && e.TokensPredicted == 4 && e.Content == ""
				continue
			}
			texts[e.Index].WriteString(e.Content)
		}
		for i := range texts {
			if !ended[i] || texts[i].String() != "Hello, world!" {
				t.Fatalf("%s: answer %d %q, ended %v: %s", tc.body, i, texts[i].String(), ended[i], b)
			}
		}
	}
	h.model.midErr = errBoom
	_, _, b := ollamaPost(t, h, "/completion", `{"prompt":"x","n_cmpl":2,"stream":true}`)
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); strings.Count(string(b), "boom") != 1 || !strings.Contains(lines[len(lines)-1], "boom") {
		t.Fatalf("a failure: %s", b)
	}
}

// TestLlamaResponseFields: response_fields keeps the paths asked, each
// under its path, nested ones included; a path to nothing is left out.
func TestLlamaResponseFields(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	code, _, b := ollamaPost(t, h, "/completion", `{"prompt":"x","response_fields":["content","timings/predicted_n","truncated","tokens_cached","timings/nope","nope/x",""]}`)
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil || code != 200 || len(got) != 4 || got["content"] != "Hello, world!" ||
		got["timings/predicted_n"] != 4.0 || got["truncated"] != false || got["tokens_cached"] != 7.0 {
		t.Fatalf("%d %s", code, b)
	}
}

// TestSoleModel: a request that names no model, on the endpoints
// llama-server's clients send none to, is for the node's one model; with
// several, it is refused naming them; serving none, it is for the one
// model its mesh serves (relayed there).
func TestSoleModel(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, path := range []string{"/completion", "/v1/chat/completions", "/apply-template"} {
		body := `{"prompt":"x"}`
		if path != "/completion" {
			body = `{"messages":[{"role":"user","content":"x"}]}`
		}
		if code, _, b := ollamaPost(t, h, path, body); code != 200 {
			t.Fatalf("%s with one model: %d %s", path, code, b)
		}
	}
	h.reg.local["other"] = h.model
	code, _, b := ollamaPost(t, h, "/completion", `{"prompt":"x"}`)
	if code != 400 || !strings.Contains(string(b), `"param":"model"`) || !strings.Contains(string(b), "other, tiny") {
		t.Fatalf("with two models: %d %s", code, b)
	}
	delete(h.reg.local, "other")
	delete(h.reg.local, "tiny")
	h.reg.remote["far"] = []identity.EndpointID{testID(2)}
	if got, err := h.srv.soleModel(); err != nil || got != "far" {
		t.Fatalf("serving none, the mesh one: %q, %v", got, err)
	}
}

// TestChatLlamaOptions: llama-server's options on the OpenAI endpoints,
// as llama.vim's instruction editing sends them on chat completions and
// llama-server takes them on completions too: the sampler order,
// n_predict (0 the prompt alone), id_slot, cache_prompt and
// response_fields; and, on chat, Continue's thinking_budget_tokens.
func TestChatLlamaOptions(t *testing.T) {
	parsers := []struct {
		name   string
		prefix string
		parse  func([]byte) (*Generation, error)
	}{
		{"chat", `{"messages":[{"role":"user","content":"x"}],`, func(b []byte) (*Generation, error) {
			g, _, err := parseChat(b)
			return g, err
		}},
		{"completions", `{"model":"tiny","prompt":"x",`, func(b []byte) (*Generation, error) {
			g, _, err := parseCompletion(b)
			return g, err
		}},
	}
	for _, p := range parsers {
		chat := p.name == "chat"
		for _, tc := range []struct {
			body string
			want func(g *Generation) bool
		}{
			{`"id_slot":1,"samplers":[],"n_predict":0,"stream":false,"cache_prompt":true,"response_fields":[""]`, func(g *Generation) bool {
				return g.PromptOnly && g.MaxTokens == 0 && g.Samplers == ""
			}},
			{`"id_slot":1,"min_p":0.1,"temperature":0.1,"samplers":["min_p","temperature"],"stream":true,"cache_prompt":true`, func(g *Generation) bool {
				return g.Samplers == "mt" && g.MinP == 0.1 && *g.Temperature == 0.1
			}},
			{`"n_predict":-1`, func(g *Generation) bool { return g.MaxTokens == math.MaxInt32 && !g.PromptOnly }},
			{`"cache_prompt":false`, func(g *Generation) bool { return g.NoPromptCache }},
			{`"cache_prompt":true`, func(g *Generation) bool { return !g.NoPromptCache }},
			{`"n_predict":7`, func(g *Generation) bool { return g.MaxTokens == 7 }},
			{`"thinking_budget_tokens":64`, func(g *Generation) bool { return g.ThinkBudget == 64 && g.thinking != nil && g.thinking.on }},
			{`"thinking_budget_tokens":0`, func(g *Generation) bool { return g.ThinkBudget == 0 && g.thinking != nil && !g.thinking.on }},
			{`"thinking_budget_tokens":-1`, func(g *Generation) bool { return g.ThinkBudget == 0 && g.thinking == nil }},
		} {
			if strings.Contains(tc.body, "thinking") && !chat {
				continue
			}
			g, err := p.parse([]byte(p.prefix + tc.body + `}`))
			if err != nil || !tc.want(g) {
				t.Errorf("%s %s: %+v, %v", p.name, tc.body, g, err)
			}
		}
		for body, param := range map[string]string{
			`"n_predict":4,"max_tokens":4`:                         "n_predict",
			`"n_predict":-2`:                                       "n_predict",
			`"cache_prompt":"no"`:                                  "cache_prompt",
			`"id_slot":-5`:                                         "id_slot",
			`"top_k":5,"samplers":["temperature"]`:                 "top_k",
			`"response_fields":["choices"],"stream":true`:          "response_fields",
			`"samplers":["top_k","infill"]`:                        "samplers",
			`"thinking_budget_tokens":-2`:                          "thinking_budget_tokens",
			`"thinking_budget_tokens":8,"max_tokens":8`:            "thinking_budget_tokens",
			`"thinking_budget_tokens":8,"reasoning_effort":"none"`: "thinking_budget_tokens",
		} {
			if !chat && strings.Contains(body, "thinking") {
				continue
			}
			_, err := p.parse([]byte(p.prefix + body + `}`))
			var e *Error
			if !errors.As(err, &e) || e.Param != param {
				t.Errorf("%s %s: %v, want a refusal of %s", p.name, body, err, param)
			}
		}
	}
	h := newHarness(t, Config{}, nil)
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"x"}],"response_fields":["choices","model",""]}`,
		"/v1/completions":      `{"model":"tiny","prompt":"x","response_fields":["choices","model",""]}`,
	} {
		code, _, b := ollamaPost(t, h, path, body)
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil || code != 200 || len(got) != 2 || got["model"] != "tiny" {
			t.Fatalf("%s response_fields: %d %s", path, code, b)
		}
	}
}

// TestSpeculativeLimitsFields: llama-server's speculative.n_max, n_min
// and p_min are read on /completion, chat completions, completions and
// responses into the generation's bounds; n_max 0 turns speculation off
// as "speculative": false does; values out of range, n_min above n_max,
// and n_max 0 beside "speculative": true are 400s naming the field.
func TestSpeculativeLimitsFields(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	bodies := map[string]string{
		"/completion":          `{"model":"tiny","prompt":"x"%s}`,
		"/v1/completions":      `{"model":"tiny","prompt":"x"%s}`,
		"/v1/chat/completions": `{"model":"tiny","messages":[{"role":"user","content":"x"}]%s}`,
		"/v1/responses":        `{"model":"tiny","input":"x"%s}`,
	}
	for path, body := range bodies {
		post := func(extra string) (int, string) {
			resp := h.post(t, path, fmt.Sprintf(body, extra))
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		code, b := post(`,"speculative.n_max":4,"speculative.n_min":2,"speculative.p_min":0.5`)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		if path == "/completion" && !strings.Contains(b, `"speculative.n_max":4,"speculative.n_min":2,"speculative.p_min":0.5`) {
			t.Errorf("/completion's generation_settings do not report the bounds: %s", b)
		}
		if g := h.model.lastCall(); g.SpecLimits != (spec.Limits{Max: 4, Min: 2, PMin: 0.5}) || g.Speculative != nil {
			t.Errorf("%s: limits %+v, speculative %v", path, g.SpecLimits, g.Speculative)
		}
		if code, b := post(`,"speculative.n_max":0`); code != 200 {
			t.Fatalf("%s: n_max 0: %d %s", path, code, b)
		}
		if g := h.model.lastCall(); g.Speculative == nil || *g.Speculative {
			t.Errorf("%s: n_max 0 left speculation %v", path, g.Speculative)
		}
		for extra, param := range map[string]string{
			`,"speculative.n_max":-1`:                      "speculative.n_max",
			`,"speculative.n_max":257`:                     "speculative.n_max",
			`,"speculative.n_max":0,"speculative":true`:    "speculative.n_max",
			`,"speculative.n_min":-2`:                      "speculative.n_min",
			`,"speculative.n_max":2,"speculative.n_min":3`: "speculative.n_min",
			`,"speculative.p_min":1.5`:                     "speculative.p_min",
			`,"speculative.p_min":-0.1`:                    "speculative.p_min",
			`,"speculative.n_max":"4"`:                     "speculative.n_max",
		} {
			if code, b := post(extra); code != 400 || !strings.Contains(b, `"param":"`+param+`"`) {
				t.Errorf("%s with %s: %d %s, want a 400 on %s", path, extra, code, b, param)
			}
		}
	}
}

// TestRepeatLastN: repeat_last_n (llama-server's and Ollama's) says which
// tokens the penalties count, on every endpoint that takes penalties: n,
// -1 all of prompt and answer; 0 turns the penalties off, as llama.cpp's
// penalty_last_n 0 does (PenaltiesOff, which the node applies); beside no
// penalty it asks nothing and is not kept; below -1 it is refused.
func TestRepeatLastN(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct {
		path, body  string
		lastN       int
		repeat, pen float64 // the penalties read: repeat, presence
		off         bool    // PenaltiesOff
	}{
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"repeat_penalty":1.1,"repeat_last_n":64}`, 64, 1.1, 0, false},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"presence_penalty":0.5,"repeat_last_n":-1}`, -1, 0, 0.5, false},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"repeat_penalty":1.1,"presence_penalty":0.5,"repeat_last_n":0}`, 0, 1.1, 0.5, true},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"repeat_last_n":0}`, 0, 0, 0, false},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"repeat_penalty":1,"repeat_last_n":64}`, 0, 1, 0, false},
		{"/v1/completions", `{"model":"tiny","prompt":"x","repeat_penalty":1.2,"repeat_last_n":8}`, 8, 1.2, 0, false},
		{"/completion", `{"prompt":"x","repeat_penalty":1.2,"repeat_last_n":-1}`, -1, 1.2, 0, false},
		{"/api/generate", `{"model":"tiny","prompt":"x","stream":false,"options":{"repeat_penalty":1.2,"repeat_last_n":32}}`, 32, 1.2, 0, false},
	} {
		code, _, b := ollamaPost(t, h, tc.path, tc.body)
		g := h.model.lastCall()
		if code != 200 || g.PenaltyLastN != tc.lastN || g.RepeatPenalty != tc.repeat || g.PresencePenalty != tc.pen || g.PenaltiesOff != tc.off {
			t.Errorf("%s %s: %d %s; read penalty_last_n %d (off %v), repeat %v, presence %v", tc.path, tc.body, code, b, g.PenaltyLastN, g.PenaltiesOff, g.RepeatPenalty, g.PresencePenalty)
		}
		// /completion's generation_settings says it, as llama-server's do.
		if tc.path == "/completion" && !strings.Contains(string(b), `"repeat_last_n":-1`) {
			t.Errorf("/completion's settings: %s, want repeat_last_n -1", b)
		}
	}
	code, _, b := ollamaPost(t, h, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"repeat_penalty":1.1,"repeat_last_n":-2}`)
	if code != 400 || !strings.Contains(string(b), `"param":"repeat_last_n"`) {
		t.Errorf("repeat_last_n -2: %d %s", code, b)
	}
	code, _, b = ollamaPost(t, h, "/api/generate", `{"model":"tiny","prompt":"x","options":{"repeat_last_n":-5}}`)
	if code != 400 || !strings.Contains(string(b), `repeat_last_n must be -1`) { // Ollama's errors are text
		t.Errorf("options.repeat_last_n -5: %d %s", code, b)
	}
}

// TestLlamaFilterSettings: /completion's generation_settings report
// llama.cpp's other filters as llama-server does: the request's where
// on, llama-server's off values where not.
func TestLlamaFilterSettings(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct {
		body string
		want map[string]any
	}{
		{`{"prompt":"x"}`, map[string]any{"typical_p": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0, "xtc_threshold": 0.1,
			"dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "min_keep": 0.0, "dry_multiplier": 0.0, "dry_base": 1.75,
			"dry_allowed_length": 2.0, "dry_penalty_last_n": 64.0}},
		{`{"prompt":"x","temperature":0.8,"typical_p":0.9,"top_n_sigma":1.5,"xtc_probability":0.4,"xtc_threshold":0.2,` +
			`"dynatemp_range":0.3,"dynatemp_exponent":2,"min_keep":3,"dry_multiplier":0.8,"dry_base":2,"dry_allowed_length":3,"dry_penalty_last_n":-1}`,
			map[string]any{"typical_p": 0.9, "top_n_sigma": 1.5, "xtc_probability": 0.4, "xtc_threshold": 0.2,
				"dynatemp_range": 0.3, "dynatemp_exponent": 2.0, "min_keep": 3.0, "dry_multiplier": 0.8, "dry_base": 2.0,
				"dry_allowed_length": 3.0, "dry_penalty_last_n": -1.0}},
	} {
		code, _, b := ollamaPost(t, h, "/completion", tc.body)
		var got struct {
			GenerationSettings map[string]any `json:"generation_settings"`
		}
		if err := json.Unmarshal(b, &got); err != nil || code != 200 {
			t.Fatalf("%s: %d %s", tc.body, code, b)
		}
		for k, v := range tc.want {
			if got.GenerationSettings[k] != v {
				t.Errorf("%s: generation_settings.%s %v, want %v", tc.body, k, got.GenerationSettings[k], v)
			}
		}
	}
}
