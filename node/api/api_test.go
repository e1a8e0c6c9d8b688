package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

func decodeJSON(t *testing.T, r io.Reader, v any) {
	t.Helper()
	if err := json.NewDecoder(r).Decode(v); err != nil {
		t.Fatalf("decode: %v", err)
	}
}

// TestLogitBiasBound: logit_bias takes OpenAI's 300 tokens, not one
// more.
func TestLogitBiasBound(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, n := range []int{300, 301} {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `,"%d":-1`, i)
		}
		resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x","logit_bias":{`+b.String()[1:]+`}}`)
		var got errResp
		decodeJSON(t, resp.Body, &got)
		resp.Body.Close()
		switch {
		case n == 300 && (resp.StatusCode != 200 || len(h.model.lastCall().LogitBias) != 300):
			t.Fatalf("300 tokens: %d %+v", resp.StatusCode, got.Error)
		case n == 301 && (resp.StatusCode != 400 || !strings.Contains(got.Error.Message, "names 301 tokens, at most 300")):
			t.Fatalf("301 tokens: %d %+v", resp.StatusCode, got.Error)
		}
	}
}

func TestChatCompletion(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
		"temperature":0.5,"top_p":0.9,"seed":-1,"stop":["\n"],"max_completion_tokens":10,"max_tokens":3,
		"presence_penalty":0.1,"frequency_penalty":-0.2,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"speculative":false,
		"logit_bias":{"50256":-100,"7":2.5},"metadata":{"fidelity_floor":"2","joule_ceiling_uj":5000000}}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int            `json:"prompt_tokens"`
			CompletionTokens int            `json:"completion_tokens"`
			TotalTokens      int            `json:"total_tokens"`
			Energy           map[string]any `json:"energy"`
		} `json:"usage"`
	}
	decodeJSON(t, resp.Body, &got)
	if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Created != 1700000000 || got.Model != "tiny" {
		t.Errorf("envelope = %+v", got)
	}
	if len(got.Choices) != 1 || got.Choices[0].Message.Role != "assistant" || got.Choices[0].Message.Content != "Hello, world!" || got.Choices[0].FinishReason != "stop" {
		t.Errorf("choices = %+v", got.Choices)
	}
	if got.Usage.PromptTokens != 3 || got.Usage.CompletionTokens != 4 || got.Usage.TotalTokens != 7 || got.Usage.Energy["energy_provenance"] != "Estimator" {
		t.Errorf("usage = %+v", got.Usage)
	}
	g := h.model.lastCall()
	if len(g.Messages) != 2 || g.Messages[1].Content != "hi there" || g.Messages[0].Role != "system" {
		t.Errorf("messages = %+v", g.Messages)
	}
	if g.MaxTokens != 10 || *g.Temperature != 0.5 || *g.TopP != 0.9 || *g.Seed != ^uint64(0) || len(g.Stop) != 1 ||
		g.PresencePenalty != 0.1 || g.FrequencyPenalty != -0.2 || g.TopK != 40 || g.MinP != 0.05 || g.RepeatPenalty != 1.1 || *g.FidelityFloor != 2 || *g.JouleCeilingUJ != 5000000 ||
		g.Speculative == nil || *g.Speculative || len(g.LogitBias) != 2 || g.LogitBias[50256] != -100 || g.LogitBias[7] != 2.5 {
		t.Errorf("generation = %+v", g)
	}
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		TotalTokens int            `json:"total_tokens"`
		Energy      map[string]any `json:"energy"`
	} `json:"usage"`
}

