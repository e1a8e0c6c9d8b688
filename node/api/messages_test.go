package api

import (
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// messageJSON is a Messages answer as a client decodes it.
type messageJSON struct {
	ID           string            `json:"id"`
	Type         string            `json:"type"`
	Role         string            `json:"role"`
	Model        string            `json:"model"`
	Content      []json.RawMessage `json:"content"`
	StopReason   *string           `json:"stop_reason"`
	StopSequence *string           `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int            `json:"input_tokens"`
		OutputTokens int            `json:"output_tokens"`
		Energy       map[string]any `json:"energy"`
	} `json:"usage"`
}

// anthropicErr is Anthropic's error body.
type anthropicErr struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"error"`
}

func postMessages(t *testing.T, h *harness, body string) (int, []byte) {
	t.Helper()
	resp := h.post(t, "/v1/messages", body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestMessages(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	code, b := postMessages(t, h, `{"model":"tiny","max_tokens":50,"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":"hi"}],"temperature":0.5,"top_k":40,"metadata":{"user_id":"u-1"},"stop_sequences":["","END"]}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var got messageJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "message" || got.Role != "assistant" || got.Model != "tiny" || !strings.HasPrefix(got.ID, "msg_") ||
		len(got.Content) != 1 || string(got.Content[0]) != `{"type":"text","text":"Hello, world!"}` ||
		got.StopReason == nil || *got.StopReason != "end_turn" || got.StopSequence != nil ||
		got.Usage.InputTokens != 3 || got.Usage.OutputTokens != 4 || got.Usage.Energy["energy_provenance"] != "Estimator" {
		t.Fatalf("answer = %s", b)
	}
	g := h.model.lastCall()
	if !reflect.DeepEqual(g.Messages, []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}) ||
		g.MaxTokens != 50 || *g.Temperature != 0.5 || g.TopK != 40 || !reflect.DeepEqual(g.Stop, []string{"END"}) || g.Prefill != "" {
		t.Fatalf("generation = %+v", g)
	}

	// The stop reasons: the output ceiling, and a stop string, named.
	h.model.pieces = []string{"a", "b", "c"}
	_, b = postMessages(t, h, `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	if err := json.Unmarshal(b, &got); err != nil || *got.StopReason != "max_tokens" || got.StopSequence != nil || got.Usage.OutputTokens != 2 {
		t.Fatalf("max_tokens answer = %s", b)
	}
	h.model.stopSeq = "END"
	_, b = postMessages(t, h, `{"model":"tiny","max_tokens":20,"messages":[{"role":"user","content":"hi"}],"stop_sequences":["END"]}`)
	if err := json.Unmarshal(b, &got); err != nil || *got.StopReason != "stop_sequence" || got.StopSequence == nil || *got.StopSequence != "END" {
		t.Fatalf("stop_sequence answer = %s", b)
	}
	h.model.stopSeq, h.model.finish = "", FinishJouleCeiling
	_, b = postMessages(t, h, `{"model":"tiny","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
	if err := json.Unmarshal(b, &got); err != nil || *got.StopReason != FinishJouleCeiling {
		t.Fatalf("joule ceiling answer = %s", b)
	}
}

func TestMessagesStream(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/messages", `{"model":"tiny","max_tokens":50,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var names []string
	var text strings.Builder
	for _, e := range readSSE(t, resp.Body) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev["type"] != e.name {
			t.Fatalf("event %q has type %v", e.name, ev["type"])
		}
		names = append(names, e.name)
		switch e.name {
		case "message_start":
			msg := ev["message"].(map[string]any)
			if msg["role"] != "assistant" || len(msg["content"].([]any)) != 0 || msg["stop_reason"] != nil ||
				msg["usage"].(map[string]any)["input_tokens"] != 3.0 {
				t.Fatalf("message_start %s", e.data)
			}
		case "content_block_start":
			if ev["index"] != 0.0 || !reflect.DeepEqual(ev["content_block"], map[string]any{"type": "text", "text": ""}) {
				t.Fatalf("content_block_start %s", e.data)
			}
		case "content_block_delta":
			d := ev["delta"].(map[string]any)
			if ev["index"] != 0.0 || d["type"] != "text_delta" {
				t.Fatalf("delta %s", e.data)
			}
			text.WriteString(d["text"].(string))
		case "message_delta":
			u := ev["usage"].(map[string]any)
			if ev["delta"].(map[string]any)["stop_reason"] != "end_turn" || u["output_tokens"] != 4.0 || u["input_tokens"] != 3.0 || u["energy"] == nil {
				t.Fatalf("message_delta %s", e.data)
			}
		}
	}
	want := "message_start,content_block_start,content_block_delta,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if strings.Join(names, ",") != want || text.String() != "Hello, world!" {
		t.Fatalf("events %v, text %q", names, text.String())
	}

	// A failure mid-stream ends it with Anthropic's error event.
	h.model.midErr = errBoom
	resp = h.post(t, "/v1/messages", `{"model":"tiny","max_tokens":50,"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	defer resp.Body.Close()
	events := readSSE(t, resp.Body)
	last := events[len(events)-1]
	var e anthropicErr
	if err := json.Unmarshal([]byte(last.data), &e); err != nil || last.name != "error" || e.Type != "error" || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "boom") {
		t.Fatalf("last event %+v", last)
	}
}

// TestMessagesConversation: Anthropic's turns become the chat's — tool
// calls with their arguments, each tool_result a tool message naming its
// call's tool (an error marked in its text), the text after it a user
// message, earlier thinking given back as the reasoning — and a final assistant message is
// a prefill, not a turn.
func TestMessagesConversation(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	code, b := postMessages(t, h, `{"model":"tiny","max_tokens":10,"messages":[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"x"},{"type":"text","text":"Checking."},
			{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city": "Paris"}},
			{"type":"tool_use","id":"toolu_2","name":"get_time","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]},
			{"type":"tool_result","tool_use_id":"toolu_2","content":"no clock","is_error":true},{"type":"text","text":"and?"}]},
		{"role":"assistant","content":"It is"}]}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	g := h.model.lastCall()
	want := []Message{
		{Role: "user", Content: "weather?"},
		{Role: "assistant", Content: "Checking.", Reasoning: "hm", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "toolu_2", Name: "get_time", Arguments: `{}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "toolu_1", Name: "get_weather"},
		{Role: "tool", Content: "Error: no clock", ToolCallID: "toolu_2", Name: "get_time"},
		{Role: "user", Content: "and?"},
	}
	if !reflect.DeepEqual(g.Messages, want) || g.Prefill != "It is" {
		t.Fatalf("messages %+v, prefill %q", g.Messages, g.Prefill)
	}
}

func TestMessagesTools(t *testing.T) {
	const tools = `"tools":[{"name":"get_weather","description":"Current weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},
		{"name":"get_time","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	code, b := postMessages(t, h, `{"model":"tiny","max_tokens":100,"messages":[{"role":"user","content":"weather in Paris?"}],`+tools+`}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var got messageJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var uses []anthropicToolUseBlock
	for _, c := range got.Content[1:] {
		var u anthropicToolUseBlock
		if err := json.Unmarshal(c, &u); err != nil || u.Type != "tool_use" || !strings.HasPrefix(u.ID, "call_") {
			t.Fatalf("content %s", c)
		}
		uses = append(uses, u)
	}
	if len(got.Content) != 3 || string(got.Content[0]) != `{"type":"text","text":"Checking."}` || *got.StopReason != "tool_use" ||
		uses[0].Name != "get_weather" || string(uses[0].Input) != `{"city":"Paris"}` || uses[1].Name != "get_time" || string(uses[1].Input) != `{"city":"Rome"}` {
		t.Fatalf("answer %s", b)
	}
	g := h.model.lastCall()
	var fn struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if len(g.Tools) != 2 || json.Unmarshal(g.Tools[0], &fn) != nil || fn.Type != "function" || fn.Function.Name != "get_weather" ||
		fn.Function.Description != "Current weather" || !strings.Contains(string(fn.Function.Parameters), `"required":["city"]`) ||
		g.ToolChoice != "auto" || !g.ParallelToolCalls {
		t.Fatalf("tools %s, choice %q", g.Tools, g.ToolChoice)
	}

	// Streamed, the same calls come as tool_use blocks whose arguments
	// arrive in input_json_delta pieces; with parallel use disabled, only
	// the first.
	resp := h.post(t, "/v1/messages", `{"model":"tiny","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"weather?"}],`+tools+
		`,"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`)
	defer resp.Body.Close()
	blocks := map[int]map[string]any{}
	args := map[int]string{}
	var stop any
	for _, e := range readSSE(t, resp.Body) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		switch e.name {
		case "content_block_start":
			blocks[int(ev["index"].(float64))] = ev["content_block"].(map[string]any)
		case "content_block_delta":
			if d := ev["delta"].(map[string]any); d["type"] == "input_json_delta" {
				args[int(ev["index"].(float64))] += d["partial_json"].(string)
			}
		case "message_delta":
			stop = ev["delta"].(map[string]any)["stop_reason"]
		}
	}
	var input map[string]any
	if len(blocks) != 2 || blocks[0]["type"] != "text" || blocks[1]["type"] != "tool_use" || blocks[1]["name"] != "get_weather" ||
		json.Unmarshal([]byte(args[1]), &input) != nil || input["city"] != "Paris" || stop != "tool_use" {
		t.Fatalf("blocks %v, args %v, stop %v", blocks, args, stop)
	}
	if g := h.model.lastCall(); g.ParallelToolCalls {
		t.Fatal("disable_parallel_tool_use did not reach the generation")
	}

	// tool_choice any and tool require a call (a grammar holds the
	// output), the named tool's name carried.
	h.model.pieces = []string{"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"}
	for _, tc := range []struct{ choice, mode, name string }{
		{`{"type":"any"}`, "required", ""},
		{`{"type":"tool","name":"get_time"}`, "function", "get_time"},
		{`{"type":"none"}`, "", ""},
	} {
		code, b := postMessages(t, h, `{"model":"tiny","max_tokens":100,"messages":[{"role":"user","content":"time?"}],`+tools+`,"tool_choice":`+tc.choice+`}`)
		g := h.model.lastCall()
		if code != 200 || g.ToolChoice != tc.mode || g.ToolName != tc.name || (tc.mode != "") != (g.Grammar != nil) {
			t.Fatalf("%s: %d %s; choice %q %q", tc.choice, code, b, g.ToolChoice, g.ToolName)
		}
	}
	// A strict tool under auto: its call is held once the model opens
	// one (a lazy grammar), as chat completions'.
	strict := strings.Replace(tools, `"input_schema"`, `"strict":true,"input_schema"`, 1)
	code, b = postMessages(t, h, `{"model":"tiny","max_tokens":100,"messages":[{"role":"user","content":"time?"}],`+strict+`}`)
	if g := h.model.lastCall(); code != 200 || g.ToolChoice != "auto" || g.Grammar == nil || len(g.Grammar.Triggers()) == 0 {
		t.Fatalf("strict tool under auto: %d %s", code, b)
	}
}

// TestMessagesErrors: what is refused, in Anthropic's error shape, from
// the body's checks to the route and the key.
func TestMessagesErrors(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body string
		status     int
		typ, want  string
	}{
		{"no max_tokens", `{"model":"tiny",` + user + `}`, 400, "invalid_request_error", "max_tokens is required"},
		{"no messages", `{"model":"tiny","max_tokens":5,"messages":[]}`, 400, "invalid_request_error", "at least one message"},
		{"temperature past 1", `{"model":"tiny","max_tokens":5,` + user + `,"temperature":1.5}`, 400, "invalid_request_error", "between 0 and 1"},
		{"system role", `{"model":"tiny","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, 400, "invalid_request_error", "not one of user, assistant"},
		{"image", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "invalid_request_error", `type "image"`},
		{"citations", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","citations":[{}]}]}]}`, 400, "invalid_request_error", "citations"},
		{"thinking past max_tokens", `{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"enabled","budget_tokens":1024}}`, 400, "invalid_request_error", `must be less than max_tokens`},
		{"thinking without a budget", `{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"enabled"}}`, 400, "invalid_request_error", `needs budget_tokens`},
		{"a budget on adaptive", `{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"adaptive","budget_tokens":3}}`, 400, "invalid_request_error", `with {"type": "enabled"} only`},
		{"thinking on a model that does not reason", `{"model":"tiny","max_tokens":50,` + user + `,"thinking":{"type":"enabled","budget_tokens":10}}`, 400, "invalid_request_error", `does not reason`},
		{"thinking summarised", `{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"adaptive","display":"summarized"}}`, 400, "invalid_request_error", `unknown field "display"`},
		{"thinking odd", `{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"sometimes"}}`, 400, "invalid_request_error", `thinking.type must be`},
		{"server tool", `{"model":"tiny","max_tokens":5,` + user + `,"tools":[{"type":"bash_20250124","name":"bash"}]}`, 400, "invalid_request_error", "server tool"},
		{"schemaless tool", `{"model":"tiny","max_tokens":5,` + user + `,"tools":[{"name":"f"}]}`, 400, "invalid_request_error", "input_schema"},
		{"any without tools", `{"model":"tiny","max_tokens":5,` + user + `,"tool_choice":{"type":"any"}}`, 400, "invalid_request_error", "needs tools"},
		{"unanswered call", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"x"}]}]}`, 400, "invalid_request_error", "answers no tool_use"},
		{"call left open", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`, 400, "invalid_request_error", "send their results"},
		{"grant", `{"model":"tiny","max_tokens":5,` + user + `,"jcp_presentation":"x"}`, 400, "invalid_request_error", "jcp_presentation"},
		{"a prefill alone", `{"model":"tiny","max_tokens":5,"system":"s","messages":[{"role":"assistant","content":"It"}]}`, 400, "invalid_request_error", "continues a conversation"},
		{"unknown field", `{"model":"tiny","max_tokens":5,` + user + `,"mcp_servers":[{}]}`, 400, "invalid_request_error", `unknown field "mcp_servers"`},
		{"service tier", `{"model":"tiny","max_tokens":5,` + user + `,"service_tier":"priority"}`, 400, "invalid_request_error", "one tier"},
		{"fast", `{"model":"tiny","max_tokens":5,` + user + `,"speed":"fast"}`, 400, "invalid_request_error", "one speed"},
		{"geo", `{"model":"tiny","max_tokens":5,` + user + `,"inference_geo":"us"}`, 400, "invalid_request_error", "where it is"},
		{"container", `{"model":"tiny","max_tokens":5,` + user + `,"container":"c1"}`, 400, "invalid_request_error", "containers"},
		{"effort", `{"model":"tiny","max_tokens":5,` + user + `,"output_config":{"effort":"max"}}`, 400, "invalid_request_error", `output_config.effort "max" is not one of low, medium, high`},
		{"format type", `{"model":"tiny","max_tokens":5,` + user + `,"output_config":{"format":{"type":"yaml"}}}`, 400, "invalid_request_error", "json_schema"},
		{"unknown model", `{"model":"nope","max_tokens":5,` + user + `}`, 404, "not_found_error", `model "nope" is not served`},
	}
	h := newHarness(t, Config{}, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := postMessages(t, h, tc.body)
			var e anthropicErr
			if err := json.Unmarshal(b, &e); err != nil || code != tc.status || e.Type != "error" || e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.want) {
				t.Fatalf("%d %s; want %d %s %q", code, b, tc.status, tc.typ, tc.want)
			}
		})
	}
	// Accepted, and asking nothing: thinking off on a model that does not
	// reason, adaptive thinking (the model decides: this one does not
	// reason), service tiers, a custom tool's type, cache_control.
	for _, body := range []string{
		`{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"disabled"},"service_tier":"standard_only"}`,
		`{"model":"tiny","max_tokens":5,` + user + `,"thinking":{"type":"adaptive"}}`,
		`{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}],"tool_choice":{"type":"none"}}`,
		`{"model":"tiny","max_tokens":5,` + user + `,"cache_control":{"type":"ephemeral"},"speed":"standard","workspace_id":"w","user_profile_id":"u","inference_geo":null}`,
	} {
		if code, b := postMessages(t, h, body); code != 200 {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}

	// The key, as Anthropic's SDKs send it, and its refusal in their shape;
	// an unknown path below /v1/messages is theirs too.
	h = newHarness(t, Config{APIKey: "sekrit"}, nil)
	resp := h.post(t, "/v1/messages", `{"model":"tiny","max_tokens":5,`+user+`}`, "x-api-key", "sekrit")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("x-api-key: %d", resp.StatusCode)
	}
	for _, tc := range []struct {
		path, key string
		status    int
		typ       string
	}{
		{"/v1/messages", "wrong", 401, "authentication_error"},
		{"/v1/messages/batches", "sekrit", 404, "not_found_error"},
	} {
		resp := h.post(t, tc.path, `{"model":"tiny","max_tokens":5,`+user+`}`, "x-api-key", tc.key)
		var e anthropicErr
		decodeJSON(t, resp.Body, &e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || e.Type != "error" || e.Error.Type != tc.typ {
			t.Fatalf("%s: %d %+v", tc.path, resp.StatusCode, e)
		}
	}
	// The OpenAI endpoints keep OpenAI's shape.
	resp = h.post(t, "/v1/chat/completions", `{"model":"tiny",`+user+`}`, "x-api-key", "wrong")
	var oe errResp
	decodeJSON(t, resp.Body, &oe)
	resp.Body.Close()
	if resp.StatusCode != 401 || oe.Error.Code != "invalid_api_key" {
		t.Fatalf("chat: %d %+v", resp.StatusCode, oe)
	}
}

