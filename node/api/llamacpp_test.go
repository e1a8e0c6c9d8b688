package api

import (
	"bufio"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
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
		"seed":5,"stop":["\n"],"repeat_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":0.25,"logit_bias":[[5,1.5],[9,false]],
		"cache_prompt":true,"id_slot":-1,"n_probs":0,"typical_p":1,"mirostat":0,"samplers":null,"stream":false}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	g = h.model.lastCall()
	if !reflect.DeepEqual(g.PromptIDs, []uint32{1, 2, 3}) || g.MaxTokens != 7 || *g.Temperature != 0 || g.TopK != 0 || *g.Seed != 5 ||
		!reflect.DeepEqual(g.Stop, []string{"\n"}) || g.RepeatPenalty != 1.1 || g.PresencePenalty != 0.5 || g.FrequencyPenalty != 0.25 ||
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
		{"cache_prompt", "false"}, {"id_slot", "2"}, {"ignore_eos", "true"}, {"n_probs", "5"}, {"return_tokens", "true"},
		{"n_keep", "4"}, {"n_indent", "2"}, {"repeat_last_n", "64"}, {"typical_p", "0.9"}, {"dynatemp_range", "0.5"},
		{"mirostat", "2"}, {"dry_multiplier", "0.8"}, {"xtc_probability", "0.5"}, {"min_keep", "1"},
		{"samplers", `["top_k"]`}, {"t_max_predict_ms", "500"}, {"image_data", `[{"data":"x","id":1}]`}, {"lora", `[{"id":0,"scale":1}]`},
		{"response_fields", `["content"]`}, {"post_sampling_probs", "true"}, {"timings_per_token", "true"}, {"return_progress", "true"},
		{"n_predict", "0"}, {"logit_bias", `[["Hello",-1]]`}, {"logit_bias", `[[1]]`}, {"prompt", `["a",[1,2]]`}, {"prompt", `[["a"],["b"]]`},
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
		`{"prompt":"x"}`: "model",
		`{"model":"tiny","prompt":"x","grammar":"root ::= \"a\"","json_schema":{"type":"string"}}`: "grammar",
		`{"model":"tiny"}`: "prompt",
	} {
		code, _, b := ollamaPost(t, h, "/completion", body)
		if code != 400 || !strings.Contains(string(b), `"param":"`+param+`"`) {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
}
