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
	var reasoning, content strings.Builder
	var order []string
	for _, e := range events {
		if e.data == "[DONE]" {
			continue
		}
		if strings.Contains(e.data, "<|") {
			t.Fatalf("a marker reached the stream: %s", e.data)
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
		for _, c := range ch.Choices {
			if r := c.Delta.ReasoningContent; r != nil {
				reasoning.WriteString(*r)
				order = append(order, "r")
			}
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				content.WriteString(*c.Delta.Content)
				order = append(order, "c")
			}
		}
	}
	if reasoning.String() != "The user greets me." || content.String() != "Hello there!" {
		t.Fatalf("reasoning %q, content %q", reasoning.String(), content.String())
	}
	if got := strings.Join(order, ""); got != "rrccc" {
		t.Errorf("deltas %q, want the reasoning's two pieces then the content's three", got)
	}
}

// TestHarmonyRefusals: what a harmony reply cannot give is refused by
// name: logprobs (not split between channels), a forced tool_choice (no
// grammar for harmony calls) and the Responses API (no reasoning items
// yet).
func TestHarmonyRefusals(t *testing.T) {
	h := harmonyHarness(t)
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"oss","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`, "logprobs"},
		{"/v1/chat/completions", `{"model":"oss","tool_choice":"required",` + weatherTools + `,"messages":[{"role":"user","content":"hi"}]}`, "tool_choice"},
		{"/v1/responses", `{"model":"oss","input":"hi"}`, "model"},
	} {
		resp := h.post(t, tc.path, tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 400 || e.Error.Param != tc.param {
			t.Errorf("%s %s: %d %s, want 400 naming %s", tc.path, tc.body, resp.StatusCode, b, tc.param)
		}
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
