package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/think"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// thinkingFake is a fakeModel that reasons in <think> blocks, as Qwen3
// does: switchable says its template has enable_thinking, opens that its
// prompts leave the block open (DeepSeek-R1's).
type thinkingFake struct {
	*fakeModel
	switchable, opens bool
}

func (m thinkingFake) Thinking() (think.Tags, bool, bool) {
	return think.Tags{Open: "<think>", Close: "</think>"}, m.switchable, true
}

func (m thinkingFake) Prepare(ctx context.Context, g *Generation) (Prepared, error) {
	p, err := m.fakeModel.Prepare(ctx, g)
	if err != nil {
		return nil, err
	}
	return openedRun{p.(*fakeRun), m.opens}, nil
}

// openedRun is a fakeRun that says whether its prompt opened the block.
type openedRun struct {
	*fakeRun
	opens bool
}

func (r openedRun) OpensReasoning() bool { return r.opens }

// thinkPieces is a Qwen3 reply as the decoder hands it out: the tags
// whole tokens, some text cut mid-word.
var thinkPieces = []string{"<think>", "\n", "The user gre", "ets me.", "\n", "</think>", "\n\n", "Hel", "lo there", "!"}

func thinkingHarness(t *testing.T, switchable, opens bool) *harness {
	t.Helper()
	h := newHarness(t, Config{}, nil)
	h.model.pieces = thinkPieces
	f := toolcall.Hermes
	h.model.tools = &f
	h.reg.local["qwen"] = thinkingFake{h.model, switchable, opens}
	return h
}