func TestChatCompletionStream(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", includeUsage), func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			resp := h.post(t, "/v1/chat/completions", fmt.Sprintf(
				`{"model":"tiny","stream":true,"stream_options":{"include_usage":%v},"messages":[{"role":"user","content":"hi"}]}`, includeUsage))
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := readSSE(t, resp.Body)
			if last := events[len(events)-1]; last.data != "[DONE]" {
				t.Fatalf("last event = %q, want [DONE]", last.data)
			}
			var chunks []chunk
			for _, e := range events[:len(events)-1] {
				var c chunk
				if err := json.Unmarshal([]byte(e.data), &c); err != nil {
					t.Fatalf("chunk %q: %v", e.data, err)
				}
				if c.Object != "chat.completion.chunk" || c.ID != chunks0ID(chunks, c.ID) {
					t.Fatalf("chunk envelope %+v", c)
				}
				hasUsageKey := strings.Contains(e.data, `"usage":`)
				if hasUsageKey != includeUsage {
					t.Fatalf("usage key present=%v in %s", hasUsageKey, e.data)
				}
				chunks = append(chunks, c)
			}
			first := chunks[0].Choices[0]
			if first.Delta.Role == nil || *first.Delta.Role != "assistant" {
				t.Fatalf("first chunk does not name the assistant role: %+v", first)
			}
			var text strings.Builder
			finishAt := -1
			for i, c := range chunks {
				if len(c.Choices) == 0 {
					continue
				}
				if c.Choices[0].Delta.Content != nil {
					text.WriteString(*c.Choices[0].Delta.Content)
				}
				if c.Choices[0].FinishReason != nil {
					finishAt = i
					if *c.Choices[0].FinishReason != "stop" {
						t.Fatalf("finish_reason %q", *c.Choices[0].FinishReason)
					}
				}
			}
			if text.String() != "Hello, world!" {
				t.Fatalf("streamed text %q", text.String())
			}
			wantFinish := len(chunks) - 1
			if includeUsage {
				wantFinish = len(chunks) - 2
				u := chunks[len(chunks)-1]
				if len(u.Choices) != 0 || u.Usage == nil || u.Usage.TotalTokens != 7 || u.Usage.Energy == nil {
					t.Fatalf("usage chunk = %+v", u)
				}
			}
			if finishAt != wantFinish {
				t.Fatalf("finish_reason in chunk %d of %d", finishAt, len(chunks))
			}
		})
	}
}

func chunks0ID(chunks []chunk, fallback string) string {
	if len(chunks) == 0 {
		return fallback
	}
	return chunks[0].ID
}

