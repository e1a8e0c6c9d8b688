package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// goldenNow is the clock gen-golden.py pins strftime_now to.
var goldenNow = time.Date(2026, 1, 15, 9, 30, 0, 0, time.UTC)

type conversation struct {
	Name     string            `json:"name"`
	BOS      string            `json:"bos_token"`
	EOS      string            `json:"eos_token"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []openAIMessage   `json:"messages"`
}

// openAIMessage is a chat message as an OpenAI request carries it.
type openAIMessage struct {
	Role       string  `json:"role"`
	Content    *string `json:"content"`
	ToolCallID string  `json:"tool_call_id"`
	Name       string  `json:"name"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// messages converts c's messages as node/api does: a null content is "".
func (c conversation) messages() []Message {
	out := make([]Message, len(c.Messages))
	for i, m := range c.Messages {
		out[i] = Message{Role: m.Role, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Content != nil {
			out[i].Content = *m.Content
		}
		for _, tc := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	return out
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGolden renders every template under testdata/templates (Llama 2,
// Llama 3 and 3.1, ChatML/Qwen2, Qwen2.5, Qwen3, Phi-3 and 3.5, Gemma,
// Gemma 2 and Gemma 4, Mistral, Command-R, DeepSeek-R1, Granite, Hermes, gpt-oss) over
// the conversations in testdata/conversations.json and compares with
// Python jinja2's output (testdata/gen-golden.py), errors included. The
// conversations with tools (calls, results, parallel calls, OpenAI-style
// ids) are rendered by every template that takes tools: Llama 3.1 and
// 3.2, Qwen2.5 and 3, Hermes 2 Pro, Mistral Nemo and Small 3.1, ...)
func TestGolden(t *testing.T) {
	var convs []conversation
	readJSON(t, "testdata/conversations.json", &convs)
	byName := map[string]conversation{}
	for _, c := range convs {
		byName[c.Name] = c
	}
	var golden struct {
		Cases []struct {
			Template            string  `json:"template"`
			Conversation        string  `json:"conversation"`
			AddGenerationPrompt bool    `json:"add_generation_prompt"`
			Output              *string `json:"output"`
			Error               *string `json:"error"`
		} `json:"cases"`
	}
	readJSON(t, "testdata/golden.json", &golden)
	if len(golden.Cases) == 0 {
		t.Fatal("no golden cases")
	}
	compiled := map[string]map[string]*Template{} // template → conversation → compiled
	pass := 0
	for _, c := range golden.Cases {
		conv, ok := byName[c.Conversation]
		if !ok {
			t.Fatalf("golden case names unknown conversation %q", c.Conversation)
		}
		if compiled[c.Template] == nil {
			compiled[c.Template] = map[string]*Template{}
		}
		tpl := compiled[c.Template][conv.Name]
		if tpl == nil {
			src, err := os.ReadFile(filepath.Join("testdata/templates", c.Template))
			if err != nil {
				t.Fatal(err)
			}
			tpl, err = Compile(string(src), Options{BOS: conv.BOS, EOS: conv.EOS, Now: func() time.Time { return goldenNow }})
			if err != nil {
				t.Fatalf("%s: %v", c.Template, err)
			}
			if tpl.Kind() != "jinja" {
				t.Fatalf("%s: rendered as %s, want jinja", c.Template, tpl.Kind())
			}
			compiled[c.Template][conv.Name] = tpl
		}
		if len(conv.Tools) > 0 && !tpl.TakesTools() {
			t.Fatalf("%s/%s: golden renders tools, but TakesTools is false", c.Template, c.Conversation)
		}
		got, err := tpl.Render(Input{Messages: conv.messages(), Tools: conv.Tools, AddGenerationPrompt: c.AddGenerationPrompt})
		switch {
		case c.Error != nil:
			var rej *RejectedError
			if !errors.As(err, &rej) || rej.Reason != *c.Error {
				t.Errorf("%s/%s/agp=%v: err = %v, want rejection %q", c.Template, c.Conversation, c.AddGenerationPrompt, err, *c.Error)
				continue
			}
		case err != nil:
			t.Errorf("%s/%s/agp=%v: %v", c.Template, c.Conversation, c.AddGenerationPrompt, err)
			continue
		case got != *c.Output:
			t.Errorf("%s/%s/agp=%v:\n got %q\nwant %q", c.Template, c.Conversation, c.AddGenerationPrompt, got, *c.Output)
			continue
		}
		pass++
	}
	t.Logf("%d/%d golden renders match jinja2 across %d templates", pass, len(golden.Cases), len(compiled))
}
