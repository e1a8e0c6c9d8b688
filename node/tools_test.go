package node

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// toolRequest is a chat with tools and a finished call in its history.
const toolRequest = `{"model":"` + fortunesModel + `","max_tokens":8,
	"tools":` + weatherTool + `,
	"messages":[{"role":"user","content":"Weather in Oslo?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"-3 C"}],
	"metadata":{"joule_ceiling_uj":"100000000"}}`

const weatherTool = `[{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

// TestToolRequestReplay: a request with tools on the built-in model (no
// chat template: the generic polyfill) is served, and its replay verifies;
// the tools are in the prompt, so the same request with other tools, or
// none, is not the receipt's. A granted request cannot carry tools: the
// binding's request id would not cover them.
func TestToolRequestReplay(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	_, energy := generate(t, n, "/v1/chat/completions", toolRequest)
	for _, tc := range []struct{ name, request, verdict string }{
		{"the request", toolRequest, api.VerdictVerified},
		{"another tool description", strings.Replace(toolRequest, "Current weather", "The weather", 1), api.VerdictNotReplayable},
		{"no tools", strings.Replace(toolRequest, weatherTool, `[]`, 1), api.VerdictNotReplayable},
		{"another call id", strings.ReplaceAll(toolRequest, "call_1", "call_2"), api.VerdictNotReplayable},
	} {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(tc.request), "energy": energy})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK || res.Verdict != tc.verdict {
			t.Errorf("%s: %d %s, want %s", tc.name, status, raw, tc.verdict)
		}
		if tc.verdict == api.VerdictVerified && res.ReplayedRequestID != res.RequestID {
			t.Errorf("%s: replayed request id %s, receipt's %s", tc.name, res.ReplayedRequestID, res.RequestID)
		}
	}

	caller, chain := issueGrant(t, n)
	for _, body := range []string{toolRequest, strings.Replace(toolRequest, `"max_tokens":8,`, `"max_tokens":8,"tool_choice":"none",`, 1)} {
		presented, _, err := grant.PresentBody([]byte(body), chain, caller, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp := post(t, n, "/v1/chat/completions", string(presented))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"tools_not_granted"`) {
			t.Errorf("granted request with tools: %d %s, want 400 tools_not_granted", resp.StatusCode, b)
		}
	}
}

// toolReply is a chat completion with tool calls, as a client reads it.
type toolReply struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		Energy json.RawMessage `json:"energy"`
	} `json:"usage"`
}

// chatTools posts body to chat completions and reads its answer of one
// choice, failing the test on any other.
func chatTools(t *testing.T, n *Node, body string) toolReply {
	t.Helper()
	resp := post(t, n, "/v1/chat/completions", body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r toolReply
	if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != http.StatusOK || len(r.Choices) != 1 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	return r
}

// TestForcedToolCall: tool_choice required on the built-in model (no
// template: the generic format) makes it call a tool through the whole
// node (grammar in the request, the engine's mask), with arguments that
// meet the tool's schema, greedy and sampled; its replay verifies under
// the same grammar, and the same request with a tool's schema changed is
// another request.
func TestForcedToolCall(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	// The fortunes model's context is 256 tokens, and the generic prompt
	// spends most of them: one small tool.
	const schema = `{"type":"object","properties":{"c":{"enum":["O","P"]}},"required":["c"],"additionalProperties":false}`
	request := func(extra string) string {
		return `{"model":"` + fortunesModel + `","tool_choice":"required","parallel_tool_calls":false` + extra + `,
			"tools":[{"type":"function","function":{"name":"w","parameters":` + schema + `}}],"messages":[{"role":"user","content":"?"}]}`
	}
	var greedyEnergy json.RawMessage
	var greedyCall [2]string // name, arguments
	for _, extra := range []string{"", `,"temperature":1.0,"seed":9`} {
		got := chatTools(t, n, request(extra))
		c := got.Choices[0]
		if c.FinishReason != "tool_calls" || c.Message.Content != nil || len(c.Message.ToolCalls) != 1 {
			t.Fatalf("forced call %q: %+v", extra, c)
		}
		call := c.Message.ToolCalls[0]
		if err := grammartest.Validate([]byte(schema), []byte(call.Function.Arguments)); err != nil || call.Function.Name != "w" || !strings.HasPrefix(call.ID, "call_") {
			t.Errorf("call %+v: %v", call, err)
		}
		if extra == "" {
			greedyEnergy = got.Usage.Energy
			greedyCall = [2]string{call.Function.Name, call.Function.Arguments}
		}
	}
	// Streamed, the greedy call's deltas add up to the same call.
	resp := post(t, n, "/v1/chat/completions", strings.Replace(request(""), `"tool_choice"`, `"stream":true,"tool_choice"`, 1))
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var name, args, finish string
	calls := 0
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				t.Errorf("content in a forced call's stream: %s", data)
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					calls++
				}
				if tc.Index != 0 {
					t.Errorf("a second call with parallel_tool_calls false: %s", data)
				}
				name += tc.Function.Name
				args += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if calls != 1 || name != greedyCall[0] || args != greedyCall[1] || finish != "tool_calls" {
		t.Errorf("streamed: %d calls, %s(%s), finish %q; whole: %s(%s)", calls, name, args, finish, greedyCall[0], greedyCall[1])
	}

	for _, tc := range []struct{ name, request, verdict string }{
		{"the request", request(""), api.VerdictVerified},
		{"another schema", strings.Replace(request(""), `"P"]`, `"P","Q"]`, 1), api.VerdictNotReplayable},
	} {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(tc.request), "energy": greedyEnergy})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK || res.Verdict != tc.verdict {
			t.Errorf("replay of %s: %d %s, want %s", tc.name, status, raw, tc.verdict)
		}
	}
}

