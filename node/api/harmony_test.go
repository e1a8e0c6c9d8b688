package api

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// harmonyModel is a fakeModel whose replies are harmony messages.
type harmonyModel struct{ *fakeModel }

func (harmonyModel) Harmony() bool { return true }

// harmonyPieces is a gpt-oss reply as the decoder hands it out, the
// markers whole tokens and some text cut mid-word.
var harmonyPieces = []string{"<|channel|>", "analysis", "<|message|>", "The user gre", "ets me.", "<|end|>",
	"<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Hel", "lo there", "!"}

func harmonyHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, Config{}, nil)
	h.model.pieces = harmonyPieces
	f := toolcall.Harmony
	h.model.tools = &f
	h.reg.local["oss"] = harmonyModel{h.model}
	return h
}

// TestHarmonyReply: a harmony model's analysis channel is the message's
// reasoning_content and its final channel the content, the markers in
// neither, as llama-server answers for gpt-oss.
func TestHarmonyReply(t *testing.T) {
	h := harmonyHarness(t)
	b := postOK(t, h, `{"model":"oss","messages":[{"role":"user","content":"hi"}]}`)
	var got struct {
		Choices []struct {
			Message struct {
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	m := got.Choices[0].Message
	if m.Content == nil || *m.Content != "Hello there!" || m.ReasoningContent == nil || *m.ReasoningContent != "The user greets me." {
		t.Fatalf("reply %s", b)
	}

	// Another model's reply has no reasoning_content at all.
	b = postOK(t, h, `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	if strings.Contains(string(b), "reasoning_content") {
		t.Errorf("a plain model's reply has reasoning_content: %s", b)
	}
}

// TestHarmonyStream: streamed, the same reply comes as reasoning_content
// deltas then content deltas, each piece as soon as it is known, and no
// delta carries a marker.
func TestHarmonyStream(t *testing.T) {
	h := harmonyHarness(t)
	resp := h.post(t, "/v1/chat/completions", `{"model":"oss","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	for _, e := range events {
		if strings.Contains(e.data, "<|") {
			t.Fatalf("a marker reached the stream: %s", e.data)
		}
	}
	reasoning, content, order := accumulateChat(t, events)
	if reasoning != "The user greets me." || content != "Hello there!" {
		t.Fatalf("reasoning %q, content %q", reasoning, content)
	}
	if order != "rrccc" {
		t.Errorf("deltas %q, want the reasoning's two pieces then the content's three", order)
	}
}

// TestHarmonyLogprobs: logprobs of a harmony reply are its content
// tokens' (the final channel's), whole and streamed alike: the analysis
// channel's tokens, the markers and the headers have none.
func TestHarmonyLogprobs(t *testing.T) {
	h := harmonyHarness(t)
	// The content pieces are the fake's tokens 11-13: log-probabilities
	// −6, −6.5, −7 (fakeLogprobs).
	want := []wireItem{{Token: "Hel", Logprob: -6}, {Token: "lo there", Logprob: -6.5}, {Token: "!", Logprob: -7}}
	check := func(how string, got []wireItem) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d tokens %+v, want %+v", how, len(got), got, want)
		}
		for i, w := range want {
			if got[i].Token != w.Token || got[i].Logprob != w.Logprob || len(got[i].TopLogprobs) != 2 || got[i].TopLogprobs[0].Token != w.Token {
				t.Errorf("%s: token %d %+v, want %s at %v with 2 alternatives", how, i, got[i], w.Token, w.Logprob)
			}
		}
	}
	body := `{"model":"oss","logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`
	b := postOK(t, h, body)
	var got struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Logprobs struct {
				Content []wireItem `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Choices[0].Message.Content != "Hello there!" {
		t.Fatalf("reply %s", b)
	}
	check("whole", got.Choices[0].Logprobs.Content)

	resp := h.post(t, "/v1/chat/completions", strings.Replace(body, `"model"`, `"stream":true,"model"`, 1))
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var streamed []wireItem
	for _, e := range events {
		if e.data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []wireItem `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e.data), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			if c.Logprobs == nil {
				continue
			}
			if c.Delta.ReasoningContent != nil {
				t.Errorf("a reasoning delta has logprobs: %s", e.data)
			}
			streamed = append(streamed, c.Logprobs.Content...)
		}
	}
	check("streamed", streamed)
}

