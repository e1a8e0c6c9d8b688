package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

const weatherTools = `"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
	{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

// hermesCalls is a Qwen2.5-style reply that calls both tools, in the
// pieces a model would emit it.
var hermesCalls = []string{"Checking.", "\n<tool", "_call>\n{\"name\": \"get_", "weather\", \"arguments\": {\"city\"", ": \"Paris\"}}\n</tool_call>",
	"\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"}

func toolHarness(t *testing.T, f toolcall.Format, pieces []string) *harness {
	t.Helper()
	h := newHarness(t, Config{}, nil)
	h.model.tools = &f
	h.model.pieces = pieces
	return h
}

type toolCallJSON struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type toolReplyJSON struct {
	Choices []struct {
		Message struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []toolCallJSON  `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

func postOK(t *testing.T, h *harness, body string) []byte {
	t.Helper()
	resp := h.post(t, "/v1/chat/completions", body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return b
}

// TestToolRoundTrip: user → the assistant's calls (content and calls
// parsed from the model's Hermes-format text, finish_reason tool_calls) →
// the tool results sent back with the calls → the final answer; the
// model is given the tools, the calls and the results.
func TestToolRoundTrip(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	b := postOK(t, h, `{"model":"tiny",`+weatherTools+`,"messages":[{"role":"user","content":"Weather in Paris, time in Rome?"}]}`)
	var got toolReplyJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	c := got.Choices[0]
	if c.FinishReason != "tool_calls" || string(c.Message.Content) != `"Checking."` || len(c.Message.ToolCalls) != 2 {
		t.Fatalf("reply %s", b)
	}
	ids := map[string]bool{}
	for i, want := range []struct{ name, args string }{{"get_weather", `{"city": "Paris"}`}, {"get_time", `{"city": "Rome"}`}} {
		tc := c.Message.ToolCalls[i]
		if tc.Index != nil || tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") || ids[tc.ID] ||
			*tc.Function.Name != want.name || *tc.Function.Arguments != want.args {
			t.Errorf("tool_calls[%d] = %+v, want %s(%s)", i, tc, want.name, want.args)
		}
		ids[tc.ID] = true
	}
	g := h.model.lastCall()
	if len(g.Tools) != 2 || !strings.Contains(string(g.Tools[0]), `"name":"get_weather"`) {
		t.Errorf("the model got tools %s", g.Tools)
	}

	// The client sends the calls and their results back.
	calls, _ := json.Marshal(c.Message.ToolCalls)
	h.model.pieces = []string{"Paris: 18 C. ", "Rome: 14:05."}
	b = postOK(t, h, fmt.Sprintf(`{"model":"tiny",%s,"messages":[{"role":"user","content":"Weather in Paris, time in Rome?"},
		{"role":"assistant","content":null,"tool_calls":%s},
		{"role":"tool","tool_call_id":%q,"content":"18 C"},
		{"role":"tool","tool_call_id":%q,"name":"get_time","content":[{"type":"text","text":"14:05"}]}]}`,
		weatherTools, calls, c.Message.ToolCalls[0].ID, c.Message.ToolCalls[1].ID))
	got = toolReplyJSON{}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if c := got.Choices[0]; c.FinishReason != "stop" || string(c.Message.Content) != `"Paris: 18 C. Rome: 14:05."` || c.Message.ToolCalls != nil {
		t.Fatalf("final answer %s", b)
	}
	g = h.model.lastCall()
	m := g.Messages
	if len(m) != 4 || len(m[1].ToolCalls) != 2 || m[1].ToolCalls[0].Name != "get_weather" || m[1].ToolCalls[0].Arguments != `{"city": "Paris"}` ||
		m[1].ToolCalls[0].ID != c.Message.ToolCalls[0].ID || m[2].ToolCallID != c.Message.ToolCalls[0].ID || m[3].Name != "get_time" || m[3].Content != "14:05" {
		t.Errorf("the model got messages %+v", m)
	}
}

// sdkAccumulate is what OpenAI's SDKs build from a stream's deltas
// (openai-node's ChatCompletionStream): content appended; tool calls by
// index, id, type and name set, arguments appended. It checks that a
// call's first delta carries its id, type and name.
func sdkAccumulate(t *testing.T, events []sseEvent) (content *string, calls []toolCallJSON, finish string) {
	t.Helper()
	for _, e := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content   *string        `json:"content"`
					ToolCalls []toolCallJSON `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatalf("chunk %s: %v", e.data, err)
		}
		if len(c.Choices) == 0 {
			continue
		}
		d := c.Choices[0].Delta
		if d.Content != nil {
			if content == nil {
				content = new(string)
			}
			*content += *d.Content
		}
		for _, tc := range d.ToolCalls {
			if tc.Index == nil {
				t.Fatalf("tool-call delta without index: %s", e.data)
			}
			i := *tc.Index
			switch {
			case i == len(calls):
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == nil || tc.Function.Arguments == nil {
					t.Fatalf("first delta of call %d lacks id, type, name or arguments: %s", i, e.data)
				}
				calls = append(calls, tc)
			case i < len(calls):
				if tc.ID != "" || tc.Function.Name != nil || tc.Function.Arguments == nil {
					t.Fatalf("later delta of call %d: %s", i, e.data)
				}
				*calls[i].Function.Arguments += *tc.Function.Arguments
			default:
				t.Fatalf("delta for call %d before call %d: %s", i, len(calls), e.data)
			}
		}
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if events[len(events)-1].data != "[DONE]" {
		t.Fatalf("stream ends with %q", events[len(events)-1].data)
	}
	return content, calls, finish
}

// TestToolCallStream: streamed, the calls come as OpenAI's deltas and
// accumulate to what the whole reply holds, the arguments in more than
// one piece; parallel_tool_calls false keeps the first call only.
func TestToolCallStream(t *testing.T) {
	for _, parallel := range []bool{true, false} {
		h := toolHarness(t, toolcall.Hermes, hermesCalls)
		resp := h.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"tiny","stream":true,"parallel_tool_calls":%v,%s,"messages":[{"role":"user","content":"hi"}]}`, parallel, weatherTools))
		events := readSSE(t, resp.Body)
		resp.Body.Close()
		content, calls, finish := sdkAccumulate(t, events)
		want := 2
		if !parallel {
			want = 1
		}
		if content == nil || *content != "Checking." || finish != "tool_calls" || len(calls) != want {
			t.Fatalf("parallel=%v: content %v, finish %q, calls %+v", parallel, content, finish, calls)
		}
		if *calls[0].Function.Name != "get_weather" || *calls[0].Function.Arguments != `{"city": "Paris"}` {
			t.Errorf("call 0 = %+v", calls[0])
		}
		if parallel && (*calls[1].Function.Name != "get_time" || *calls[1].Function.Arguments != `{"city": "Rome"}`) {
			t.Errorf("call 1 = %+v", calls[1])
		}
		pieces := 0
		for _, e := range events {
			if strings.Contains(e.data, `"index":0,"function":{"arguments"`) {
				pieces++
			}
		}
		if pieces < 2 {
			t.Errorf("call 0's arguments came in %d later deltas; want them streamed", pieces)
		}
	}

	// A reply that is only a call has no content at all.
	h := toolHarness(t, toolcall.Mistral, []string{"[TOOL_CALLS]", "get_time[ARGS]", `{"city": `, `"Oslo"}`})
	resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","stream":true,`+weatherTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	content, calls, finish := sdkAccumulate(t, readSSE(t, resp.Body))
	resp.Body.Close()
	if content != nil || finish != "tool_calls" || len(calls) != 1 || len(calls[0].ID) != 9 || *calls[0].Function.Arguments != `{"city": "Oslo"}` {
		t.Fatalf("content %v, finish %q, calls %+v", content, finish, calls)
	}
	b := postOK(t, h, `{"model":"tiny",`+weatherTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	var got toolReplyJSON
	_ = json.Unmarshal(b, &got)
	if string(got.Choices[0].Message.Content) != "null" || !strings.Contains(string(b), `"content":null`) {
		t.Errorf("a calls-only reply's content is %s, want null: %s", got.Choices[0].Message.Content, b)
	}
}