func TestCompletions(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":["Once"],"max_tokens":2}`)
	var got textCompletion
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	if got.Object != "text_completion" || got.Choices[0].Text != "Hello," || *got.Choices[0].FinishReason != "length" || got.Usage.CompletionTokens != 2 {
		t.Fatalf("completion = %+v", got)
	}
	if h.model.lastCall().Prompt != "Once" || h.model.lastCall().Messages != nil {
		t.Fatalf("generation = %+v", h.model.lastCall())
	}
	// A suffix: the model fills in the middle.
	resp = h.post(t, "/v1/completions", `{"model":"tiny","prompt":"def f():","suffix":"\nf()","max_tokens":2}`)
	resp.Body.Close()
	if g := h.model.lastCall(); resp.StatusCode != 200 || g.Prompt != "def f():" || g.Suffix != "\nf()" {
		t.Fatalf("suffix: %d, generation %+v", resp.StatusCode, g)
	}
	// A prompt of token ids, bare or as the one prompt of an array.
	for _, prompt := range []string{`[1,319,767]`, `[[1,319,767]]`} {
		resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":`+prompt+`,"max_tokens":2}`)
		resp.Body.Close()
		if g := h.model.lastCall(); resp.StatusCode != 200 || g.Prompt != "" || !slices.Equal(g.PromptIDs, []uint32{1, 319, 767}) {
			t.Fatalf("prompt %s: %d, generation %+v", prompt, resp.StatusCode, g)
		}
	}

	resp = h.post(t, "/v1/completions", `{"model":"tiny","prompt":"Once","stream":true}`)
	defer resp.Body.Close()
	events := readSSE(t, resp.Body)
	var text strings.Builder
	for _, e := range events[:len(events)-1] {
		var c textCompletion
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if events[len(events)-1].data != "[DONE]" || text.String() != "Hello, world!" {
		t.Fatalf("stream text %q, last %q", text.String(), events[len(events)-1].data)
	}
}

func TestResponses(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/responses", `{"model":"tiny","instructions":"be kind","input":"hi","max_output_tokens":50}`)
	var got responseJSON
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	if got.Object != "response" || got.Status != "completed" || got.Output[0].Content[0].Text != "Hello, world!" || got.Usage.OutputTokens != 4 {
		t.Fatalf("response = %+v", got)
	}
	if msgs := h.model.lastCall().Messages; len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Content != "hi" {
		t.Fatalf("messages = %+v", msgs)
	}

	resp = h.post(t, "/v1/responses", `{"model":"tiny","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true}`)
	defer resp.Body.Close()
	events := readSSE(t, resp.Body)
	var names []string
	var text strings.Builder
	for i, e := range events {
		var fields map[string]any
		if err := json.Unmarshal([]byte(e.data), &fields); err != nil {
			t.Fatal(err)
		}
		if fields["type"] != e.name || fields["sequence_number"] != float64(i) {
			t.Fatalf("event %d: name %q, data %v", i, e.name, fields)
		}
		if e.name == "response.output_text.delta" {
			text.WriteString(fields["delta"].(string))
			continue
		}
		names = append(names, e.name)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(names, ",") != strings.Join(want, ",") || text.String() != "Hello, world!" {
		t.Fatalf("events %v, text %q", names, text.String())
	}
}

// errResp is an error answer's body.
type errResp struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
		Param   any    `json:"param"`
		Details any    `json:"details"`
	} `json:"error"`
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name       string
		path, body string
		modelErr   error
		wantStatus int
		wantCode   string
		wantInMsg  string
	}{
		{"bad json", "/v1/chat/completions", `{"model":`, nil, 400, "invalid_request", "not valid JSON"},
		{"empty body", "/v1/chat/completions", ``, nil, 400, "invalid_request", "empty"},
		{"wrong type", "/v1/chat/completions", `{"model":"tiny","messages":"hi"}`, nil, 400, "invalid_request", "wrong type"},
		{"two values", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}]} {}`, nil, 400, "invalid_request", "more than one JSON value"},
		{"missing model", "/v1/completions", `{"prompt":"x"}`, nil, 400, "invalid_request", "model is required"},
		{"no messages", "/v1/chat/completions", `{"model":"tiny","messages":[]}`, nil, 400, "invalid_request", "at least one"},
		{"bad role", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"robot","content":"x"}]}`, nil, 400, "invalid_request", "robot"},
		{"image part", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, nil, 400, "invalid_request", "image_url"},
		{"n=0", "/v1/chat/completions", `{"model":"tiny","n":0,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "n must be between 1 and 64"},
		{"n=65", "/v1/completions", `{"model":"tiny","n":65,"prompt":"x"}`, nil, 400, "invalid_request", "n must be between 1 and 64"},
		{"too many choices", "/v1/completions", `{"model":"tiny","n":33,"prompt":["x","y"]}`, nil, 400, "invalid_request", "66 choices (2 prompts, n 33)"},
		{"n on responses", "/v1/responses", `{"model":"tiny","n":2,"input":"x"}`, nil, 400, "invalid_request", "n must be 1 on /v1/responses"},
		{"n on a grant", "/v1/chat/completions", `{"model":"tiny","n":2,"jcp_presentation":{"x":1},"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "rides on a grant"},
		{"empty batch", "/v1/completions", `{"model":"tiny","prompt":[]}`, nil, 400, "invalid_request", "prompt"},
		{"temperature", "/v1/chat/completions", `{"model":"tiny","temperature":3,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "temperature"},
		{"top_k negative", "/v1/chat/completions", `{"model":"tiny","top_k":-1,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "top_k must be"},
		{"top_k fraction", "/v1/chat/completions", `{"model":"tiny","top_k":4.5,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "top_k"},
		{"min_p above one", "/v1/chat/completions", `{"model":"tiny","min_p":1.5,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "min_p must be"},
		{"repeat_penalty negative", "/v1/chat/completions", `{"model":"tiny","repeat_penalty":-1,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "repeat_penalty must be"},
		{"repeat_penalty huge", "/v1/chat/completions", `{"model":"tiny","repeat_penalty":1e9,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "repeat_penalty must be"},
		{"logit_bias array", "/v1/chat/completions", `{"model":"tiny","logit_bias":[[1,5]],"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "an object from token ids"},
		{"logit_bias word key", "/v1/completions", `{"model":"tiny","logit_bias":{"hello":5},"prompt":"x"}`, nil, 400, "invalid_request", `key "hello" is not a token id`},
		{"logit_bias negative key", "/v1/completions", `{"model":"tiny","logit_bias":{"-1":5},"prompt":"x"}`, nil, 400, "invalid_request", `key "-1"`},
		{"logit_bias padded key", "/v1/completions", `{"model":"tiny","logit_bias":{"07":5},"prompt":"x"}`, nil, 400, "invalid_request", `key "07"`},
		{"logit_bias key past 32 bits", "/v1/completions", `{"model":"tiny","logit_bias":{"4294967296":5},"prompt":"x"}`, nil, 400, "invalid_request", `key "4294967296"`},
		{"logit_bias past 100", "/v1/responses", `{"model":"tiny","logit_bias":{"3":-100.5},"input":"x"}`, nil, 400, "invalid_request", "between -100 and 100, got -100.5"},
		{"logit_bias false", "/v1/chat/completions", `{"model":"tiny","logit_bias":{"3":false},"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "map token ids to numbers"},
		{"max tokens 0", "/v1/chat/completions", `{"model":"tiny","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "at least 1"},
		{"five stops", "/v1/chat/completions", `{"model":"tiny","stop":["a","b","c","d","e"],"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "at most 4"},
		{"fidelity floor", "/v1/chat/completions", `{"model":"tiny","metadata":{"fidelity_floor":"9"},"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "F0..F4"},
		{"ceiling", "/v1/chat/completions", `{"model":"tiny","metadata":{"joule_ceiling_uj":"lots"},"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request", "non-negative integer"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, nil, 404, "model_not_found", "available: tiny"},
		{"token prompt of strings and ids", "/v1/completions", `{"model":"tiny","prompt":[1,"a"]}`, nil, 400, "invalid_request", "prompt[0] must be a string or an array of token ids"},
		{"batch of ids with a suffix", "/v1/completions", `{"model":"tiny","prompt":["a",[3]],"suffix":"b"}`, nil, 400, "invalid_request", "suffix"},
		{"negative token", "/v1/completions", `{"model":"tiny","prompt":[1,-2]}`, nil, 400, "invalid_request", "prompt[1] -2 is not a token id"},
		{"empty token prompt", "/v1/completions", `{"model":"tiny","prompt":[[]]}`, nil, 400, "invalid_request", "prompt[0] is an empty token array"},
		{"null prompt item", "/v1/completions", `{"model":"tiny","prompt":[null]}`, nil, 400, "invalid_request", "prompt[0] null is not a token id"},
		{"suffix after ids", "/v1/completions", `{"model":"tiny","prompt":[1,2],"suffix":"x"}`, nil, 400, "invalid_request", "takes a text prompt"},
		{"suffix with echo", "/v1/completions", `{"model":"tiny","prompt":"a","suffix":"x","echo":true}`, nil, 400, "invalid_request", "do not go together"},
		{"nested prompt", "/v1/completions", `{"model":"tiny","prompt":[["a"]]}`, nil, 400, "invalid_request", "prompt[0] must be a string or an array of token ids"},
		{"responses bad item", "/v1/responses", `{"model":"tiny","input":[{"type":"file_search_call"}]}`, nil, 400, "invalid_request", "function_call"},
		{"responses call without an id", "/v1/responses", `{"model":"tiny","input":[{"type":"function_call"}]}`, nil, 400, "invalid_request", "call_id is required"},
		{"too large", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`, nil, 413, "request_too_large", "larger than 1024"},
		{"context overflow", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`,
			Errorf(400, "invalid_request_error", "context_length_exceeded", "prompt is 300 tokens; the context holds 256"), 400, "context_length_exceeded", "256"},
		{"no admissible backend", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`,
			&Error{Status: 422, Type: "invalid_request_error", Code: "no_admissible_backend", Message: "no backend", Details: []string{"cpu: over ceiling"}}, 422, "no_admissible_backend", "no backend"},
		{"internal", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`, errBoom, 500, "internal_error", "boom"},
		{"unknown url", "/v1/images/generations", `{}`, nil, 404, "unknown_url", "/v1/images/generations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{MaxBodyBytes: 1024}, nil)
			h.model.err = tt.modelErr
			resp := h.post(t, tt.path, tt.body)
			defer resp.Body.Close()
			var got errResp
			decodeJSON(t, resp.Body, &got)
			if resp.StatusCode != tt.wantStatus || got.Error.Code != tt.wantCode || !strings.Contains(got.Error.Message, tt.wantInMsg) {
				t.Fatalf("got %d %+v, want %d %s containing %q", resp.StatusCode, got.Error, tt.wantStatus, tt.wantCode, tt.wantInMsg)
			}
			if got.Error.Type == "" {
				t.Fatal("error without a type")
			}
		})
	}
}

// TestWrongMethod: a served path asked with another method is 405 with
// the methods it takes in Allow, on the API and on the mesh handler; an
// unserved path stays 404.
func TestWrongMethod(t *testing.T) {
	h := newHarness(t, Config{MeshAccess: anyPeer{}}, nil)
	mesh := meshServer(t, h.srv, testID(9))
	for _, tt := range []struct {
		base, method, path string
		status             int
		allow, code        string
	}{
		{h.http.URL, http.MethodGet, "/v1/chat/completions", 405, "POST", "method_not_allowed"},
		{h.http.URL, http.MethodPost, "/v1/models", 405, "GET, HEAD", "method_not_allowed"},
		{h.http.URL, http.MethodDelete, "/api/status", 405, "GET, HEAD", "method_not_allowed"},
		{h.http.URL, http.MethodGet, "/v1/images/generations", 404, "", "unknown_url"},
		{mesh.URL, http.MethodGet, "/v1/completions", 405, "POST", "method_not_allowed"},
		{mesh.URL, http.MethodGet, "/api/status", 404, "", "unknown_url"},
	} {
		req, err := http.NewRequest(tt.method, tt.base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		decodeJSON(t, resp.Body, &got)
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Allow") != tt.allow || got.Error.Code != tt.code {
			t.Errorf("%s %s: %d, Allow %q, code %q; want %d, %q, %q", tt.method, tt.path,
				resp.StatusCode, resp.Header.Get("Allow"), got.Error.Code, tt.status, tt.allow, tt.code)
		}
	}
}

// TestStreamErrorMidStream: a generation that fails after its first
// tokens ends the stream with the error in each endpoint's own shape: a
// data-only {"error": ...} for chat and completions (no [DONE]), a typed
// "error" event for the Responses API.
func TestStreamErrorMidStream(t *testing.T) {
	boom := &Error{Status: 503, Type: "server_error", Code: "model_draining", Message: "going away"}
	for _, tt := range []struct{ path, body, event string }{
		{"/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"x"}]}`, ""},
		{"/v1/completions", `{"model":"tiny","stream":true,"prompt":"x"}`, ""},
		{"/v1/responses", `{"model":"tiny","stream":true,"input":"x"}`, "error"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			h.model.midErr = boom
			resp := h.post(t, tt.path, tt.body)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: the stream had started", resp.StatusCode)
			}
			events := readSSE(t, resp.Body)
			last := events[len(events)-1]
			if last.name != tt.event {
				t.Fatalf("last event %q %s, want event name %q", last.name, last.data, tt.event)
			}
			if tt.event == "" {
				var got struct {
					Error struct{ Code, Message, Type string } `json:"error"`
				}
				if err := json.Unmarshal([]byte(last.data), &got); err != nil || got.Error.Code != boom.Code || got.Error.Message != boom.Message || got.Error.Type != boom.Type {
					t.Fatalf("last event %s (%v), want the error", last.data, err)
				}
				return
			}
			var got struct {
				Type, Code, Message string
				Param               *string
				Seq                 *int `json:"sequence_number"`
			}
			var prev struct {
				Seq int `json:"sequence_number"`
			}
			json.Unmarshal([]byte(events[len(events)-2].data), &prev)
			if err := json.Unmarshal([]byte(last.data), &got); err != nil || got.Type != "error" || got.Code != boom.Code ||
				got.Message != boom.Message || got.Param != nil || got.Seq == nil || *got.Seq != prev.Seq+1 {
				t.Fatalf("error event %s (%v), want type error, code %s, the message, param null, sequence %d", last.data, err, boom.Code, prev.Seq+1)
			}
		})
	}
}

func TestStreamErrorBeforeFirstToken(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	h.model.err = &Error{Status: 422, Type: "invalid_request_error", Code: "no_admissible_backend", Message: "no backend"}
	resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 422 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, content-type %s: a stream that fails before any token must get an HTTP error", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestOverloadAnd429(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 1, QueueDepth: 1, RetryAfter: 2 * time.Second}, nil)
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 4)
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	results := make(chan int, 2)
	for i := 0; i < 2; i++ { // one running, one queued
		go func() {
			resp := h.post(t, "/v1/chat/completions", body)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	<-h.model.started // the first is running
	// Wait until the second is queued behind it, then a third is refused.
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.queued("tiny") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("second request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp := h.post(t, "/v1/chat/completions", body)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("third request: %d, Retry-After %q; want 429, 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(h.model.block)
	for i := 0; i < 2; i++ {
		if code := <-results; code != 200 {
			t.Fatalf("queued request got %d", code)
		}
	}
}

func TestClientDisconnectCancelsGeneration(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 1, QueueDepth: -1}, nil)
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-h.model.started
	cancel()
	<-done
	// The slot is freed: with concurrency 1 and no queue, a new request runs.
	h.model.unblock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never freed after the client left (status %d)", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAPIKey(t *testing.T) {
	h := newHarness(t, Config{APIKey: "sekret"}, nil)
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	for _, tt := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer sekret", 200}} {
		resp := h.post(t, "/v1/chat/completions", body, "Authorization", tt.auth)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("auth %q: %d, want %d", tt.auth, resp.StatusCode, tt.want)
		}
	}
	for _, p := range []string{"/health", "/v1/health"} {
		resp, _ := http.Get(h.http.URL + p)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s needs no key, got %d", p, resp.StatusCode)
		}
	}
}

func TestNodeEndpoints(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(h.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		decodeJSON(t, resp.Body, &v)
		return resp.StatusCode, v
	}
	if code, v := get("/v1/mesh/steward"); code != 200 || v["steward"] != "did:key:z6MkFake" {
		t.Errorf("steward: %d %v", code, v)
	}
	if code, v := get("/api/invite"); code != 200 || v["token"] != "invite-token" {
		t.Errorf("invite: %d %v", code, v)
	}
	if code, v := get("/v1/models"); code != 200 || v["object"] != "list" || len(v["data"].([]any)) != 1 {
		t.Errorf("models: %d %v", code, v)
	}
	// Retrieve: the list's object, and 404 model_not_found naming those
	// there are; an id with a slash reaches the handler whole.
	if code, v := get("/v1/models/tiny"); code != 200 || v["id"] != "tiny" || v["object"] != "model" || v["local"] != true {
		t.Errorf("retrieve tiny: %d %v", code, v)
	}
	for _, id := range []string{"nope", "org/nope"} {
		code, v := get("/v1/models/" + id)
		e, _ := v["error"].(map[string]any)
		if code != 404 || e["code"] != "model_not_found" || e["param"] != "model" ||
			!strings.Contains(e["message"].(string), `"`+id+`"`) || !strings.Contains(e["message"].(string), "available: tiny") {
			t.Errorf("retrieve %s: %d %v", id, code, v)
		}
	}
	resp := h.post(t, "/v1/mesh/witness", `{"receipt":{},"envelope_hex":"00"}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("witness held: %d", resp.StatusCode)
	}
	h.srv.node.(*fakeNode).held = false
	resp = h.post(t, "/v1/mesh/witness", `{"receipt":{},"envelope_hex":"00"}`)
	resp.Body.Close()
	if resp.StatusCode != 409 {
		t.Errorf("witness not held: %d, want 409", resp.StatusCode)
	}
}

// TestAttackTrailingBracket: a body with a stray bracket after it
// (found by FuzzParseRequest) had passed the JSON reader, whose More
// check does not see a closing bracket, while the field check's own
// parse failed on it and let every field through: an option meshnode
// does not honour (audio output), or one no API defines, was served
// without it. Each endpoint now refuses the body as it is.
func TestAttackTrailingBracket(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"tiny","audio":{"voice":"alloy","format":"mp3"},"messages":[{"role":"user","content":"x"}]}}`},
		{"/v1/completions", `{"model":"tiny","prompt":"x","bogus":1}]`},
		{"/v1/messages", `{"model":"tiny","max_tokens":5,"mcp_servers":[{}],"messages":[{"role":"user","content":"x"}]}}`},
		{"/api/chat", `{"model":"tiny","stream":false,"bogus":1,"messages":[{"role":"user","content":"x"}]}}`},
		{"/completion", `{"model":"tiny","prompt":"x","ignore_eos":true}}`},
	} {
		resp := h.post(t, tc.path, tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "more than one JSON value") {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, resp.StatusCode, b)
		}
	}
}

func TestInviteLoopbackOnly(t *testing.T) {
	if isLoopback("192.168.1.5:4000") || !isLoopback("127.0.0.1:4000") || !isLoopback("[::1]:4000") || isLoopback("junk") {
		t.Fatal("isLoopback wrong")
	}
}

// TestRelayThroughMesh runs two API servers: B serves "remote-model"
// behind its mesh handler; A has no such model and relays a streaming
// request to B through the (fake) mesh tunnel.
func TestRelayThroughMesh(t *testing.T) {
	idA, idB, idDead := testID(0xa), testID(0xb), testID(0xd)
	modelB := &fakeModel{pieces: []string{"from", " B"}}
	regB := &fakeRegistry{self: idB, local: map[string]Model{"remote-model": modelB}}
	// B believes A hosts "loop-model": a relayed request for it must not bounce back.
	meshB := &fakeMesh{hosts: map[string][]identity.EndpointID{"loop-model": {idA}}}
	srvB := New(Config{MeshAccess: anyPeer{}}, idB, regB, meshB, &fakeNode{}, nil, nil)
	tunnelB := meshServer(t, srvB, idA)

	meshA := &fakeMesh{
		hosts:   map[string][]identity.EndpointID{"remote-model": {idDead, idB}, "loop-model": {idB}},
		targets: map[identity.EndpointID]string{idB: tunnelB.Listener.Addr().String()},
	}
	regA := &fakeRegistry{self: idA, local: map[string]Model{}, remote: map[string][]identity.EndpointID{"remote-model": {idB}}}
	srvA := New(Config{APIKey: "a-key"}, idA, regA, meshA, &fakeNode{}, nil, nil)
	apiA := httptest.NewServer(srvA.Handler())
	defer apiA.Close()

	req, _ := http.NewRequest(http.MethodPost, apiA.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"remote-model","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer a-key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("relay status %d: %s", resp.StatusCode, b)
	}
	events := readSSE(t, resp.Body)
	var text strings.Builder
	for _, e := range events[:len(events)-1] {
		var c chunk
		json.Unmarshal([]byte(e.data), &c)
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil {
			text.WriteString(*c.Choices[0].Delta.Content)
		}
	}
	if text.String() != "from B" || events[len(events)-1].data != "[DONE]" {
		t.Fatalf("relayed text %q", text.String())
	}
	if len(meshA.dials) != 2 || meshA.dials[0] != idDead || meshA.dials[1] != idB {
		t.Fatalf("dials = %v: want the dead host tried first, then B", meshA.dials)
	}

	// A relayed request for a model B does not serve is answered 404 by
	// B, never relayed onwards.
	req, _ = http.NewRequest(http.MethodPost, apiA.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"loop-model","messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer a-key")
	req.Header.Set("Content-Type", "application/json")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if resp2.StatusCode != 404 || len(meshB.dials) != 0 {
		t.Fatalf("loop: status %d, B dialled %v", resp2.StatusCode, meshB.dials)
	}

	// Anthropic's Messages API is relayed the same way, its answer and
	// the host's refusal in Anthropic's shape, the key sent as its SDKs
	// send it.
	for _, tc := range []struct {
		model  string
		status int
		want   string
	}{
		{"remote-model", 200, `"content":[{"type":"text","text":"from B"}]`},
		{"loop-model", 404, `{"type":"error","error":{"type":"not_found_error"`},
	} {
		req, _ = http.NewRequest(http.MethodPost, apiA.URL+"/v1/messages",
			strings.NewReader(`{"model":"`+tc.model+`","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("X-Api-Key", "a-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
			t.Fatalf("messages for %s: %d %s", tc.model, resp.StatusCode, b)
		}
	}

	// The mesh handler serves only generation endpoints.
	r3, _ := http.Get(tunnelB.URL + "/api/invite")
	r3.Body.Close()
	if r3.StatusCode != 404 {
		t.Fatalf("mesh handler served /api/invite: %d", r3.StatusCode)
	}
}

func TestConcurrentClients(t *testing.T) {
	before := runtime.NumGoroutine()
	h := newHarness(t, Config{Concurrency: 2, QueueDepth: 8}, nil)
	var wg sync.WaitGroup
	codes := make(chan int, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp := h.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"tiny","stream":%v,"messages":[{"role":"user","content":"x"}]}`, i%2 == 0))
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}(i)
	}
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		switch c {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("status %d: want 200 or 429", c)
		}
	}
	if ok == 0 {
		t.Fatal("no request succeeded")
	}
	h.http.Close()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestContentTypeGuard: bodies a web page can send cross-origin without a