// chatMessageOf decodes a whole chat answer's first message.
func chatMessageOf(t *testing.T, b []byte) (content, reasoning *string, calls []toolCallJSON, finish string) {
	t.Helper()
	var got struct {
		Choices []struct {
			Message struct {
				Content          *string        `json:"content"`
				ReasoningContent *string        `json:"reasoning_content"`
				ToolCalls        []toolCallJSON `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	m := got.Choices[0].Message
	return m.Content, m.ReasoningContent, m.ToolCalls, got.Choices[0].FinishReason
}

// streamedChat adds up a chat stream's reasoning and content deltas, and
// the order they came in ("r" and "c" per delta), checking that no tag
// reached the stream.
func streamedChat(t *testing.T, events []sseEvent) (reasoning, content, order string) {
	t.Helper()
	for _, e := range events {
		if strings.Contains(e.data, "think>") {
			t.Fatalf("a tag reached the stream: %s", e.data)
		}
	}
	return accumulateChat(t, events)
}

// accumulateChat adds up a chat stream's reasoning and content deltas.
func accumulateChat(t *testing.T, events []sseEvent) (reasoning, content, order string) {
	t.Helper()
	var r, c, o strings.Builder
	for _, e := range events {
		if e.data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e.data), &ch); err != nil {
			t.Fatal(err)
		}
		for _, d := range ch.Choices {
			if d.Delta.ReasoningContent != nil {
				r.WriteString(*d.Delta.ReasoningContent)
				o.WriteString("r")
			}
			if d.Delta.Content != nil && *d.Delta.Content != "" {
				c.WriteString(*d.Delta.Content)
				o.WriteString("c")
			}
		}
	}
	return r.String(), c.String(), o.String()
}

// TestThinkingReply: a thinking model's block is the reasoning and the
// rest the content, the tags and their layout white space in neither,
// on each chat-shaped API, whole and streamed; the reasoning streams as
// it is decoded.
func TestThinkingReply(t *testing.T) {
	h := thinkingHarness(t, true, false)
	content, reasoning, _, _ := chatMessageOf(t, postOK(t, h, `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`))
	if content == nil || *content != "Hello there!" || reasoning == nil || *reasoning != "The user greets me." {
		t.Fatalf("content %v, reasoning %v", content, reasoning)
	}

	resp := h.post(t, "/v1/chat/completions", `{"model":"qwen","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	r, c, order := streamedChat(t, events)
	if r != "The user greets me." || c != "Hello there!" || order != "rrccc" {
		t.Fatalf("streamed reasoning %q, content %q, deltas %q", r, c, order)
	}

	var whole struct {
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	b := postPathOK(t, h, "/v1/responses", `{"model":"qwen","input":"hi"}`)
	if err := json.Unmarshal(b, &whole); err != nil {
		t.Fatal(err)
	}
	if o := whole.Output; len(o) != 2 || o[0].Type != "reasoning" || o[0].Content[0].Text != "The user greets me." ||
		o[1].Type != "message" || o[1].Content[0].Text != "Hello there!" {
		t.Fatalf("responses: %s", b)
	}

	var msg struct {
		Content []struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
			Text     string `json:"text"`
		} `json:"content"`
	}
	b = postPathOK(t, h, "/v1/messages", `{"model":"qwen","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	if c := msg.Content; len(c) != 2 || c[0].Type != "thinking" || c[0].Thinking != "The user greets me." || c[1].Type != "text" || c[1].Text != "Hello there!" {
		t.Fatalf("messages: %s", b)
	}

	var oll struct {
		Message struct {
			Content  string `json:"content"`
			Thinking string `json:"thinking"`
		} `json:"message"`
	}
	b = postPathOK(t, h, "/api/chat", `{"model":"qwen","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	if err := json.Unmarshal(b, &oll); err != nil {
		t.Fatal(err)
	}
	if oll.Message.Thinking != "The user greets me." || oll.Message.Content != "Hello there!" {
		t.Fatalf("ollama: %s", b)
	}

	// Ollama lists the capability.
	if b = postPathOK(t, h, "/api/show", `{"model":"qwen"}`); !strings.Contains(string(b), `"thinking"`) {
		t.Errorf("/api/show: %s", b)
	}
	if b = postPathOK(t, h, "/api/show", `{"model":"tiny"}`); strings.Contains(string(b), `"thinking"`) {
		t.Errorf("/api/show of a plain model: %s", b)
	}

	// The raw completion is the text as the model wrote it.
	b = postPathOK(t, h, "/v1/completions", `{"model":"qwen","prompt":"hi"}`)
	if !strings.Contains(string(b), `"text":"<think>\nThe user greets me.\n</think>\n\nHello there!"`) {
		t.Errorf("completions: %s", b)
	}
	// A model that writes no block: a <think> in its reply is content,
	// and its usage counts no reasoning tokens.
	h.model.pieces = []string{"<think>", "x", "</think>"}
	b = postOK(t, h, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	content, reasoning, _, _ = chatMessageOf(t, b)
	if reasoning != nil || content == nil || *content != "<think>x</think>" || strings.Contains(string(b), "completion_tokens_details") {
		t.Errorf("a plain model: content %v, reasoning %v: %s", content, reasoning, b)
	}
	// A reply that does not open the block is all content, as written.
	h.model.pieces = []string{"\n", "Hello", " <think> is a tag."}
	content, reasoning, _, _ = chatMessageOf(t, postOK(t, h, `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`))
	if reasoning != nil || content == nil || *content != "\nHello <think> is a tag." {
		t.Errorf("no block: content %q, reasoning %v", *content, reasoning)
	}
}

// TestThinkingOpenedByPrompt: where the prompt opened the block
// (DeepSeek-R1's template ends it with "<think>\n"), the reply starts
// inside it: everything up to </think> is reasoning, whole and
// streamed, and a reply cut short there has no content.
func TestThinkingOpenedByPrompt(t *testing.T) {
	h := thinkingHarness(t, false, true)
	h.model.pieces = thinkPieces[1:]
	content, reasoning, _, _ := chatMessageOf(t, postOK(t, h, `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`))
	if content == nil || *content != "Hello there!" || reasoning == nil || *reasoning != "The user greets me." {
		t.Fatalf("content %v, reasoning %v", content, reasoning)
	}
	resp := h.post(t, "/v1/chat/completions", `{"model":"qwen","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	r, c, _ := streamedChat(t, events)
	if r != strings.Repeat("The user greets me.", 2) || c != strings.Repeat("Hello there!", 2) {
		t.Fatalf("two choices streamed: reasoning %q, content %q", r, c)
	}
	content, reasoning, _, finish := chatMessageOf(t, postOK(t, h, `{"model":"qwen","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	if content == nil || *content != "" || reasoning == nil || *reasoning != "The user greets me." || finish != "length" {
		t.Fatalf("cut short: content %v, reasoning %v, finish %q", content, reasoning, finish)
	}
}

// TestThinkingToolCall: with tools, the content after the block is read
// for calls in the model's format (Hermes's <tool_call> here): the
// reasoning, then the call, whole and streamed, and through Anthropic's
// Messages API thinking then tool_use.
func TestThinkingToolCall(t *testing.T) {
	h := thinkingHarness(t, true, false)
	h.model.pieces = []string{"<think>", "Need the weather.", "</think>", "\n\n", "<tool_call>", "\n", `{"name": "get_weather", `, `"arguments": {"city": "Oslo"}}`, "\n", "</tool_call>"}
	body := `{"model":"qwen",` + weatherTools + `,"messages":[{"role":"user","content":"weather in Oslo?"}]}`
	content, reasoning, calls, finish := chatMessageOf(t, postOK(t, h, body))
	if content != nil || reasoning == nil || *reasoning != "Need the weather." || finish != "tool_calls" || len(calls) != 1 ||
		*calls[0].Function.Name != "get_weather" || *calls[0].Function.Arguments != `{"city": "Oslo"}` || !strings.HasPrefix(calls[0].ID, "call_") {
		t.Fatalf("content %v, reasoning %v, calls %+v, finish %q", content, reasoning, calls, finish)
	}
	resp := h.post(t, "/v1/chat/completions", strings.Replace(body, `"model"`, `"stream":true,"model"`, 1))
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	c, streamedCalls, finish := sdkAccumulate(t, events)
	if c != nil || finish != "tool_calls" || len(streamedCalls) != 1 || *streamedCalls[0].Function.Arguments != `{"city": "Oslo"}` {
		t.Fatalf("streamed: content %v, calls %+v, finish %q", c, streamedCalls, finish)
	}
	if raw := fmt.Sprint(events); !strings.Contains(raw, `"reasoning_content":"Need the weather."`) {
		t.Errorf("stream %s", raw)
	}

	var msg struct {
		Content []struct {
			Type     string          `json:"type"`
			Thinking string          `json:"thinking"`
			Name     string          `json:"name"`
			Input    json.RawMessage `json:"input"`
		} `json:"content"`
	}
	b := postPathOK(t, h, "/v1/messages", `{"model":"qwen","max_tokens":50,"messages":[{"role":"user","content":"weather in Oslo?"}],
		"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`)
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	if c := msg.Content; len(c) != 2 || c[0].Type != "thinking" || c[0].Thinking != "Need the weather." || c[1].Type != "tool_use" || string(c[1].Input) != `{"city":"Oslo"}` {
		t.Fatalf("messages: %s", b)
	}
}

// TestThinkingLogprobs: logprobs are the content tokens': the block's,
// the tags' and the white space after it have none.
func TestThinkingLogprobs(t *testing.T) {
	h := thinkingHarness(t, true, false)
	body := `{"model":"qwen","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`
	var got struct {
		Choices []struct {
			Logprobs struct {
				Content []wireItem `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(postOK(t, h, body), &got); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, it := range got.Choices[0].Logprobs.Content {
		tokens = append(tokens, it.Token)
	}
	// "\n\n" after </think> is dropped layout; its token is counted
	// where it starts, after the block: content.
	if strings.Join(tokens, "|") != "\n\n|Hel|lo there|!" {
		t.Fatalf("logprobs of %q", tokens)
	}
}

// TestThinkingSwitch: chat_template_kwargs.enable_thinking, Ollama's
// think and Anthropic's thinking turn a switchable model's thinking on
// or off (Generation.Think, which its template reads); a model that
// never reasons refuses on, one without the switch is held to no
// reasoning, and other template variables are refused by name.
func TestThinkingSwitch(t *testing.T) {
	h := thinkingHarness(t, true, false)
	last := func() *Generation {
		h.model.mu.Lock()
		defer h.model.mu.Unlock()
		return h.model.calls[len(h.model.calls)-1]
	}
	for _, c := range []struct {
		path, body string
		want       bool
	}{
		{"/v1/chat/completions", `{"model":"qwen","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`, false},
		{"/v1/chat/completions", `{"model":"qwen","chat_template_kwargs":{"enable_thinking":true},"messages":[{"role":"user","content":"hi"}]}`, true},
		{"/api/chat", `{"model":"qwen","stream":false,"think":false,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"/v1/messages", `{"model":"qwen","max_tokens":9,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"hi"}]}`, false},
	} {
		postPathOK(t, h, c.path, c.body)
		if g := last(); g.Think == nil || *g.Think != c.want {
			t.Errorf("%s %s: Think %v", c.path, c.body, g.Think)
		}
	}
	postPathOK(t, h, "/v1/messages", `{"model":"qwen","max_tokens":9,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"hi"}]}`)
	if g := last(); g.Think != nil {
		t.Errorf("adaptive set Think %v: the template's default should hold", *g.Think)
	}

	// A thinking model without the switch is held to no reasoning (the
	// node closes its block as it opens).
	h.reg.local["r1"] = thinkingFake{h.model, false, true}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"r1","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`},
		{"/api/chat", `{"model":"r1","stream":false,"think":false,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"r1","max_tokens":9,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"hi"}]}`},
	} {
		postPathOK(t, h, c.path, c.body)
		if g := last(); !g.ThinkOff || g.Think != nil {
			t.Errorf("%s %s: ThinkOff %v, Think %v", c.path, c.body, g.ThinkOff, g.Think)
		}
	}
	for _, c := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"tiny","chat_template_kwargs":{"enable_thinking":true},"messages":[{"role":"user","content":"hi"}]}`, "chat_template_kwargs.enable_thinking"},
		{"/api/chat", `{"model":"tiny","think":true,"messages":[{"role":"user","content":"hi"}]}`, "think"},
		{"/api/generate", `{"model":"qwen","raw":true,"think":false,"prompt":"hi"}`, "think"},
		{"/v1/chat/completions", `{"model":"qwen","chat_template_kwargs":{"add_vision_id":true},"messages":[{"role":"user","content":"hi"}]}`, "chat_template_kwargs.add_vision_id"},
		{"/v1/chat/completions", `{"model":"qwen","chat_template_kwargs":{"enable_thinking":"no"},"messages":[{"role":"user","content":"hi"}]}`, "chat_template_kwargs.enable_thinking"},
		{"/v1/chat/completions", `{"model":"qwen","chat_template_kwargs":[],"messages":[{"role":"user","content":"hi"}]}`, "chat_template_kwargs"},
	} {
		resp := h.post(t, c.path, c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// OpenAI's errors name the field in param, Anthropic's and
		// Ollama's ({"error": "..."}) in the message.
		var e struct {
			Error json.RawMessage `json:"error"`
		}
		var oa struct {
			Param, Message string
		}
		if json.Unmarshal(b, &e) == nil && json.Unmarshal(e.Error, &oa) != nil {
			_ = json.Unmarshal(e.Error, &oa.Message)
		}
		if resp.StatusCode != http.StatusBadRequest || oa.Param != c.param && !strings.Contains(oa.Message, c.param) {
			t.Errorf("%s %s: status %d, %s, want 400 naming %s", c.path, c.body, resp.StatusCode, b, c.param)
		}
	}
	// think true on a model that always reasons is what it does.
	postPathOK(t, h, "/api/chat", `{"model":"r1","stream":false,"think":true,"messages":[{"role":"user","content":"hi"}]}`)
	if g := last(); g.Think != nil {
		t.Errorf("think true on a model without the switch passed it on: %v", *g.Think)
	}
}

// TestReasoningGivenBack: an assistant's reasoning given back (chat's
// reasoning_content, Ollama's thinking, Anthropic's thinking blocks)
// reaches the model's template as the message's reasoning; on any other
// role it is refused by name.
func TestReasoningGivenBack(t *testing.T) {
	h := thinkingHarness(t, true, false)
	last := func() *Generation {
		h.model.mu.Lock()
		defer h.model.mu.Unlock()
		return h.model.calls[len(h.model.calls)-1]
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"qwen","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning_content":"plan"},{"role":"user","content":"c"}]}`},
		{"/api/chat", `{"model":"qwen","stream":false,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","thinking":"plan"},{"role":"user","content":"c"}]}`},
		{"/v1/messages", `{"model":"qwen","max_tokens":9,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"thinking","thinking":"pl","signature":""},{"type":"thinking","thinking":"an","signature":""},{"type":"text","text":"b"}]},{"role":"user","content":"c"}]}`},
	} {
		postPathOK(t, h, c.path, c.body)
		if g := last(); len(g.Messages) != 3 || g.Messages[1].Reasoning != "plan" || g.Messages[1].Content != "b" {
			t.Errorf("%s: messages %+v", c.path, g.Messages)
		}
	}
	for _, c := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"qwen","messages":[{"role":"user","content":"a","reasoning_content":"x"}]}`, "messages[0].reasoning_content"},
		{"/api/chat", `{"model":"qwen","messages":[{"role":"user","content":"a","thinking":"x"}]}`, "messages[0].thinking"},
	} {
		resp := h.post(t, c.path, c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.param) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, b)
		}
	}
}

// TestResponsesReasoningGivenBack: a Responses API reasoning item, as
// the API gave it out, is given back as the reasoning of the assistant
// turn after it (a function_call's, or a message's).
func TestResponsesReasoningGivenBack(t *testing.T) {
	h := thinkingHarness(t, true, false)
	postPathOK(t, h, "/v1/responses", `{"model":"qwen","input":[{"role":"user","content":"w?"},
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"need "},{"type":"reasoning_text","text":"weather"}]},
		{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},
		{"type":"reasoning","id":"rs_2","summary":[],"content":[{"type":"reasoning_text","text":"done"}]},
		{"type":"message","role":"assistant","content":"It is ok."},{"role":"user","content":"thanks"}],
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`)
	h.model.mu.Lock()
	g := h.model.calls[len(h.model.calls)-1]
	h.model.mu.Unlock()
	ms := g.Messages
	if len(ms) != 5 || ms[1].Reasoning != "need weather" || len(ms[1].ToolCalls) != 1 || ms[3].Reasoning != "done" || ms[3].Content != "It is ok." {
		t.Fatalf("messages %+v", ms)
	}
	resp := h.post(t, "/v1/responses", `{"model":"qwen","input":[{"type":"reasoning","content":"x"}]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a reasoning item with content %q: %d", "x", resp.StatusCode)
	}
}