// TestToolChoice: none gives the model no tools and leaves its text alone;
// auto is the default; required and a named function need constrained
// decoding and are refused, naming tool_choice.
func TestToolChoice(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	b := postOK(t, h, `{"model":"tiny","tool_choice":"none",`+weatherTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	var got toolReplyJSON
	_ = json.Unmarshal(b, &got)
	if g := h.model.lastCall(); g.Tools != nil {
		t.Errorf("tool_choice none: the model got tools %s", g.Tools)
	}
	if c := got.Choices[0]; c.FinishReason != "stop" || c.Message.ToolCalls != nil || !strings.Contains(string(c.Message.Content), "<tool_call>") {
		t.Errorf("tool_choice none: %s", b)
	}
	b = postOK(t, h, `{"model":"tiny","tool_choice":"auto",`+weatherTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	if !strings.Contains(string(b), `"finish_reason":"tool_calls"`) {
		t.Errorf("tool_choice auto: %s", b)
	}
}

// TestToolChoiceForced: tool_choice required and a named function hold
// the output to a grammar of the model's call format (the model gets it
// with the request), which takes the calls the template writes and no
// other text; Mistral's, which cannot force its [TOOL_CALLS] control
// token, is parsed as though the model had written it. Replaying such a
// request holds the re-run to the same grammar.
func TestToolChoiceForced(t *testing.T) {
	for _, tc := range []struct {
		f       toolcall.Format
		choice  string
		pieces  []string
		names   []string
		refused string // text the grammar must not take
	}{
		{toolcall.Hermes, `"required"`, append([]string{"<tool"}, hermesCalls[2:]...), []string{"get_weather", "get_time"}, hermesCalls[0]},
		{toolcall.Mistral, `{"type":"function","function":{"name":"get_time"}}`, []string{`[{"name": "get_time", `, `"arguments": {"city": "Oslo"}}]`}, []string{"get_time"},
			`[{"name": "get_weather", "arguments": {"city": "Oslo"}}]`},
		{toolcall.Llama3, `"required"`, []string{`{"name": "get_weather", "parameters": {"city": "Oslo"}}`}, []string{"get_weather"}, `{"name": "get_weather", "parameters": {"town": "Oslo"}}`},
	} {
		h := toolHarness(t, tc.f, tc.pieces)
		for _, stream := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":"tiny","stream":%v,"tool_choice":%s,%s,"messages":[{"role":"user","content":"hi"}]}`, stream, tc.choice, weatherTools)
			var names []string
			if stream {
				resp := h.post(t, "/v1/chat/completions", body)
				_, calls, finish := sdkAccumulate(t, readSSE(t, resp.Body))
				resp.Body.Close()
				if finish != "tool_calls" {
					t.Errorf("%v stream: finish %q", tc.f, finish)
				}
				for _, c := range calls {
					names = append(names, *c.Function.Name)
				}
			} else {
				var got toolReplyJSON
				if err := json.Unmarshal(postOK(t, h, body), &got); err != nil {
					t.Fatal(err)
				}
				for _, c := range got.Choices[0].Message.ToolCalls {
					names = append(names, *c.Function.Name)
				}
			}
			if fmt.Sprint(names) != fmt.Sprint(tc.names) {
				t.Errorf("%v %s stream=%v: calls %v, want %v", tc.f, tc.choice, stream, names, tc.names)
			}
			g := h.model.lastCall()
			if g.Grammar == nil || g.Format != FormatToolCalls {
				t.Fatalf("%v %s: the model got no grammar", tc.f, tc.choice)
			}
			m, _ := g.Grammar.NewMatcher()
			if err := m.Advance([]byte(strings.Join(h.model.pieces, ""))); err != nil || !m.Accepting() {
				t.Errorf("%v %s: the grammar does not take the model's calls: %v", tc.f, tc.choice, err)
			}
			m, _ = g.Grammar.NewMatcher()
			if err := m.Advance([]byte(tc.refused)); err == nil && m.Accepting() {
				t.Errorf("%v %s: the grammar takes %q", tc.f, tc.choice, tc.refused)
			}
		}
	}

	// A replay of a forced request is held to the grammar.
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	node := &fakeNode{replay: &ReplayResult{Verdict: VerdictVerified}}
	h.srv.node = node
	request := `{"model":"tiny","tool_choice":"required",` + weatherTools + `,"messages":[{"role":"user","content":"hi"}]}`
	resp := h.post(t, "/v1/mesh/replay", `{"request":`+request+`,"energy":{"envelope_hex":"00"}}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(node.replays) != 1 || node.replays[0].Generation.Grammar == nil {
		t.Errorf("replay of a forced request: %d, replays %+v", resp.StatusCode, node.replays)
	}

	// What cannot be enforced is refused, naming it.
	for _, tc := range []struct{ body, param, code string }{
		{`"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","format":"ipv6"}}}}}]`, "tools[0].function.parameters", "unsupported_schema"},
	} {
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny",`+tc.body+`,"messages":[{"role":"user","content":"hi"}]}`)
		if e := decodeError(t, resp); resp.StatusCode != 400 || e.Param != tc.param || e.Code != tc.code {
			t.Errorf("%s: %d %+v", tc.body, resp.StatusCode, e)
		}
	}
}