func TestCountTokens(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/messages/count_tokens", `{"model":"tiny","system":"sys","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}]}`)
	var got map[string]int
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	// The fake renders "system: sys\nuser: hi\nassistant:ok" (the final
	// assistant message a prefill), a token a byte, after BOS.
	want := 1 + len("system: sys\nuser: hi\nassistant:ok")
	if resp.StatusCode != 200 || len(got) != 1 || got["input_tokens"] != want {
		t.Fatalf("%d %v, want %d", resp.StatusCode, got, want)
	}
	// A count takes the output config and the cache hint a request has.
	resp = h.post(t, "/v1/messages/count_tokens", `{"model":"tiny","cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":"hi"}],"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("count with output_config: %d", resp.StatusCode)
	}
	// Fields a count does not take are refused.
	resp = h.post(t, "/v1/messages/count_tokens", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	var e anthropicErr
	decodeJSON(t, resp.Body, &e)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(e.Error.Message, `unknown field "max_tokens"`) {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
}

// TestReplayMessages: a replay's request is read as it was sent — a
// Messages body by Anthropic's reading where chat's refuses it, or where
// the endpoint is named (a final assistant message is a prefill there,
// a turn in chat's).
func TestReplayMessages(t *testing.T) {
	const energy = `"energy":{"receipt":{},"envelope_hex":"00"}`
	prefill := `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"It"}]}`
	for _, tc := range []struct {
		body        string
		prefill     string
		turns       int
		stop        []string
		wantErrText string
	}{
		{`{"request":{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stop_sequences":["x"]},` + energy + `}`, "", 1, []string{"x"}, ""},
		{`{"request":` + prefill + `,` + energy + `,"endpoint":"/v1/messages"}`, "It", 1, nil, ""},
		{`{"request":` + prefill + `,` + energy + `}`, "", 2, nil, ""},
		{`{"request":` + prefill + `,` + energy + `,"endpoint":"/v1/embeddings"}`, "", 0, nil, "not a generation endpoint"},
	} {
		rp, err := parseReplay([]byte(tc.body))
		if tc.wantErrText != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrText) || asError(err).Param != "endpoint" {
				t.Errorf("%s: err %v", tc.body, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		g := rp.Generation
		if g.Prefill != tc.prefill || len(g.Messages) != tc.turns || !reflect.DeepEqual(g.Stop, tc.stop) {
			t.Errorf("%s: prefill %q, messages %+v, stop %v", tc.body, g.Prefill, g.Messages, g.Stop)
		}
	}
	if _, err := parseReplay([]byte(`{"request":{"model":"tiny","messages":[{"role":"user","content":"hi"}],"bogus":1},` + energy + `}`)); err == nil ||
		!strings.Contains(err.Error(), `unknown field "bogus"`) {
		t.Errorf("a body neither reads: %v (want chat's error)", err)
	}
}

// TestReplayNPredict: n_predict marks a replay's prompt request as
// /completion's (with llama-server's defaults, top_k 40) unless the replay
// names its endpoint: /v1/completions takes n_predict too, with OpenAI's
// defaults (no top_k).
func TestReplayNPredict(t *testing.T) {
	const energy = `"energy":{"receipt":{},"envelope_hex":"00"}`
	req := `{"model":"tiny","prompt":"x","n_predict":4,"temperature":0.5}`
	for endpoint, topK := range map[string]int{"": 40, `,"endpoint":"/completion"`: 40, `,"endpoint":"/v1/completions"`: 0} {
		rp, err := parseReplay([]byte(`{"request":` + req + `,` + energy + endpoint + `}`))
		if err != nil || rp.Generation.TopK != topK || rp.Generation.MaxTokens != 4 {
			t.Errorf("endpoint %q: %+v, %v; want top_k %d", endpoint, rp, err, topK)
		}
	}
}
