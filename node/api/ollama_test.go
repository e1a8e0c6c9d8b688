package api

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// ollamaAnswer is an Ollama chat or generate object as a client reads it.
type ollamaAnswer struct {
	Model     string `json:"model"`
	CreatedAt string `json:"created_at"`
	Message   *struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Response        *string        `json:"response"`
	Done            bool           `json:"done"`
	DoneReason      string         `json:"done_reason"`
	TotalDuration   int64          `json:"total_duration"`
	PromptEvalCount int            `json:"prompt_eval_count"`
	EvalCount       int            `json:"eval_count"`
	Energy          map[string]any `json:"energy"`
	Error           string         `json:"error"`
}

func ollamaPost(t *testing.T, h *harness, path, body string) (int, string, []byte) {
	t.Helper()
	resp := h.post(t, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// ndjson reads a stream strictly: every line one JSON object.
func ndjson(t *testing.T, b []byte) []ollamaAnswer {
	t.Helper()
	var out []ollamaAnswer
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var a ollamaAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, a)
	}
	return out
}

func TestOllamaChat(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	code, ct, b := ollamaPost(t, h, "/api/chat", `{"model":"tiny","stream":false,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],
		"options":{"temperature":0.5,"top_k":40,"top_p":0.9,"min_p":0.05,"seed":7,"num_predict":20,"stop":["END"],"repeat_penalty":1.1,"repeat_last_n":-1,"typical_p":0.9,"num_ctx":128,"mirostat":0},"keep_alive":-1}`)
	var a ollamaAnswer
	if err := json.Unmarshal(b, &a); err != nil || code != 200 || ct != "application/json" || a.Model != "tiny" || a.CreatedAt == "" ||
		a.Message == nil || a.Message.Role != "assistant" || a.Message.Content != "Hello, world!" || !a.Done || a.DoneReason != "stop" ||
		a.PromptEvalCount != 3 || a.EvalCount != 4 || a.Energy["energy_provenance"] != "Estimator" || a.Response != nil {
		t.Fatalf("%d %s %s", code, ct, b)
	}
	g := h.model.lastCall()
	if *g.Temperature != 0.5 || g.TopK != 40 || *g.TopP != 0.9 || g.MinP != 0.05 || *g.Seed != 7 || g.MaxTokens != 20 ||
		!reflect.DeepEqual(g.Stop, []string{"END"}) || g.RepeatPenalty != 1.1 || g.PenaltyLastN != -1 || g.TypicalP != 0.9 || g.ContextLimit != 128 ||
		!reflect.DeepEqual(g.Messages, []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}) {
		t.Fatalf("generation %+v", g)
	}

	// Streamed by default: a line a piece, then the done line.
	code, ct, b = ollamaPost(t, h, "/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":-1}}`)
	lines := ndjson(t, b)
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		if l.Done || l.Message == nil || l.Energy != nil {
			t.Fatalf("a piece %+v", l)
		}
		text.WriteString(l.Message.Content)
	}
	last := lines[len(lines)-1]
	if code != 200 || ct != "application/x-ndjson" || len(lines) != 5 || text.String() != "Hello, world!" || !last.Done ||
		last.DoneReason != "stop" || last.EvalCount != 4 || last.Energy == nil || last.Message.Content != "" {
		t.Fatalf("%d %s: %s", code, ct, b)
	}
	if g := h.model.lastCall(); g.MaxTokens < 1<<30 {
		t.Fatalf("num_predict -1: max tokens %d", g.MaxTokens)
	}

	// A failure mid-stream ends it with Ollama's error line.
	h.model.midErr = errBoom
	_, _, b = ollamaPost(t, h, "/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	lines = ndjson(t, b)
	if l := lines[len(lines)-1]; !strings.Contains(l.Error, "boom") || l.Done {
		t.Fatalf("last line %+v", l)
	}
}

func TestOllamaGenerate(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct {
		body   string
		check  func(g *Generation) bool
		detail string
	}{
		{`{"model":"tiny","prompt":"hi","system":"be brief","stream":false}`, func(g *Generation) bool {
			return reflect.DeepEqual(g.Messages, []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}})
		}, "through the chat template, after the system message"},
		{`{"model":"tiny","prompt":"once","raw":true,"stream":false}`, func(g *Generation) bool { return g.Messages == nil && g.Prompt == "once" }, "raw"},
		{`{"model":"tiny","prompt":"def f(","suffix":"    return x","stream":false}`, func(g *Generation) bool { return g.Prompt == "def f(" && g.Suffix == "    return x" }, "fill in the middle"},
	} {
		code, _, b := ollamaPost(t, h, "/api/generate", tc.body)
		var a ollamaAnswer
		if err := json.Unmarshal(b, &a); err != nil || code != 200 || a.Response == nil || *a.Response != "Hello, world!" || a.Message != nil || !a.Done {
			t.Fatalf("%s: %d %s", tc.detail, code, b)
		}
		if g := h.model.lastCall(); !tc.check(g) {
			t.Errorf("%s: generation %+v", tc.detail, g)
		}
	}
	_, _, b := ollamaPost(t, h, "/api/generate", `{"model":"tiny","prompt":"hi"}`)
	lines := ndjson(t, b)
	if len(lines) != 5 || *lines[0].Response != "Hello" || !lines[4].Done || *lines[4].Response != "" {
		t.Fatalf("stream %s", b)
	}
}

// TestOllamaTools: Ollama's tools (OpenAI's function form) reach the
// template; the reply's calls come back with their arguments as objects;
// calls and results sent back are paired without ids, a result answering
// the first open call of its tool_name.
func TestOllamaTools(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
		{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	for _, stream := range []string{"false", "true"} {
		code, _, b := ollamaPost(t, h, "/api/chat", `{"model":"tiny","stream":`+stream+`,"messages":[{"role":"user","content":"weather?"}],`+tools+`}`)
		lines := ndjson(t, b)
		last := lines[len(lines)-1]
		var content strings.Builder
		for _, l := range lines {
			content.WriteString(l.Message.Content)
		}
		if code != 200 || content.String() != "Checking." || len(last.Message.ToolCalls) != 2 ||
			last.Message.ToolCalls[0].Function.Name != "get_weather" || string(last.Message.ToolCalls[0].Function.Arguments) != `{"city":"Paris"}` ||
			last.Message.ToolCalls[1].Function.Name != "get_time" {
			t.Fatalf("stream %s: %d %s", stream, code, b)
		}
	}
	code, _, b := ollamaPost(t, h, "/api/chat", `{"model":"tiny","stream":false,`+tools+`,"messages":[{"role":"user","content":"weather?"},
		{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}},{"function":{"name":"get_time","arguments":{}}}]},
		{"role":"tool","tool_name":"get_time","content":"noon"},{"role":"tool","content":"sunny"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	got := h.model.lastCall().Messages
	if len(got) != 4 || got[1].ToolCalls[0].ID != "call_1_0" || got[1].ToolCalls[0].Arguments != `{"city":"Paris"}` ||
		got[2].ToolCallID != "call_1_1" || got[2].Name != "get_time" || got[3].ToolCallID != "call_1_0" || got[3].Name != "get_weather" {
		t.Fatalf("messages %+v", got)
	}
}

