package chat

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/think"
)

// TestThinkingSwitch: a template that reads enable_thinking is given it
// (Qwen3's writes an empty block when it is false; DeepSeek V3.1's opens
// the block when it is true), and whether the rendered prompt leaves the
// block open follows; a template without the switch refuses it rather
// than ignore it.
func TestThinkingSwitch(t *testing.T) {
	on, off := true, false
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, c := range []struct {
		file       string
		thinking   *bool
		switchable bool
		tail       string // the rendered prompt's end
		opens      bool
	}{
		{"Qwen-Qwen3-0.6B.jinja", nil, true, "<|im_start|>assistant\n", false},
		{"Qwen-Qwen3-0.6B.jinja", &on, true, "<|im_start|>assistant\n", false},
		{"Qwen-Qwen3-0.6B.jinja", &off, true, "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{"deepseek-ai-DeepSeek-V3.1.jinja", &on, true, "<｜Assistant｜><think>", true},
		{"deepseek-ai-DeepSeek-V3.1.jinja", nil, true, "<｜Assistant｜><think></think>", false},
		{"Qwen-QwQ-32B.jinja", &on, true, "<|im_start|>assistant\n<think>\n", true},
		{"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", nil, false, "<｜Assistant｜><think>\n", true},
		{"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", &off, false, "", false},
	} {
		src, err := os.ReadFile("testdata/templates/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := Compile(string(src), Options{BOS: "<s>", EOS: "</s>"})
		if err != nil {
			t.Fatal(err)
		}
		if tpl.TakesThinkingSwitch() != c.switchable {
			t.Errorf("%s: switchable %v", c.file, !c.switchable)
		}
		out, err := tpl.Render(Input{Messages: msgs, AddGenerationPrompt: true, Thinking: c.thinking})
		if !c.switchable && c.thinking != nil {
			if !errors.Is(err, ErrNoThinkingSwitch) {
				t.Errorf("%s: a switch to a template without one: %v", c.file, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		tags, ok := think.Detect(string(src))
		if !ok || !strings.HasSuffix(out, c.tail) || tags.Opens(out) != c.opens {
			t.Errorf("%s with %v: %v, opens %v, ends %q", c.file, c.thinking, ok, tags.Opens(out), out[max(0, len(out)-40):])
		}
	}
}

// TestReasoningGivenBack: an assistant's reasoning given back reaches the
// template as reasoning_content and thinking, which Qwen3's renders as a
// <think> block for the turns of a tool loop (after the last user
// message) and gpt-oss's as the analysis channel before a call.
func TestReasoningGivenBack(t *testing.T) {
	loop := []Message{
		{Role: "user", Content: "Weather in Oslo?"},
		{Role: "assistant", Reasoning: "I need the weather tool.", ToolCalls: []ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		{Role: "tool", ToolCallID: "c1", Name: "get_weather", Content: "sunny"},
	}
	for file, want := range map[string]string{
		"Qwen-Qwen3-0.6B.jinja": "<|im_start|>assistant\n<think>\nI need the weather tool.\n</think>\n\n<tool_call>",
		"gpt-oss.jinja":         "<|channel|>analysis<|message|>I need the weather tool.<|end|>",
	} {
		src, err := os.ReadFile("testdata/templates/" + file)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := Compile(string(src), Options{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := tpl.Render(Input{Messages: loop, AddGenerationPrompt: true})
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("%s: %v\n%s", file, err, out)
		}
		// Without it the block is not there.
		bare := append([]Message(nil), loop...)
		bare[1].Reasoning = ""
		if out, _ := tpl.Render(Input{Messages: bare, AddGenerationPrompt: true}); strings.Contains(out, "I need the weather tool.") {
			t.Errorf("%s: reasoning rendered that was not given", file)
		}
	}
}
