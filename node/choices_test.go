package node

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/meshnode/meshnode/node/api"
)

// TestChoicesServe: on the built-in model, a request for several choices
// answers each as the request for it alone answers (the prompt of a
// batch; a seeded choice j with the seed plus j), each choice sealed on
// its own receipt, which replays when the replay names the choice.
func TestChoicesServe(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	type choice struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Energy json.RawMessage `json:"energy"`
	}
	alone := func(path, body string) string {
		text, _ := generate(t, n, path, body)
		return text
	}
	for _, tc := range []struct {
		name, path, body string
		alone            []string // each choice's request alone
	}{
		{"sampled chat, n=3", "/v1/chat/completions",
			`{"model":"` + fortunesModel + `","n":3,"seed":41,"temperature":0.9,"max_tokens":10,"messages":[{"role":"user","content":"Love is"}]}`,
			[]string{
				`{"model":"` + fortunesModel + `","seed":41,"temperature":0.9,"max_tokens":10,"messages":[{"role":"user","content":"Love is"}]}`,
				`{"model":"` + fortunesModel + `","seed":42,"temperature":0.9,"max_tokens":10,"messages":[{"role":"user","content":"Love is"}]}`,
				`{"model":"` + fortunesModel + `","seed":43,"temperature":0.9,"max_tokens":10,"messages":[{"role":"user","content":"Love is"}]}`,
			}},
		{"greedy batch of completions", "/v1/completions",
			`{"model":"` + fortunesModel + `","max_tokens":10,"prompt":["A man walks into a bar","Love is"]}`,
			[]string{
				`{"model":"` + fortunesModel + `","max_tokens":10,"prompt":"A man walks into a bar"}`,
				`{"model":"` + fortunesModel + `","max_tokens":10,"prompt":"Love is"}`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answer struct {
				Choices []choice `json:"choices"`
			}
			postJSON(t, n, tc.path, tc.body, &answer)
			if len(answer.Choices) != len(tc.alone) {
				t.Fatalf("%d choices, want %d", len(answer.Choices), len(tc.alone))
			}
			texts := map[string]bool{}
			for i, c := range answer.Choices {
				got := c.Text + c.Message.Content
				if want := alone(tc.path, tc.alone[i]); got != want {
					t.Errorf("choice %d: %q; its request alone: %q", i, got, want)
				}
				texts[got] = true
				_, res, raw := replayRaw(t, n, fmt.Sprintf(`{"request":%s,"energy":%s,"choice":%d}`, tc.body, c.Energy, i))
				if res.Verdict != api.VerdictVerified {
					t.Errorf("choice %d replay: %s", i, raw)
				}
			}
			if len(texts) < 2 {
				t.Errorf("the choices are all %q", answer.Choices[0].Text+answer.Choices[0].Message.Content)
			}
		})
	}
}
