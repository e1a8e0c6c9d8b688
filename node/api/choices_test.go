package api

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// choicesAnswer is a chat completion or completion of several choices.
type choicesAnswer struct {
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string         `json:"finish_reason"`
		Energy       map[string]any `json:"energy"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int            `json:"prompt_tokens"`
		CompletionTokens int            `json:"completion_tokens"`
		TotalTokens      int            `json:"total_tokens"`
		Energy           map[string]any `json:"energy"`
	} `json:"usage"`
}

// calls is what the fake model was asked for since call from.
func (f *fakeModel) callsSince(from int) []*Generation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[from:])
}

// TestChoices: n choices, and a batch of prompts, are served as one
// generation each — a seeded request's choice j with the seed plus j —
// and answered as choices in order, each with its own receipt; the
// usage counts each prompt once and every choice's output.
func TestChoices(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct {
		name, path, body string
		prompts          []string // the prompt of each choice, in order
		seeds            []uint64 // each choice's seed, when seeded
		promptTokens     int
	}{
		{"chat n=3 seeded", "/v1/chat/completions", `{"model":"tiny","n":3,"seed":7,"temperature":0.8,"messages":[{"role":"user","content":"x"}]}`,
			nil, []uint64{7, 8, 9}, 3},
		{"completions batch, n=2", "/v1/completions", `{"model":"tiny","n":2,"prompt":["a",[98,99]]}`,
			[]string{"a", "a", "", ""}, nil, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := len(h.model.callsSince(0))
			resp := h.post(t, tc.path, tc.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got choicesAnswer
			if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			calls := h.model.callsSince(from)
			n := max(len(tc.prompts), len(tc.seeds))
			if len(got.Choices) != n || len(calls) != n || got.Usage.Energy != nil ||
				got.Usage.PromptTokens != tc.promptTokens || got.Usage.CompletionTokens != 4*n || got.Usage.TotalTokens != tc.promptTokens+4*n {
				t.Fatalf("%d choices from %d calls, usage %+v", len(got.Choices), len(calls), got.Usage)
			}
			for i, c := range got.Choices {
				if c.Index != i || c.Text+c.Message.Content != "Hello, world!" || c.FinishReason != "stop" || c.Energy["energy_provenance"] != "Estimator" {
					t.Errorf("choice %d: %+v", i, c)
				}
			}
			// The fake records each generation as it is prepared, all
			// before any runs, in choice order.
			for i, g := range calls {
				if g.N > 1 || g.batch != nil {
					t.Errorf("choice %d was served as %d choices", i, max(g.N, len(g.batch)))
				}
				if tc.prompts != nil && g.Prompt != tc.prompts[i] {
					t.Errorf("choice %d prompt %q, want %q", i, g.Prompt, tc.prompts[i])
				}
				if tc.seeds != nil && (g.Seed == nil || *g.Seed != tc.seeds[i]) {
					t.Errorf("choice %d seed %v, want %d", i, g.Seed, tc.seeds[i])
				}
			}
			if tc.prompts != nil && !slices.Equal(calls[3].PromptIDs, []uint32{98, 99}) {
				t.Errorf("the second prompt's ids: %v", calls[3].PromptIDs)
			}
		})
	}
}

// TestChoicesStream: streamed, each chunk names its choice; each choice
// ends with its finish reason and its receipt; the usage chunk, then
// [DONE], come once, after every choice has ended.
func TestChoicesStream(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		// n of one prompt (counted once), or a batch of two.
		body, promptTokens := `{"model":"tiny","n":2,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, 3
		if path == "/v1/completions" {
			body, promptTokens = `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"prompt":["a","b"]}`, 6
		}
		resp := h.post(t, path, body)
		events := readSSE(t, resp.Body)
		resp.Body.Close()
		text := map[int]string{}
		finished := map[int]bool{}
		for i, e := range events {
			if e.data == "[DONE]" {
				if i != len(events)-1 {
					t.Fatalf("%s: [DONE] at %d of %d", path, i, len(events))
				}
				continue
			}
			var c struct {
				Choices []struct {
					Index int    `json:"index"`
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
					FinishReason *string        `json:"finish_reason"`
					Energy       map[string]any `json:"energy"`
				} `json:"choices"`
				Usage *struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(e.data), &c); err != nil {
				t.Fatal(err)
			}
			if c.Usage != nil {
				if i != len(events)-2 || len(c.Choices) != 0 || len(finished) != 2 || c.Usage.PromptTokens != promptTokens || c.Usage.CompletionTokens != 8 {
					t.Fatalf("%s: usage chunk %d of %d: %s", path, i, len(events), e.data)
				}
				continue
			}
			for _, ch := range c.Choices {
				if finished[ch.Index] {
					t.Fatalf("%s: choice %d goes on after its end: %s", path, ch.Index, e.data)
				}
				text[ch.Index] += ch.Text + ch.Delta.Content
				if ch.FinishReason != nil {
					if *ch.FinishReason != "stop" || ch.Energy["energy_provenance"] != "Estimator" {
						t.Fatalf("%s: end of choice %d: %s", path, ch.Index, e.data)
					}
					finished[ch.Index] = true
				}
			}
		}
		if len(text) != 2 || text[0] != "Hello, world!" || text[1] != "Hello, world!" || !finished[0] || !finished[1] {
			t.Fatalf("%s: texts %v, ended %v", path, text, finished)
		}
	}
}