// TestHarmonyForcedToolChoice: tool_choice "required" or a named function
// holds a harmony model's output to a grammar of one message to that
// function (after an optional analysis message), its arguments held to
// the schema; the reply the grammar takes is the tool call.
func TestHarmonyForcedToolChoice(t *testing.T) {
	h := harmonyHarness(t)
	h.model.pieces = harmonyCall
	reply := strings.Join(harmonyCall, "")
	for _, tc := range []struct {
		choice string
		takes  map[string]bool
	}{
		{`"required"`, map[string]bool{
			reply: true,
			`<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}`:    true,
			"<|channel|>final<|message|>It is sunny.":                                       false,
			`<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}`: false, // city is required
		}},
		{`{"type":"function","function":{"name":"get_weather"}}`, map[string]bool{
			reply: true,
			`<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}`: false,
		}},
	} {
		b := postOK(t, h, `{"model":"oss","tool_choice":`+tc.choice+`,`+weatherTools+`,"messages":[{"role":"user","content":"weather in Oslo?"}]}`)
		g := h.model.lastCall()
		if g.Grammar == nil || g.Format != FormatToolCalls {
			t.Fatalf("tool_choice %s: the generation has no tool-call grammar (format %q)", tc.choice, g.Format)
		}
		for text, want := range tc.takes {
			m, err := g.Grammar.NewMatcher()
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Advance([]byte(text)) == nil && m.Accepting(); got != want {
				t.Errorf("tool_choice %s: the grammar takes %q: %v, want %v", tc.choice, text, got, want)
			}
		}
		var got struct {
			Choices []struct {
				Message struct {
					Content   *string        `json:"content"`
					ToolCalls []toolCallJSON `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		c := got.Choices[0]
		if c.Message.Content != nil || c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 ||
			*c.Message.ToolCalls[0].Function.Name != "get_weather" || *c.Message.ToolCalls[0].Function.Arguments != `{"city": "Oslo"}` {
			t.Errorf("tool_choice %s: reply %s", tc.choice, b)
		}
	}
	// strict: true needs a forced choice, which a harmony model now has.
	strict := strings.Replace(weatherTools, `"description"`, `"strict":true,"description"`, 1)
	postOK(t, h, `{"model":"oss","tool_choice":"required",`+strict+`,"messages":[{"role":"user","content":"weather?"}]}`)
}

// TestHarmonyResponses: on /v1/responses a harmony model's analysis
// channel is a reasoning item (reasoning_text content, no summary) before
// the message, as OpenAI's Responses API gives gpt-oss's; streamed, as
// response.reasoning_text.delta events on output 0 then
// response.output_text.delta events on output 1, the markers in neither.
// The message's logprobs are its tokens'. A reply cut off while reasoning
// has an empty message.
func TestHarmonyResponses(t *testing.T) {
	h := harmonyHarness(t)
	type output struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Summary []any  `json:"summary"`
		Content []struct {
			Type     string     `json:"type"`
			Text     string     `json:"text"`
			Logprobs []wireItem `json:"logprobs"`
		} `json:"content"`
	}
	var whole struct {
		Status string   `json:"status"`
		Output []output `json:"output"`
	}
	b := postPathOK(t, h, "/v1/responses", `{"model":"oss","input":"hi","include":["message.output_text.logprobs"]}`)
	if err := json.Unmarshal(b, &whole); err != nil {
		t.Fatal(err)
	}
	o := whole.Output
	if len(o) != 2 || o[0].Type != "reasoning" || !strings.HasPrefix(o[0].ID, "rs_") || o[0].Summary == nil ||
		len(o[0].Content) != 1 || o[0].Content[0].Type != "reasoning_text" || o[0].Content[0].Text != "The user greets me." ||
		o[1].Type != "message" || o[1].Content[0].Type != "output_text" || o[1].Content[0].Text != "Hello there!" {
		t.Fatalf("response %s", b)
	}
	if lps := o[1].Content[0].Logprobs; len(lps) != 3 || lps[0].Token != "Hel" || lps[2].Token != "!" {
		t.Errorf("the message's logprobs %+v, want its three tokens'", lps)
	}

	resp := h.post(t, "/v1/responses", `{"model":"oss","input":"hi","stream":true}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var names []string
	var reasoning, content strings.Builder
	for _, e := range events {
		if strings.Contains(e.data, "<|") {
			t.Fatalf("a marker reached the stream: %s", e.data)
		}
		if len(names) == 0 || names[len(names)-1] != e.name {
			names = append(names, e.name)
		}
		var ev struct {
			OutputIndex int    `json:"output_index"`
			Delta       string `json:"delta"`
		}
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		switch e.name {
		case "response.reasoning_text.delta":
			if ev.OutputIndex != 0 {
				t.Errorf("reasoning at output %d", ev.OutputIndex)
			}
			reasoning.WriteString(ev.Delta)
		case "response.output_text.delta":
			if ev.OutputIndex != 1 {
				t.Errorf("text at output %d", ev.OutputIndex)
			}
			content.WriteString(ev.Delta)
		}
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.reasoning_text.delta " +
		"response.reasoning_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("events\n %s\nwant\n %s", got, want)
	}
	if reasoning.String() != "The user greets me." || content.String() != "Hello there!" {
		t.Errorf("streamed reasoning %q, content %q", reasoning.String(), content.String())
	}

	// Cut off while reasoning: the reasoning, and an empty message.
	b = postPathOK(t, h, "/v1/responses", `{"model":"oss","input":"hi","max_output_tokens":4}`)
	if err := json.Unmarshal(b, &whole); err != nil {
		t.Fatal(err)
	}
	o = whole.Output
	if whole.Status != "incomplete" || len(o) != 2 || o[0].Content[0].Text != "The user gre" || o[1].Type != "message" || o[1].Content[0].Text != "" {
		t.Errorf("cut off: %s", b)
	}
}

// harmonyCall is a gpt-oss reply that calls a function: reasoning, then a
// message to functions.get_weather whose text is the arguments.
var harmonyCall = []string{"<|channel|>", "analysis", "<|message|>", "Need the weather.", "<|end|>",
	"<|start|>", "assistant", "<|channel|>", "commentary to=", "functions.get", "_weather ", "<|constrain|>", "json",
	"<|message|>", `{"city":`, ` "Oslo"}`}

// TestHarmonyToolCall: with tools (tool_choice auto), a harmony message to
// functions.NAME is a tool call: whole, the message's tool_calls with
// content null and finish_reason tool_calls; streamed, tool_calls deltas
// (id, type and name first, then the arguments) that add up to it.
func TestHarmonyToolCall(t *testing.T) {
	h := harmonyHarness(t)
	h.model.pieces = harmonyCall
	b := postOK(t, h, `{"model":"oss",`+weatherTools+`,"messages":[{"role":"user","content":"weather in Oslo?"}]}`)
	var got struct {
		Choices []struct {
			Message struct {
				Content          *string        `json:"content"`
				ReasoningContent string         `json:"reasoning_content"`
				ToolCalls        []toolCallJSON `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	c := got.Choices[0]
	if c.Message.Content != nil || c.Message.ReasoningContent != "Need the weather." || c.FinishReason != "tool_calls" ||
		len(c.Message.ToolCalls) != 1 || *c.Message.ToolCalls[0].Function.Name != "get_weather" ||
		*c.Message.ToolCalls[0].Function.Arguments != `{"city": "Oslo"}` || !strings.HasPrefix(c.Message.ToolCalls[0].ID, "call_") {
		t.Fatalf("reply %s", b)
	}

	resp := h.post(t, "/v1/chat/completions", `{"model":"oss","stream":true,`+weatherTools+`,"messages":[{"role":"user","content":"weather in Oslo?"}]}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	content, calls, finish := sdkAccumulate(t, events)
	if content != nil || finish != "tool_calls" || len(calls) != 1 || *calls[0].Function.Name != "get_weather" ||
		*calls[0].Function.Arguments != `{"city": "Oslo"}` {
		t.Fatalf("streamed: content %v, finish %q, calls %+v", content, finish, calls)
	}
	if raw := fmt.Sprint(events); strings.Contains(raw, "<|") || !strings.Contains(raw, `"reasoning_content":"Need the weather."`) {
		t.Errorf("stream %s", raw)
	}

	// Without tools the same message is reasoning, not a call.
	b = postOK(t, h, `{"model":"oss","messages":[{"role":"user","content":"weather in Oslo?"}]}`)
	if strings.Contains(string(b), "tool_calls") || !strings.Contains(string(b), `Need the weather.{\"city\": \"Oslo\"}`) {
		t.Errorf("without tools: %s", b)
	}
}

// postPathOK posts body to path and returns the 200 answer's body.
func postPathOK(t *testing.T, h *harness, path, body string) []byte {
	t.Helper()
	resp := h.post(t, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
	}
	return b
}

// TestHarmonyToolCallOtherAPIs: the same harmony call through the
// Responses API (a reasoning item, then a function_call item, no empty
// message), Anthropic's Messages API (thinking, then tool_use) and
// Ollama's chat (thinking, then tool_calls).
func TestHarmonyToolCallOtherAPIs(t *testing.T) {
	h := harmonyHarness(t)
	h.model.pieces = harmonyCall
	var resp responseItemsJSON
	if err := json.Unmarshal(postPathOK(t, h, "/v1/responses", `{"model":"oss","input":"weather in Oslo?",`+responsesTools+`}`), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 2 || resp.Output[0].Type != "reasoning" || resp.Output[1].Type != "function_call" ||
		resp.Output[1].Name != "get_weather" || resp.Output[1].Arguments != `{"city": "Oslo"}` {
		t.Fatalf("responses output %+v", resp.Output)
	}

	var msg struct {
		Content []struct {
			Type     string          `json:"type"`
			Thinking string          `json:"thinking"`
			Name     string          `json:"name"`
			Input    json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	// Adaptive thinking, as Claude Code may ask: gpt-oss decides.
	if err := json.Unmarshal(postPathOK(t, h, "/v1/messages", `{"model":"oss","max_tokens":50,"messages":[{"role":"user","content":"weather in Oslo?"}],
		"thinking":{"type":"adaptive"},"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`), &msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "Need the weather." ||
		msg.Content[1].Type != "tool_use" || msg.Content[1].Name != "get_weather" || string(msg.Content[1].Input) != `{"city":"Oslo"}` || msg.StopReason != "tool_use" {
		t.Fatalf("messages content %+v", msg)
	}

	var oll struct {
		Message struct {
			Content   string `json:"content"`
			Thinking  string `json:"thinking"`
			ToolCalls []struct {
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	}
	if err := json.Unmarshal(postPathOK(t, h, "/api/chat", `{"model":"oss","stream":false,"messages":[{"role":"user","content":"weather in Oslo?"}],`+weatherTools+`}`), &oll); err != nil {
		t.Fatal(err)
	}
	if oll.Message.Thinking != "Need the weather." || oll.Message.Content != "" || len(oll.Message.ToolCalls) != 1 ||
		oll.Message.ToolCalls[0].Function.Name != "get_weather" || string(oll.Message.ToolCalls[0].Function.Arguments) != `{"city":"Oslo"}` {
		t.Fatalf("ollama message %+v", oll.Message)
	}
}
