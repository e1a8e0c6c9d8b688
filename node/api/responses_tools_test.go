package api

import (
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// responsesTools are weatherTools in the Responses API's flat form.
const responsesTools = `"tools":[{"type":"function","name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":false},
	{"type":"function","name":"get_time","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`

// responseItemsJSON is a response's output as a client reads it.
type responseItemsJSON struct {
	Status string `json:"status"`
	Output []struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Status    string `json:"status"`
		Content   []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

// TestResponsesTools: function tools on the Responses API: the model is
// given them; its calls come back as function_call items (after its
// text, a message item), whole or streamed as the API's events; with
// parallel_tool_calls false, the first only.
func TestResponsesTools(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	resp := h.post(t, "/v1/responses", `{"model":"tiny","input":"weather?",`+responsesTools+`}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got responseItemsJSON
	if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 || got.Status != "completed" || len(got.Output) != 3 ||
		got.Output[0].Type != "message" || got.Output[0].Content[0].Text != "Checking." ||
		got.Output[1].Type != "function_call" || got.Output[1].Name != "get_weather" || got.Output[1].Arguments != `{"city": "Paris"}` ||
		!strings.HasPrefix(got.Output[1].CallID, "call_") || got.Output[1].Status != "completed" ||
		got.Output[2].Name != "get_time" || got.Output[2].Arguments != `{"city": "Rome"}` {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	g := h.model.lastCall()
	if len(g.Tools) != 2 || g.ToolChoice != "auto" || !g.ParallelToolCalls {
		t.Fatalf("tools %s, choice %q", g.Tools, g.ToolChoice)
	}

	resp = h.post(t, "/v1/responses", `{"model":"tiny","input":"weather?","stream":true,"parallel_tool_calls":false,`+responsesTools+`}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var names []string
	var args strings.Builder
	var final responseItemsJSON
	for _, e := range events {
		var ev map[string]json.RawMessage
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		switch e.name {
		case "response.function_call_arguments.delta":
			var d string
			json.Unmarshal(ev["delta"], &d)
			args.WriteString(d)
			continue
		case "response.output_text.delta":
			continue
		case "response.completed":
			json.Unmarshal(ev["response"], &final)
		}
		names = append(names, e.name)
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if !reflect.DeepEqual(names, want) || args.String() != `{"city": "Paris"}` || len(final.Output) != 2 || final.Output[1].Arguments != `{"city": "Paris"}` {
		t.Fatalf("events %v, arguments %q, output %+v", names, args.String(), final.Output)
	}

	// tool_choice naming a function, in the Responses API's form.
	h.model.pieces = []string{"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"}
	resp = h.post(t, "/v1/responses", `{"model":"tiny","input":"time?",`+responsesTools+`,"tool_choice":{"type":"function","name":"get_time"}}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if g := h.model.lastCall(); resp.StatusCode != 200 || g.ToolChoice != "function" || g.ToolName != "get_time" || g.Grammar == nil {
		t.Fatalf("%d %s; choice %q %q", resp.StatusCode, b, g.ToolChoice, g.ToolName)
	}
}

// TestResponsesToolInput: a reply's function_call items, and their
// function_call_output results, handed back as input: the calls join the
// assistant's message, each result answers its call by call_id, and
// reasoning items are dropped.
func TestResponsesToolInput(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/responses", `{"model":"tiny","input":[
		{"role":"user","content":"weather?"},
		{"type":"reasoning","id":"rs_1","summary":[]},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
		{"type":"function_call","call_id":"call_a","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
		{"type":"function_call","call_id":"call_b","name":"get_time","arguments":"{}"},
		{"type":"function_call_output","call_id":"call_b","output":"noon"},
		{"type":"function_call_output","call_id":"call_a","output":[{"type":"input_text","text":"sunny"}]}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	want := []Message{
		{Role: "user", Content: "weather?"},
		{Role: "assistant", Content: "Checking.", ToolCalls: []ToolCall{{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`}, {ID: "call_b", Name: "get_time", Arguments: "{}"}}},
		{Role: "tool", Content: "noon", ToolCallID: "call_b", Name: "get_time"},
		{Role: "tool", Content: "sunny", ToolCallID: "call_a", Name: "get_weather"},
	}
	if got := h.model.lastCall().Messages; !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %+v", got)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"model":"tiny","input":[{"type":"function_call_output","call_id":"x","output":"y"}]}`, "answers no function_call"},
		{`{"model":"tiny","input":[{"type":"web_search_call","id":"x"}]}`, `type "web_search_call"`},
		{`{"model":"tiny","input":[{"role":"tool","content":"x"}]}`, "function_call_output item"},
		{`{"model":"tiny","input":"x","tools":[{"type":"web_search"}]}`, "runs no tools"},
		{`{"model":"tiny","input":"x","tools":[{"type":"function","name":"f","defer_loading":true}]}`, "defer_loading is not supported"},
	} {
		resp := h.post(t, "/v1/responses", tc.body)
		var e errResp
		decodeJSON(t, resp.Body, &e)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: %d %+v", tc.body, resp.StatusCode, e)
		}
	}
}
