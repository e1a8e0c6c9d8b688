package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStreamExtras: llama-server's return_progress and timings_per_token,
// as its web UI sends them: a chat stream opens with chunks of the
// prompt's progress (the assistant role's delta and prompt_progress:
// total, cache, processed, time_ms), then every chunk carries the timings
// so far, the last counting every token; /v1/completions' and
// /completion's streams the same in their shapes. Unasked, neither
// appears.
func TestStreamExtras(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	type chunk struct {
		Choices []struct {
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			Text         *string `json:"text"` // /v1/completions'
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Content        *string            `json:"content"` // /completion's
		Stop           bool               `json:"stop"`
		Timings        *llamaTimings      `json:"timings"`
		PromptProgress *promptProgressOut `json:"prompt_progress"`
	}
	events := func(path, body string) []chunk {
		t.Helper()
		resp := h.post(t, path, body)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", path, body, resp.StatusCode)
		}
		var out []chunk
		for _, e := range readSSE(t, resp.Body) {
			if e.data == "[DONE]" {
				continue
			}
			var c chunk
			if err := json.Unmarshal([]byte(e.data), &c); err != nil {
				t.Fatalf("%s: event %q: %v", path, e.data, err)
			}
			out = append(out, c)
		}
		return out
	}
	const chat = `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"hi"}]`
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/completion"} {
		body := chat + `,"return_progress":true,"timings_per_token":true}`
		switch path {
		case "/v1/completions":
			body = `{"model":"tiny","prompt":"hi","stream":true,"return_progress":true,"timings_per_token":true}`
		case "/completion":
			body = `{"prompt":"hi","stream":true,"return_progress":true,"timings_per_token":true}`
		}
		cs := events(path, body)
		if len(cs) < 4 {
			t.Fatalf("%s: %d events", path, len(cs))
		}
		for i, want := range []promptProgressOut{{Total: 3, Cache: 1, Processed: 2}, {Total: 3, Cache: 1, Processed: 3}} {
			p := cs[i].PromptProgress
			if p == nil || p.Total != want.Total || p.Cache != want.Cache || p.Processed != want.Processed || p.TimeMS < 0 {
				t.Fatalf("%s: event %d's prompt_progress %+v, want %+v", path, i, p, want)
			}
			if path == "/v1/chat/completions" && (len(cs[i].Choices) != 1 || cs[i].Choices[0].Delta.Role != "assistant" || cs[i].Choices[0].Delta.Content != nil) {
				t.Errorf("%s: the progress chunk %+v is not the role's delta", path, cs[i])
			}
		}
		var text strings.Builder
		for i, c := range cs[2:] {
			if c.PromptProgress != nil || c.Timings == nil || c.Timings.PromptN != 3 {
				t.Fatalf("%s: event %d after the progress: %+v, timings %+v", path, i+2, c, c.Timings)
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					text.WriteString(*ch.Delta.Content)
				}
				if ch.Text != nil {
					text.WriteString(*ch.Text)
				}
			}
			if c.Content != nil {
				text.WriteString(*c.Content)
			}
		}
		if last := cs[len(cs)-1]; text.String() != "Hello, world!" || last.Timings.PredictedN != 4 {
			t.Errorf("%s: text %q, last event's timings %+v (want 4 predicted)", path, text.String(), last.Timings)
		}
	}
	for _, c := range events("/v1/chat/completions", chat+`}`) {
		if c.PromptProgress != nil || c.Timings != nil {
			t.Fatalf("unasked: %+v", c)
		}
	}
	// Several choices, each a serve of its own: each reports its own
	// prompt's progress, under its index.
	type indexed struct {
		Choices []struct {
			Index int `json:"index"`
		} `json:"choices"`
		PromptProgress *promptProgressOut `json:"prompt_progress"`
	}
	resp := h.post(t, "/v1/chat/completions", chat+`,"n":2,"temperature":0.7,"seed":5,"return_progress":true}`)
	defer resp.Body.Close()
	progress := map[int]int{}
	for _, e := range readSSE(t, resp.Body) {
		var c indexed
		if e.data == "[DONE]" || json.Unmarshal([]byte(e.data), &c) != nil || c.PromptProgress == nil || len(c.Choices) != 1 {
			continue
		}
		progress[c.Choices[0].Index]++
	}
	if progress[0] != 2 || progress[1] != 2 {
		t.Errorf("n 2: progress chunks by choice %v, want 2 each", progress)
	}
}