// TestResponseFormatWithTools: a response format with tools under auto
// is content in the format or calls, on every API that has both; under
// required, calls. A model whose calls open with a control token cannot
// offer them beside content: a 400 naming tools.
func TestResponseFormatWithTools(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	const schema = `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	call := "<tool_call>\n" + `{"name": "get_weather", "arguments": {"city": "Oslo"}}` + "\n</tool_call>"
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"tiny","response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `}},` + weatherTools + `,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"tiny","text":{"format":{"type":"json_schema","name":"r","schema":` + schema + `}},"input":"hi",` +
			`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`},
		{"/v1/messages", `{"model":"tiny","max_tokens":50,"output_config":{"format":{"type":"json_schema","schema":` + schema + `}},"messages":[{"role":"user","content":"hi"}],` +
			`"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`},
		{"/api/chat", `{"model":"tiny","stream":false,"format":` + schema + `,"messages":[{"role":"user","content":"hi"}],` + weatherTools + `}`},
	} {
		resp := h.post(t, tc.path, tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		g := h.model.lastCall()
		if resp.StatusCode != 200 || g.Grammar == nil || len(g.Grammar.Triggers()) != 0 {
			t.Fatalf("%s: %d %s", tc.path, resp.StatusCode, b)
		}
		for text, want := range map[string]bool{`{"a": 1}`: true, call: true, "Sure.": false, `{"a": "x"}`: false, `{"a": 1}` + call: false} {
			m, _ := g.Grammar.NewMatcher()
			if got := m.Advance([]byte(text)) == nil && m.Accepting(); got != want {
				t.Errorf("%s: the grammar takes %q: %v, want %v", tc.path, text, got, want)
			}
		}
	}
	// Under required the reply is calls.
	postOK(t, h, `{"model":"tiny","tool_choice":"required","response_format":{"type":"json_object"},`+weatherTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	if m, _ := h.model.lastCall().Grammar.NewMatcher(); m.Advance([]byte(`{"a": 1}`)) == nil {
		t.Error("under required, the grammar takes content")
	}
	mistral := toolHarness(t, toolcall.Mistral, nil)
	resp := mistral.post(t, "/v1/chat/completions", `{"model":"tiny","response_format":{"type":"json_object"},`+weatherTools+`,"messages":[{"role":"user","content":"hi"}]}`)
	if e := decodeError(t, resp); resp.StatusCode != 400 || e.Param != "tools" || !strings.Contains(e.Message, "control token") {
		t.Errorf("Mistral, format and tools: %d %+v", resp.StatusCode, e)
	}
}

type errorJSON struct {
	Message string `json:"message"`
	Param   string `json:"param"`
	Code    string `json:"code"`
}

func decodeError(t *testing.T, resp *http.Response) errorJSON {
	t.Helper()
	defer resp.Body.Close()
	var body struct {
		Error errorJSON `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	return body.Error
}

// TestToolValidation: bad tools, tool choices and tool turns are 400s
// that name the field, and reach no model.
func TestToolValidation(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, hermesCalls)
	user := `"messages":[{"role":"user","content":"hi"}]`
	fn := func(f string) string { return `"tools":[{"type":"function","function":` + f + `}],` + user }
	for _, tc := range []struct{ body, param string }{
		{`"tools":{"type":"function"},` + user, "tools"},
		{`"tools":[{"type":"retrieval"}],` + user, "tools[0].type"},
		{`"tools":[{"type":"function"}],` + user, "tools[0].function"},
		{fn(`{"name":"get weather"}`), "tools[0].function.name"},
		{fn(`{"name":""}`), "tools[0].function.name"},
		{fn(`{"name":"` + strings.Repeat("x", 65) + `"}`), "tools[0].function.name"},
		{fn(`{"name":"f","parameters":"object"}`), "tools[0].function.parameters"},
		{fn(`{"name":"f","description":7}`), "tools[0].function.description"},
		{fn(`{"name":"f","strict":"yes"}`), "tools[0].function"},
		{fn(`{"name":"f","strict":true,"parameters":{"type":"string","format":"ipv6"}}`), "tools[0].function.parameters"},
		{`"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}],` + user, "tools[1].function.name"},
		{`"tools":[` + strings.Repeat(`{"type":"function","function":{"name":"f"}},`, 128) + `{"type":"function","function":{"name":"g"}}],` + user, "tools"},
		{`"tool_choice":"sometimes",` + weatherTools + `,` + user, "tool_choice"},
		{`"tool_choice":{"type":"function","function":{"name":"nope"}},` + weatherTools + `,` + user, "tool_choice"},
		{`"tool_choice":{"type":"function"},` + weatherTools + `,` + user, "tool_choice"},
		{`"tool_choice":"required",` + user, "tool_choice"},
		{`"logprobs":true,` + weatherTools + `,` + user, "logprobs"},
		{`"functions":[{"name":"f"}],` + user, "functions"},
		{`"function_call":{"name":"f"},` + user, "function_call"},
		{`"messages":[{"role":"tool","content":"18 C"}]`, "messages[0].tool_call_id"},
		{`"messages":[{"role":"user","content":"hi","tool_call_id":"x"}]`, "messages[0].tool_call_id"},
		{`"messages":[{"role":"user","content":"hi","tool_calls":[]}]`, "messages[0].tool_calls"},
		{`"messages":[{"role":"assistant","tool_calls":{"id":"x"}}]`, "messages[0].tool_calls"},
		{`"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]`, "messages[0].tool_calls[0].id"},
		{`"messages":[{"role":"assistant","tool_calls":[{"id":"x","type":"code","function":{"name":"f"}}]}]`, "messages[0].tool_calls[0].type"},
		{`"messages":[{"role":"assistant","tool_calls":[{"id":"x","type":"function"}]}]`, "messages[0].tool_calls[0].function"},
		{`"messages":[{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":{"a":1}}}]}]`, "messages[0].tool_calls[0].function.arguments"},
	} {
		n := len(h.model.calls)
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny",`+tc.body+`}`)
		e := decodeError(t, resp)
		if resp.StatusCode != 400 || e.Param != tc.param {
			t.Errorf("%s: %d, param %q (%s); want 400 naming %s", tc.body, resp.StatusCode, e.Param, e.Message, tc.param)
		}
		if len(h.model.calls) != n {
			t.Errorf("%s reached the model", tc.body)
		}
	}

	// strict is honoured: under required the whole output is calls;
	// under auto a call is held once the model opens one (a lazy
	// grammar), and only the strict tools' arguments to their schemas
	// (g's schema, which the grammar cannot enforce, is not refused);
	// without a strict tool, or under none, nothing is held.
	strictTools := `"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}},` +
		`{"type":"function","function":{"name":"g","parameters":{"type":"string","format":"ipv6"}}}],`
	for _, tc := range []struct {
		body string
		held bool // a grammar, lazy
		lazy bool
	}{
		{`"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}],`, true, false},
		{strictTools, true, true},
		{`"tool_choice":"auto",` + strictTools, true, true},
		{`"tool_choice":"none",` + strictTools, false, false},
		{weatherTools + ",", false, false},
	} {
		postOK(t, h, `{"model":"tiny",`+tc.body+user+`}`)
		g := h.model.lastCall()
		if (g.Grammar != nil) != tc.held || g.Grammar != nil && (len(g.Grammar.Triggers()) > 0) != tc.lazy {
			t.Errorf("%s: grammar %v, want held %v, lazy %v", tc.body, g.Grammar, tc.held, tc.lazy)
		}
		if g.Grammar == nil {
			continue
		}
		// Held (the harness's model writes Hermes calls), f's arguments
		// meet its schema; g's are any object.
		mt, err := g.Grammar.NewMatcher()
		if err != nil {
			t.Fatal(err)
		}
		call := "<tool_call>\n" + `{"name": "f", "arguments": {"a": 1}}` + "\n</tool_call>"
		if tc.lazy {
			call = `<tool_call>{"name": "g", "arguments": {"x": true}}</tool_call>`
		}
		if err := mt.Advance([]byte(call)); err != nil || !mt.Accepting() {
			t.Errorf("%s: the grammar refuses %s: %v", tc.body, call, err)
		}
		if mt, _ := g.Grammar.NewMatcher(); mt.Advance([]byte("<tool_call>\n"+`{"name": "f", "arguments": {"a": "x"}}`+"\n</tool_call>")) == nil {
			t.Errorf("%s: the grammar takes f's arguments against its schema", tc.body)
		}
	}

	// A model that cannot take tools says so; without tools (or with
	// tool_choice none) it serves the request.
	h.model.tools = nil
	resp := h.post(t, "/v1/chat/completions", `{"model":"tiny",`+weatherTools+`,`+user+`}`)
	if e := decodeError(t, resp); resp.StatusCode != 400 || e.Param != "tools" || e.Code != "tools_not_supported" {
		t.Errorf("a model without tools: %d %+v", resp.StatusCode, e)
	}
	postOK(t, h, `{"model":"tiny","tool_choice":"none",`+weatherTools+`,`+user+`}`)
}

// TestToolXMLTypes: a Qwen3-Coder-style XML call's parameters become
// JSON by the tool's schema: a string parameter stays a string even when
// its text is a number; streamed and whole alike.
func TestToolXMLTypes(t *testing.T) {
	h := toolHarness(t, toolcall.Hermes, []string{"<tool_call>\n<function=ship>\n<parameter=zip>\n0", "1234\n</parameter>\n<parameter=count>\n2\n</parameter>\n</function>\n</tool_call>"})
	tools := `"tools":[{"type":"function","function":{"name":"ship","parameters":{"type":"object","properties":{"zip":{"type":"string"},"count":{"type":"integer"}}}}}]`
	const want = `{"zip":"01234","count":2}`
	var got toolReplyJSON
	if err := json.Unmarshal(postOK(t, h, `{"model":"tiny",`+tools+`,"messages":[{"role":"user","content":"hi"}]}`), &got); err != nil {
		t.Fatal(err)
	}
	if calls := got.Choices[0].Message.ToolCalls; len(calls) != 1 || *calls[0].Function.Arguments != want {
		t.Errorf("whole: %+v", calls)
	}
	resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","stream":true,`+tools+`,"messages":[{"role":"user","content":"hi"}]}`)
	_, calls, _ := sdkAccumulate(t, readSSE(t, resp.Body))
	resp.Body.Close()
	if len(calls) != 1 || *calls[0].Function.Arguments != want {
		t.Errorf("streamed: %+v", calls)
	}
}
