package api

import (
	"encoding/json"
	"strings"
	"testing"
)

type wireItem struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

// checkItems holds items to the fake's pieces (fakeLogprobs).
func checkItems(t *testing.T, what string, items []wireItem, top int) {
	t.Helper()
	pieces := []string{"Hello", ",", " world", "!"}
	if len(items) != len(pieces) {
		t.Fatalf("%s: %d tokens, want %d", what, len(items), len(pieces))
	}
	for i, it := range items {
		want := fakeLogprobs(i, pieces[i], top)[0]
		if it.Token != pieces[i] || it.Logprob != want.Logprob || string(intsToBytes(it.Bytes)) != pieces[i] || len(it.TopLogprobs) != top {
			t.Fatalf("%s: token %d = %+v, want %q %v with %d alternatives", what, i, it, pieces[i], want.Logprob, top)
		}
		for j, a := range it.TopLogprobs {
			if a.Token != tokenText(want.Top[j].Bytes) || a.Logprob != want.Top[j].Logprob {
				t.Fatalf("%s: token %d alternative %d = %+v, want %+v", what, i, j, a, want.Top[j])
			}
		}
	}
}

func intsToBytes(v []int) []byte {
	b := make([]byte, len(v))
	for i, c := range v {
		b[i] = byte(c)
	}
	return b
}

// TestChatLogprobs: logprobs and top_logprobs reach the model; the answer
// carries choices[0].logprobs.content, one item per token, and a stream
// carries each chunk's own tokens; without logprobs, logprobs is null.
func TestChatLogprobs(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":3}`)
	var got struct {
		Choices []struct {
			Logprobs struct {
				Content []wireItem `json:"content"`
				Refusal any        `json:"refusal"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	if g := h.model.lastCall(); !g.Logprobs || g.TopLogprobs != 3 {
		t.Fatalf("the model got logprobs %v, top %d", g.Logprobs, g.TopLogprobs)
	}
	checkItems(t, "chat", got.Choices[0].Logprobs.Content, 3)

	resp = h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	var raw map[string]any
	decodeJSON(t, resp.Body, &raw)
	resp.Body.Close()
	if lp, ok := raw["choices"].([]any)[0].(map[string]any)["logprobs"]; !ok || lp != nil {
		t.Fatalf("logprobs not asked for: %v, want null", lp)
	}

	resp = h.post(t, "/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":2}`)
	defer resp.Body.Close()
	var items []wireItem
	for _, e := range readSSE(t, resp.Body) {
		if e.data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []wireItem `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" && (ch.Logprobs == nil || len(ch.Logprobs.Content) != 1 || ch.Logprobs.Content[0].Token != ch.Delta.Content) {
				t.Fatalf("chunk %s does not carry its token's logprobs", e.data)
			}
			if ch.Logprobs != nil {
				items = append(items, ch.Logprobs.Content...)
			}
		}
	}
	checkItems(t, "streamed chat", items, 2)
}

// TestCompletionsLogprobs: the legacy integer logprobs gives parallel
// lists, the alternatives as an object in likelihood order holding the
// sampled token, and text_offset in characters from the prompt's start.
func TestCompletionsLogprobs(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"é?","logprobs":2}`)
	defer resp.Body.Close()
	var got struct {
		Choices []struct {
			Logprobs struct {
				Tokens        []string          `json:"tokens"`
				TokenLogprobs []float64         `json:"token_logprobs"`
				TopLogprobs   []json.RawMessage `json:"top_logprobs"`
				TextOffset    []int             `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	decodeJSON(t, resp.Body, &got)
	l := got.Choices[0].Logprobs
	if strings.Join(l.Tokens, "|") != "Hello|,| world|!" {
		t.Fatalf("tokens %q", l.Tokens)
	}
	wantOffsets := []int{2, 7, 8, 14} // "é?" is 2 characters
	for i := range wantOffsets {
		if l.TextOffset[i] != wantOffsets[i] || l.TokenLogprobs[i] != -float64(i+1)/2 {
			t.Fatalf("token %d: offset %d, logprob %v", i, l.TextOffset[i], l.TokenLogprobs[i])
		}
	}
	// Alternatives: the token itself, then "c" (bytes 'a'+2 is the second).
	if string(l.TopLogprobs[0]) != `{"Hello":-0.5,"b":-1.5}` {
		t.Fatalf("top_logprobs[0] = %s", l.TopLogprobs[0])
	}
}

// TestLegacyOffsetsSplitCharacter: a character split across tokens is
// counted at the token that ends it; the tokens' text shows the bytes.
func TestLegacyOffsetsSplitCharacter(t *testing.T) {
	e := []byte("é") // 2 bytes
	toks := []TokenLogprob{{Bytes: []byte("a")}, {Bytes: e[:1]}, {Bytes: e[1:]}, {Bytes: []byte("b")}}
	l, end, carry := legacyOf(toks, 0, 10, nil)
	if want := []int{10, 11, 11, 12}; len(l.TextOffset) != 4 || l.TextOffset[0] != want[0] || l.TextOffset[1] != want[1] || l.TextOffset[2] != want[2] || l.TextOffset[3] != want[3] {
		t.Fatalf("offsets %v, want %v", l.TextOffset, want)
	}
	if end != 13 || len(carry) != 0 {
		t.Fatalf("end %d, carry %q", end, carry)
	}
	if l.Tokens[1] != `bytes:\xc3` || l.Tokens[2] != `bytes:\xa9` {
		t.Fatalf("split tokens shown as %q, %q", l.Tokens[1], l.Tokens[2])
	}
}

// TestLegacyUnscored: an echoed prompt's first token, which nothing
// precedes, shows null for its log-probability and alternatives, and
// still counts in the offsets.
func TestLegacyUnscored(t *testing.T) {
	toks := []TokenLogprob{{Bytes: []byte("Once"), Unscored: true}, {Bytes: []byte(" upon"), Logprob: -2, Top: []TopLogprob{{Bytes: []byte(" a"), Logprob: -1}}}}
	l, end, _ := legacyOf(toks, 1, 0, nil)
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"tokens":["Once"," upon"],"token_logprobs":[null,-2],"top_logprobs":[null,{" a":-1," upon":-2}],"text_offset":[0,4]}`
	if string(b) != want || end != 9 {
		t.Fatalf("%s, end %d\nwant %s, end 9", b, end, want)
	}
}

// TestResponsesLogprobs: include's message.output_text.logprobs and
// top_logprobs put the tokens on the output_text part, and a stream's
// text deltas carry their own.
func TestResponsesLogprobs(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	body := `{"model":"tiny","input":"hi","include":["message.output_text.logprobs"],"top_logprobs":1}`
	resp := h.post(t, "/v1/responses", body)
	var got struct {
		Output []struct {
			Content []struct {
				Text     string     `json:"text"`
				Logprobs []wireItem `json:"logprobs"`
			} `json:"content"`
		} `json:"output"`
	}
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	checkItems(t, "responses", got.Output[0].Content[0].Logprobs, 1)

	resp = h.post(t, "/v1/responses", strings.Replace(body, `"input"`, `"stream":true,"input"`, 1))
	defer resp.Body.Close()
	var items []wireItem
	var done []wireItem
	for _, e := range readSSE(t, resp.Body) {
		var ev struct {
			Type     string     `json:"type"`
			Logprobs []wireItem `json:"logprobs"`
		}
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "response.output_text.delta":
			items = append(items, ev.Logprobs...)
		case "response.output_text.done":
			done = ev.Logprobs
		}
	}
	checkItems(t, "streamed responses", items, 1)
	checkItems(t, "response.output_text.done", done, 1)
}
