package toolcall

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat"
)

// TestHarmonyRender: gpt-oss's template, detected as Harmony, renders the
// tools itself (no polyfill) and a call turn and its result in harmony's
// form, which is what its replies' calls are parsed from (package harmony).
func TestHarmonyRender(t *testing.T) {
	src, err := os.ReadFile("../testdata/templates/gpt-oss.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := chat.Compile(string(src), chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if Detect(tpl) != Harmony {
		t.Fatalf("gpt-oss.jinja is %v", Detect(tpl))
	}
	tool := json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`)
	out, err := tpl.Render(chat.Input{Tools: []json.RawMessage{tool}, AddGenerationPrompt: true, Messages: []chat.Message{
		{Role: "user", Content: "Weather in Oslo?"},
		{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"temp": 3}`},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"namespace functions {", "type get_weather = ",
		`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>`,
		"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "<|start|>assistant") {
		t.Errorf("prompt does not end with the assistant's turn: %q", out[len(out)-40:])
	}
}