// TestOllamaErrors: what is refused, in Ollama's error shape.
func TestOllamaErrors(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/api/chat", `{"model":"tiny",` + user + `,"options":{"mirostat":3}}`, 400, "mirostat must be 0 (off), 1 or 2"},
		{"/api/chat", `{"model":"tiny",` + user + `,"options":{"mirostat":2,"temperature":0.5,"mirostat_eta":2}}`, 400, "mirostat_eta must be above 0 and at most 1"},
		{"/api/chat", `{"model":"tiny",` + user + `,"options":{"mirostat":2,"mirostat_tau":101,"temperature":0.5}}`, 400, "mirostat_tau must be above 0 and at most 100"},
		{"/api/chat", `{"model":"tiny",` + user + `,"options":{"bogus":1}}`, 400, `unknown option "bogus"`},
		{"/api/chat", `{"model":"tiny",` + user + `,"options":{"num_predict":0}}`, 400, "num_predict"},
		{"/api/chat", `{"model":"tiny",` + user + `,"options":{"temperature":3}}`, 400, "temperature"},
		{"/api/chat", `{"model":"tiny",` + user + `,"keep_alive":0}`, 400, "keep_alive 0 (unload the model now) is not supported"},
		{"/api/chat", `{"model":"tiny",` + user + `,"keep_alive":"0s"}`, 400, "keep_alive 0 (unload"},
		{"/api/chat", `{"model":"tiny",` + user + `,"keep_alive":"5 minutes"}`, 400, "is not a duration"},
		{"/api/chat", `{"model":"tiny",` + user + `,"keep_alive":true}`, 400, "keep_alive must be"},
		{"/api/chat", `{"model":"tiny",` + user + `,"think":true}`, 400, "does not reason"},
		{"/api/chat", `{"model":"tiny",` + user + `,"think":"high"}`, 400, "does not reason"},
		{"/api/chat", `{"model":"tiny",` + user + `,"think":"extreme"}`, 400, `think "extreme" is not one of low, medium, high`},
		{"/api/chat", `{"model":"tiny",` + user + `,"format":"yaml"}`, 400, `format must be "json"`},
		{"/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"hi","images":["aGk="]}]}`, 400, "read text"},
		{"/api/chat", `{"model":"tiny","messages":[{"role":"tool","content":"x"}]}`, 400, "answers no earlier assistant tool call"},
		{"/api/chat", `{"model":"nope",` + user + `}`, 404, `model "nope" is not served`},
		{"/api/generate", `{"model":"tiny","prompt":"x","template":"{{ .Prompt }}"}`, 400, "template is not supported"},
		{"/api/generate", `{"model":"tiny","prompt":"x","context":[1,2]}`, 400, "context"},
		{"/api/generate", `{"model":"tiny","prompt":""}`, 400, "prompt is required"},
		{"/api/generate", `{"model":"tiny","prompt":"x","raw":true,"system":"s"}`, 400, "raw"},
		{"/api/pull", `{"model":"x"}`, 501, "meshcli pull"},
		{"/api/embeddings", `{"model":"tiny","prompt":"y","options":{"temperature":1}}`, 400, "options are not supported"},
		{"/api/embeddings", `{"prompt":"y"}`, 400, "model is required"},
		{"/api/embeddings", `{"model":"tiny","input":"y"}`, 400, "input"},
	} {
		code, _, b := ollamaPost(t, h, tc.path, tc.body)
		var e map[string]any
		if err := json.Unmarshal(b, &e); err != nil || code != tc.status || len(e) != 1 || !strings.Contains(e["error"].(string), tc.want) {
			t.Errorf("%s %s: %d %s; want %d %q", tc.path, tc.body, code, b, tc.status, tc.want)
		}
	}
	// A keep_alive that asks the model to stay loaded, for a while or
	// for good, is what the node does (it stays until unloaded).
	for _, ka := range []string{`"5m"`, `"1h30m"`, `1800`, `-1`, `"-1m"`, `0.5`} {
		if code, _, b := ollamaPost(t, h, "/api/chat", `{"model":"tiny","stream":false,`+user+`,"keep_alive":`+ka+`}`); code != 200 {
			t.Errorf("keep_alive %s: %d %s", ka, code, b)
		}
	}
}