// TestStrictToolsUnderAuto: a strict tool under tool_choice auto (the
// OpenAI Agents SDK's default) on the built-in model (the generic
// format). The reply is free until the model opens a call: unbiased, it
// answers in prose, word for word what it answers with the tool not
// strict. Pushed by logit_bias to open its answer with "{", it calls,
// and the call's arguments meet the schema. Both replay verified.
func TestStrictToolsUnderAuto(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const schema = `{"type":"object","properties":{"c":{"enum":["O","P"]}},"required":["c"],"additionalProperties":false}`
	request := func(strict bool, extra string) string {
		s := "false"
		if strict {
			s = "true"
		}
		return `{"model":"` + fortunesModel + `","max_tokens":60,"parallel_tool_calls":false` + extra + `,
			"tools":[{"type":"function","function":{"name":"w","strict":` + s + `,"parameters":` + schema + `}}],"messages":[{"role":"user","content":"?"}]}`
	}
	ask := func(body string) toolReply {
		t.Helper()
		r := chatTools(t, n, body)
		body2, _ := json.Marshal(map[string]any{"request": json.RawMessage(body), "energy": r.Usage.Energy})
		if status, res, raw := replayRaw(t, n, string(body2)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
			t.Errorf("replay: %d %s", status, raw)
		}
		return r
	}
	free, loose := ask(request(true, "")), ask(request(false, ""))
	c := free.Choices[0]
	if c.Message.Content == nil || *c.Message.Content == "" || len(c.Message.ToolCalls) != 0 ||
		loose.Choices[0].Message.Content == nil || *c.Message.Content != *loose.Choices[0].Message.Content {
		t.Fatalf("prose under a strict tool: %+v; not strict: %+v", c, loose.Choices[0])
	}
	// "{" and "▁{" first; no tabs or newlines, which the fortunes model
	// would rather write between a call's JSON tokens than finish it.
	const bias = `,"logit_bias":{"29912":100,"426":100,"12":-100,"13":-100}`
	called := ask(request(true, bias)).Choices[0]
	if called.FinishReason != "tool_calls" || len(called.Message.ToolCalls) != 1 || called.Message.ToolCalls[0].Function.Name != "w" {
		t.Fatalf("pushed to open a call: %+v", called)
	}
	if err := grammartest.Validate([]byte(schema), []byte(called.Message.ToolCalls[0].Function.Arguments)); err != nil {
		t.Errorf("strict call's arguments %s: %v", called.Message.ToolCalls[0].Function.Arguments, err)
	}
	// Pushed to open its answer with the token " {}", the reply opens a
	// call (its "{") that no call can follow ("}"), in one token the mask
	// could not refuse: an error that says so, not an unheld reply.
	resp := post(t, n, "/v1/chat/completions", request(true, `,"logit_bias":{"6571":100}`))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(b), `"code":"invalid_model_output"`) ||
		!strings.Contains(string(b), `after trigger \"{\"`) {
		t.Errorf("a call opened as none can go on: %d %s", resp.StatusCode, b)
	}
}