// TestReasoningEffortNone: reasoning_effort "none" (chat) and
// reasoning.effort "none" (responses) turn thinking off, as the switch
// does; llama-server's reasoning_format "none" gives the reply as the
// model wrote it, tags and all, and "deepseek-legacy" that and the
// reasoning; a contradiction or an unknown format is refused by name.
func TestReasoningEffortNone(t *testing.T) {
	h := thinkingHarness(t, true, false)
	last := func() *Generation {
		h.model.mu.Lock()
		defer h.model.mu.Unlock()
		return h.model.calls[len(h.model.calls)-1]
	}
	for _, body := range []string{
		`{"model":"qwen","reasoning_effort":"none","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"qwen","reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`,
	} {
		postOK(t, h, body)
		if g := last(); g.Think == nil || *g.Think || g.ReasoningEffort != "" {
			t.Errorf("%s: Think %v, effort %q", body, g.Think, g.ReasoningEffort)
		}
	}
	postPathOK(t, h, "/v1/responses", `{"model":"qwen","input":"hi","reasoning":{"effort":"none"}}`)
	if g := last(); g.Think == nil || *g.Think {
		t.Errorf("responses: Think %v", g.Think)
	}
	content, reasoning, _, _ := chatMessageOf(t, postOK(t, h, `{"model":"qwen","reasoning_format":"none","messages":[{"role":"user","content":"hi"}]}`))
	if reasoning != nil || content == nil || *content != strings.Join(thinkPieces, "") {
		t.Errorf("reasoning_format none: content %v, reasoning %v", content, reasoning)
	}
	resp := h.post(t, "/v1/chat/completions", `{"model":"qwen","stream":true,"reasoning_format":"none","messages":[{"role":"user","content":"hi"}]}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	if _, c, _ := accumulateChat(t, events); c != strings.Join(thinkPieces, "") {
		t.Errorf("reasoning_format none, streamed: %q", c)
	}
	// "deepseek-legacy": the reasoning split off, and the reply as
	// written, tags and all, as the content; whole and streamed.
	content, reasoning, _, _ = chatMessageOf(t, postOK(t, h, `{"model":"qwen","reasoning_format":"deepseek-legacy","messages":[{"role":"user","content":"hi"}]}`))
	if reasoning == nil || *reasoning != "The user greets me." || content == nil || *content != strings.Join(thinkPieces, "") {
		t.Errorf("reasoning_format deepseek-legacy: content %v, reasoning %v", content, reasoning)
	}
	resp = h.post(t, "/v1/chat/completions", `{"model":"qwen","stream":true,"reasoning_format":"deepseek-legacy","messages":[{"role":"user","content":"hi"}]}`)
	events = readSSE(t, resp.Body)
	resp.Body.Close()
	if r, c, _ := accumulateChat(t, events); r != "The user greets me." || c != strings.Join(thinkPieces, "") {
		t.Errorf("reasoning_format deepseek-legacy, streamed: reasoning %q, content %q", r, c)
	}
	for _, c := range []struct{ body, param string }{
		{`{"model":"qwen","reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true},"messages":[{"role":"user","content":"hi"}]}`, "chat_template_kwargs.enable_thinking"},
		{`{"model":"qwen","reasoning_format":"deepseek-legacy",` + weatherTools + `,"messages":[{"role":"user","content":"hi"}]}`, "reasoning_format"},
		{`{"model":"qwen","reasoning_format":"legacy","messages":[{"role":"user","content":"hi"}]}`, "reasoning_format"},
		{`{"model":"qwen","reasoning_format":"none",` + weatherTools + `,"messages":[{"role":"user","content":"hi"}]}`, "reasoning_format"},
	} {
		h.reg.local["r1"] = thinkingFake{h.model, false, true}
		resp := h.post(t, "/v1/chat/completions", c.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"`+c.param+`"`) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, b)
		}
	}
}

// TestThinkingOllamaGenerate: /api/generate (not raw) splits the reply as
// Ollama does: thinking beside the response, whole and streamed; raw, the
// reply is as written.
func TestThinkingOllamaGenerate(t *testing.T) {
	h := thinkingHarness(t, true, false)
	var whole struct {
		Response string `json:"response"`
		Thinking string `json:"thinking"`
	}
	b := postPathOK(t, h, "/api/generate", `{"model":"qwen","prompt":"hi","stream":false}`)
	if err := json.Unmarshal(b, &whole); err != nil || whole.Thinking != "The user greets me." || whole.Response != "Hello there!" {
		t.Fatalf("generate: %s", b)
	}
	var r, c strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(postPathOK(t, h, "/api/generate", `{"model":"qwen","prompt":"hi"}`))), "\n") {
		var ch struct {
			Response string `json:"response"`
			Thinking string `json:"thinking"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		r.WriteString(ch.Thinking)
		c.WriteString(ch.Response)
	}
	if r.String() != "The user greets me." || c.String() != "Hello there!" {
		t.Errorf("streamed: %q / %q", r.String(), c.String())
	}
	b = postPathOK(t, h, "/api/generate", `{"model":"qwen","prompt":"hi","raw":true,"stream":false}`)
	whole.Thinking = ""
	if err := json.Unmarshal(b, &whole); err != nil || whole.Thinking != "" || whole.Response != strings.Join(thinkPieces, "") {
		t.Errorf("raw: %s", b)
	}
}

// TestThinkingStreams: streamed, Anthropic's Messages API gives the block
// as a thinking content block (thinking_delta events) before the text
// block, and Ollama's chat gives it as chunks' thinking before their
// content; no tag reaches either stream.
func TestThinkingStreams(t *testing.T) {
	h := thinkingHarness(t, true, false)
	resp := h.post(t, "/v1/messages", `{"model":"qwen","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var thinking, text strings.Builder
	var blocks []string
	for _, e := range events {
		if strings.Contains(e.data, "think>") {
			t.Fatalf("a tag reached the stream: %s", e.data)
		}
		var ev struct {
			ContentBlock struct {
				Type string `json:"type"`
			} `json:"content_block"`
			Delta struct {
				Type     string `json:"type"`
				Thinking string `json:"thinking"`
				Text     string `json:"text"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		switch e.name {
		case "content_block_start":
			blocks = append(blocks, ev.ContentBlock.Type)
		case "content_block_delta":
			thinking.WriteString(ev.Delta.Thinking)
			text.WriteString(ev.Delta.Text)
		}
	}
	if strings.Join(blocks, " ") != "thinking text" || thinking.String() != "The user greets me." || text.String() != "Hello there!" {
		t.Errorf("messages stream: blocks %v, thinking %q, text %q", blocks, thinking.String(), text.String())
	}

	b := postPathOK(t, h, "/api/chat", `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`)
	var th, content strings.Builder
	order := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(line, "think>") {
			t.Fatalf("a tag reached the stream: %s", line)
		}
		var ch struct {
			Message struct {
				Content  string `json:"content"`
				Thinking string `json:"thinking"`
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Message.Thinking != "" {
			order += "t"
		}
		if ch.Message.Content != "" {
			order += "c"
		}
		th.WriteString(ch.Message.Thinking)
		content.WriteString(ch.Message.Content)
	}
	if th.String() != "The user greets me." || content.String() != "Hello there!" || !strings.HasPrefix(order, "t") || strings.Contains(order, "ct") {
		t.Errorf("ollama stream: thinking %q, content %q, order %q", th.String(), content.String(), order)
	}
}