// TestChoicesShareSlots: a request's choices run side by side on the
// model's slots, never holding more places in its queue than it has
// slots, so the rest wait their turn rather than fill the queue.
func TestChoicesShareSlots(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 2, QueueDepth: 2}, nil)
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 8)
	done := make(chan string, 1)
	go func() {
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","n":4,"messages":[{"role":"user","content":"x"}]}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-h.model.started
	<-h.model.started
	if q := h.srv.queued("tiny"); q != 2 {
		t.Fatalf("%d places taken, want the 2 slots'", q)
	}
	close(h.model.block)
	select {
	case got := <-done:
		var a choicesAnswer
		if !strings.HasPrefix(got, "200 ") || json.Unmarshal([]byte(got[4:]), &a) != nil || len(a.Choices) != 4 {
			t.Fatalf("answer %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the choices never finished")
	}
}

// TestChoicesFail: a choice that cannot be prepared refuses the request
// before any choice runs; one that fails while running fails the
// request, the others stopped.
func TestChoicesFail(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	h.model.prepare = func(g *Generation) error {
		if g.Prompt == "bad" {
			return badRequest("prompt", "a bad prompt")
		}
		return nil
	}
	resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":["good","bad"]}`)
	var e errResp
	decodeJSON(t, resp.Body, &e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Error.Message != "a bad prompt" {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
	h.model.prepare, h.model.midErr = nil, errBoom
	resp = h.post(t, "/v1/completions", `{"model":"tiny","prompt":["a","b"]}`)
	decodeJSON(t, resp.Body, &e)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(e.Error.Message, "boom") {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
}

// TestReplayChoice: a replay of an answer of several choices names the
// choice, whose generation is the one served (its prompt, its seed).
func TestReplayChoice(t *testing.T) {
	const energy = `"energy":{"receipt":{},"envelope_hex":"00"}`
	req := `"request":{"model":"tiny","n":2,"seed":5,"temperature":1,"prompt":["a","b"]}`
	rp, err := parseReplay([]byte(`{` + req + `,` + energy + `,"choice":3}`))
	if err != nil || rp.Generation.Prompt != "b" || *rp.Generation.Seed != 6 || rp.Generation.N > 1 {
		t.Fatalf("choice 3: %+v, %v", rp, err)
	}
	for _, tc := range []struct{ choice, want string }{
		{``, "answered with 4 choices"},
		{`,"choice":4`, "choice 4 is not one of the request's 4"},
		{`,"choice":-1`, "choice -1"},
	} {
		_, err := parseReplay([]byte(`{` + req + `,` + energy + tc.choice + `}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) || asError(err).Param != "choice" {
			t.Errorf("%q: %v", tc.choice, err)
		}
	}
	// One choice: choice 0 or none.
	for _, c := range []string{``, `,"choice":0`} {
		if _, err := parseReplay([]byte(`{"request":{"model":"tiny","prompt":"a"},` + energy + c + `}`)); err != nil {
			t.Errorf("%q: %v", c, err)
		}
	}
}