func llamaVocab(t *testing.T) *tokenizer.Tokenizer { return testVocab(t, "llama-bpe") }

// TestToolPromptAndDecoder: with Llama 3.1's template and a Llama 3
// vocabulary, a request's tools and tool turns are rendered into the
// prompt (its control tokens parsed as such), and the decoder of a
// generation with tools writes a marker that is a control token, which
// the plain decoder drops, so that the call after it is found. (This
// Llama 3.0 vocabulary names id 128010, Llama 3.1's <|python_tag|>,
// <|reserved_special_token_5|>, so that name stands in for it.)
func TestToolPromptAndDecoder(t *testing.T) {
	tok := llamaVocab(t)
	src, err := os.ReadFile("../gguf/chat/testdata/templates/llama-3.1.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Compile(string(src), chat.Options{BOS: "<|begin_of_text|>", StripBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	gen := &api.Generation{
		Tools: []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}`)},
		Messages: []api.Message{
			{Role: "user", Content: "Weather in Oslo?"},
			{Role: "assistant", ToolCalls: []api.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}},
			{Role: "tool", ToolCallID: "call_1", Content: "-3 C"},
		},
	}
	text, ids, err := renderPrompt(tok, tmpl, gen, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Environment: ipython\n", "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\"",
		`<|start_header_id|>assistant<|end_header_id|>` + "\n\n" + `{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot_id|>`,
		"<|start_header_id|>ipython<|end_header_id|>\n\n\"-3 C\"<|eot_id|>"} {
		if !strings.Contains(text, want) {
			t.Errorf("prompt lacks %q:\n%s", want, text)
		}
	}
	eot, _ := tok.Lookup("<|eot_id|>")
	n := 0
	for _, id := range ids {
		if id == eot {
			n++
		}
	}
	if n != 4 {
		t.Errorf("prompt has %d <|eot_id|> tokens, want 4 (system, user, call, result)", n)
	}
	if f := toolcall.Detect(tmpl); f != toolcall.Llama3 {
		t.Fatalf("format %v", f)
	}

	const marker = "<|reserved_special_token_5|>"
	out := tok.Encode(marker+`{"name": "get_weather", "parameters": {"city": "Rome"}}`, tokenizer.EncodeOptions{ParseSpecial: true})
	tag, _ := tok.Lookup(marker)
	if out[0] != tag || tag != 128010 || !tok.IsControl(tag) {
		t.Fatalf("%s is not control token 128010: %v", marker, out)
	}
	decode := func(d decoder) string {
		var b strings.Builder
		for _, id := range out {
			b.WriteString(d.Next(id))
		}
		b.WriteString(d.Flush())
		return b.String()
	}
	if plain := decode(newTokenDecoder(tok)); strings.Contains(plain, "special_token") {
		t.Errorf("the plain decoder writes control tokens: %q", plain)
	}
	withTools := decode(newToolDecoder(tok, []string{marker, "<|not_in_the_vocabulary|>"}))
	if !strings.HasPrefix(withTools, marker+"{") {
		t.Fatalf("the tool decoder gave %q", withTools)
	}
	content, calls := toolcall.Parse(toolcall.Llama3, strings.Replace(withTools, marker, "<|python_tag|>", 1))
	if content != "" || len(calls) != 1 || calls[0].Name != "get_weather" || calls[0].Arguments != `{"city": "Rome"}` {
		t.Errorf("parsed %q %+v", content, calls)
	}
}

// TestGemma4ToolPrompt: Gemma 4's template renders a request's tools and
// earlier calls in its own notation (its format is read back by
// toolcall.Gemma4), not the generic polyfill's JSON instruction.
func TestGemma4ToolPrompt(t *testing.T) {
	tmpl := testTemplate(t, "gemma-4.jinja", "<bos>")
	if f := toolcall.Detect(tmpl); f != toolcall.Gemma4 {
		t.Fatalf("format %v, want gemma4", f)
	}
	gen := weatherHistory()
	text, _, err := renderPrompt(llamaVocab(t), tmpl, gen, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"declaration:get_weather{", `<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>`} {
		if !strings.Contains(text, want) {
			t.Errorf("prompt lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, `"tool_calls"`) {
		t.Errorf("the generic polyfill's instruction is in the prompt:\n%s", text)
	}
}

// TestResponseFormatWithToolsServed: response_format and tools under
// auto on the built-in model (the generic format): the answer is content
// meeting the schema or a call, and its replay verifies under the same
// grammar; with another schema the request is another.
func TestResponseFormatWithToolsServed(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const schema = `{"type":"object","properties":{"mood":{"enum":["glad","sad"]}},"required":["mood"],"additionalProperties":false}`
	request := `{"model":"` + fortunesModel + `","max_tokens":40,"parallel_tool_calls":false,"logit_bias":{"12":-100,"13":-100},
		"response_format":{"type":"json_schema","json_schema":{"name":"m","schema":` + schema + `}},
		"tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object","properties":{"c":{"enum":["O","P"]}},"required":["c"]}}}],
		"messages":[{"role":"user","content":"?"}]}`
	got := chatTools(t, n, request)
	c := got.Choices[0]
	switch {
	case len(c.Message.ToolCalls) == 1:
		if c.Message.ToolCalls[0].Function.Name != "w" {
			t.Fatalf("call %+v", c.Message.ToolCalls[0])
		}
	case c.Message.Content != nil:
		if err := grammartest.Validate([]byte(schema), []byte(*c.Message.Content)); err != nil {
			t.Fatalf("content %q: %v", *c.Message.Content, err)
		}
	default:
		t.Fatalf("neither content nor a call: %+v", c)
	}
	for _, tc := range []struct{ request, verdict string }{
		{request, api.VerdictVerified},
		{strings.Replace(request, `"sad"]`, `"sad","meh"]`, 1), api.VerdictNotReplayable},
	} {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(tc.request), "energy": got.Usage.Energy})
		if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != tc.verdict {
			t.Errorf("replay: %d %s, want %s", status, raw, tc.verdict)
		}
	}
}

// TestLFM2ToolPrompt: LFM2's templates list a request's tools in their
// own system text (toolcall.LFM2, not the generic polyfill's JSON
// instruction), and an earlier call is in the prompt as the model writes
// one, which toolcall.LFM2 reads back: LFM2.5's template writes it, and
// for LFM2's, which shows only a message's content, the node puts it
// there.
func TestLFM2ToolPrompt(t *testing.T) {
	gen := weatherHistory()
	for _, tc := range []struct{ template, tools, call string }{
		{"LFM2.5-8B-A1B.jinja", "List of tools: [", "<|tool_call_start|>[get_weather(city="},
		{"LFM2-8B-A1B.jinja", "List of tools: <|tool_list_start|>[", "<|tool_call_start|>[get_weather(city="},
	} {
		tmpl := testTemplate(t, tc.template, "<|startoftext|>")
		if f := toolcall.Detect(tmpl); f != toolcall.LFM2 {
			t.Fatalf("%s: format %v, want lfm2", tc.template, f)
		}
		text, _, err := renderPrompt(llamaVocab(t), tmpl, gen, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, tc.tools) || !strings.Contains(text, `"get_weather"`) || strings.Contains(text, `"tool_calls"`) {
			t.Errorf("%s: the tools are not the template's own:\n%s", tc.template, text)
		}
		i := strings.Index(text, tc.call)
		if i < 0 {
			t.Fatalf("%s: prompt lacks %q:\n%s", tc.template, tc.call, text)
		}
		turn, _, _ := strings.Cut(text[i:], "<|im_end|>")
		if _, calls := toolcall.Parse(toolcall.LFM2, turn); len(calls) != 1 || calls[0].Name != "get_weather" || calls[0].Arguments != `{"city":"Oslo"}` {
			t.Errorf("%s: the rendered call %q parses to %+v", tc.template, turn, calls)
		}
	}
}

// weatherHistory is a request with one tool and a conversation that has
// called it once and had its result.
func weatherHistory() *api.Generation {
	return &api.Generation{
		Tools: []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`)},
		Messages: []api.Message{
			{Role: "user", Content: "Weather in Oslo?"},
			{Role: "assistant", ToolCalls: []api.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}},
			{Role: "tool", ToolCallID: "call_1", Content: "-3 C"},
		},
	}
}

// testTemplate compiles one of chat's test templates with bos.
func testTemplate(t *testing.T, name, bos string) *chat.Template {
	t.Helper()
	src, err := os.ReadFile("../gguf/chat/testdata/templates/" + name)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Compile(string(src), chat.Options{BOS: bos})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}
