package chat

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestReasoningEffort: gpt-oss's template writes the reasoning effort it
// is given into its system message ("medium" when given none, as
// transformers renders it); a template that reads none refuses one
// rather than ignore it.
func TestReasoningEffort(t *testing.T) {
	compile := func(name string) *Template {
		src, err := os.ReadFile("testdata/templates/" + name)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := Compile(string(src), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return tpl
	}
	oss := compile("gpt-oss.jinja")
	msgs := []Message{{Role: "user", Content: "hi"}}
	for effort, want := range map[string]string{"": "Reasoning: medium\n", "low": "Reasoning: low\n", "high": "Reasoning: high\n"} {
		out, err := oss.Render(Input{Messages: msgs, AddGenerationPrompt: true, ReasoningEffort: effort})
		if err != nil || !strings.Contains(out, want) || strings.Count(out, "Reasoning:") != 1 {
			t.Errorf("effort %q: %v\n%s", effort, err, out)
		}
	}
	if !oss.TakesReasoningEffort() {
		t.Error("gpt-oss's template takes no reasoning effort")
	}
	other := compile("Qwen-Qwen2.5-7B-Instruct.jinja")
	if _, err := other.Render(Input{Messages: msgs, ReasoningEffort: "low"}); !errors.Is(err, ErrNoReasoningEffort) || other.TakesReasoningEffort() {
		t.Errorf("a template without a reasoning effort: %v", err)
	}
}