// preflight are refused — text/plain, forms, multipart, and a body with
// no Content-Type (fetch of a byte array) — and JSON is accepted.
func TestContentTypeGuard(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	for _, tt := range []struct {
		ct   string
		want int
	}{
		{"application/json", 200},
		{"application/json; charset=utf-8", 200},
		{"application/vnd.api+json", 200},
		{"", 415},
		{"text/plain;charset=UTF-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
	} {
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/chat/completions", strings.NewReader(body))
		if tt.ct != "" {
			req.Header.Set("Content-Type", tt.ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("Content-Type %q: %d, want %d", tt.ct, resp.StatusCode, tt.want)
		}
	}
}

// TestAttackBrowser: a web page the user visits could use the node: with
// its DNS name rebound to 127.0.0.1 (Host: evil.example), from its own
// origin (Origin, Sec-Fetch-Site), and with a body sent without a
// Content-Type. Each is refused before anything is served; loopback
// names, IP addresses, the node's own origin and the names and origins
// the owner lists are served, and a listed origin gets CORS answers.
func TestAttackBrowser(t *testing.T) {
	h := newHarness(t, Config{AllowedHosts: []string{"mybox.lan"}, AllowedOrigins: []string{"http://localhost:3000"}}, nil)
	port := h.http.Listener.Addr().(*net.TCPAddr).Port
	chat := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	do := func(method, path, body string, header ...string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			if header[i] == "Host" {
				req.Host = header[i+1]
				continue
			}
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	own := fmt.Sprintf("127.0.0.1:%d", port)
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		header       []string
		want         int
		code         string
	}{
		{"rebound status", "GET", "/api/status", "", []string{"Host", fmt.Sprintf("evil.example:%d", port)}, 403, "host_not_allowed"},
		{"rebound invite", "GET", "/api/invite", "", []string{"Host", "evil.example"}, 403, "host_not_allowed"},
		{"rebound chat", "POST", "/v1/chat/completions", chat, []string{"Host", "evil.example:9337", "Origin", "http://evil.example:9337"}, 403, "host_not_allowed"},
		{"cross-origin chat", "POST", "/v1/chat/completions", chat, []string{"Origin", "https://evil.example"}, 403, "cross_origin_refused"},
		{"cross-origin status", "GET", "/api/status", "", []string{"Origin", "https://evil.example"}, 403, "cross_origin_refused"},
		{"opaque origin", "POST", "/v1/chat/completions", chat, []string{"Origin", "null"}, 403, "cross_origin_refused"},
		{"another local port", "POST", "/v1/chat/completions", chat, []string{"Origin", "http://127.0.0.1:8080"}, 403, "cross_origin_refused"},
		{"no-cors from a site", "GET", "/api/status", "", []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross_origin_refused"},
		{"cors preflight, unlisted", "OPTIONS", "/v1/chat/completions", "", []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}, 403, "cross_origin_refused"},

		{"loopback IP", "GET", "/api/status", "", []string{"Host", own}, 200, ""},
		{"localhost", "GET", "/api/status", "", []string{"Host", fmt.Sprintf("localhost:%d", port)}, 200, ""},
		{"ipv6 literal", "GET", "/api/status", "", []string{"Host", fmt.Sprintf("[::1]:%d", port)}, 200, ""},
		{"LAN address", "GET", "/api/status", "", []string{"Host", "192.168.1.5:9337"}, 200, ""},
		{"listed host", "GET", "/api/status", "", []string{"Host", "MyBox.lan:9337"}, 200, ""},
		{"own origin", "POST", "/v1/chat/completions", chat, []string{"Origin", "http://" + own, "Sec-Fetch-Site", "same-origin"}, 200, ""},
		{"listed origin", "POST", "/v1/chat/completions", chat, []string{"Origin", "http://localhost:3000"}, 200, ""},
		{"same-origin fetch", "GET", "/v1/models", "", []string{"Sec-Fetch-Site", "same-origin"}, 200, ""},
		{"curl", "GET", "/v1/models", "", nil, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := do(tc.method, tc.path, tc.body, tc.header...)
			if status != tc.want || tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`) {
				t.Fatalf("%d %s, want %d %s", status, body, tc.want, tc.code)
			}
			if tc.want != 200 && hdr.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("a refusal carries CORS headers: %v", hdr)
			}
		})
	}
	// A listed origin's preflight is answered, and its answers readable.
	status, hdr, _ := do("OPTIONS", "/v1/chat/completions", "", "Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST")
	if status != 204 || hdr.Get("Access-Control-Allow-Origin") != "http://localhost:3000" || !strings.Contains(hdr.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", status, hdr)
	}
	if _, hdr, _ := do("POST", "/v1/chat/completions", chat, "Origin", "http://localhost:3000"); hdr.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Fatalf("listed origin's answer: %v", hdr)
	}
	// The refusal comes before the API key: a page learns nothing.
	hk := newHarness(t, Config{APIKey: "sekrit"}, nil)
	req, _ := http.NewRequest("GET", hk.http.URL+"/api/status", nil)
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("rebound request to a keyed node: %d", resp.StatusCode)
	}
}