func TestOllamaModels(t *testing.T) {
	h := newHarness(t, Config{Version: "1.2.3"}, nil)
	get := func(path string) map[string]any {
		resp, err := http.Get(h.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		decodeJSON(t, resp.Body, &v)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, v)
		}
		return v
	}
	if v := get("/api/version"); v["version"] != "1.2.3" {
		t.Errorf("version %v", v)
	}
	for _, path := range []string{"/api/tags", "/api/ps"} {
		models := get(path)["models"].([]any)
		m := models[0].(map[string]any)
		if len(models) != 1 || m["name"] != "tiny" || m["model"] != "tiny" || m["details"].(map[string]any)["format"] != "gguf" {
			t.Errorf("%s: %v", path, models)
		}
	}
	code, _, b := ollamaPost(t, h, "/api/show", `{"model":"tiny"}`)
	var show map[string]any
	if err := json.Unmarshal(b, &show); err != nil || code != 200 || !reflect.DeepEqual(show["capabilities"], []any{"completion", "embedding"}) {
		t.Errorf("show: %d %s", code, b)
	}
	code, _, b = ollamaPost(t, h, "/api/embed", `{"model":"tiny","input":["ab","cde"],"truncate":true}`)
	var emb struct {
		Embeddings [][]float32 `json:"embeddings"`
	}
	if err := json.Unmarshal(b, &emb); err != nil || code != 200 || len(emb.Embeddings) != 2 || emb.Embeddings[1][1] != 3 {
		t.Errorf("embed: %d %s", code, b)
	}
	// truncate is true unless it says false, as Ollama's; the model cuts.
	for body, want := range map[string]bool{
		`{"model":"tiny","input":"ab"}`: true, `{"model":"tiny","input":"ab","truncate":true}`: true,
		`{"model":"tiny","input":"ab","truncate":false}`: false,
	} {
		n := len(h.model.embeds)
		if code, _, b := ollamaPost(t, h, "/api/embed", body); code != 200 || len(h.model.embeds) != n+1 || h.model.embeds[n].Truncate != want {
			t.Errorf("%s: %d %s, truncate reached the model as %v", body, code, b, h.model.embeds[len(h.model.embeds)-1].Truncate)
		}
	}
	// The older /api/embeddings: one prompt, the vector not scaled; an
	// empty prompt answers an empty vector and embeds nothing.
	n := len(h.model.embeds)
	code, _, b = ollamaPost(t, h, "/api/embeddings", `{"model":"tiny","prompt":"abcd","keep_alive":"5m"}`)
	var old struct {
		Embedding []float32 `json:"embedding"`
	}
	if err := json.Unmarshal(b, &old); err != nil || code != 200 || len(old.Embedding) != 2 || old.Embedding[1] != 4 ||
		len(h.model.embeds) != n+1 || !h.model.embeds[n].Unnormalized || h.model.embeds[n].Inputs[0].Text != "abcd" {
		t.Errorf("embeddings: %d %s", code, b)
	}
	code, _, b = ollamaPost(t, h, "/api/embeddings", `{"model":"tiny","prompt":""}`)
	if err := json.Unmarshal(b, &old); err != nil || code != 200 || old.Embedding == nil || len(old.Embedding) != 0 || len(h.model.embeds) != n+1 {
		t.Errorf("embeddings of nothing: %d %s", code, b)
	}
}
