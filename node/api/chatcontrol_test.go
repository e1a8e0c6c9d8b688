package api

import "testing"

// TestChatContinuation: continue_final_message (with
// add_generation_prompt false) makes the final assistant message the
// prefill the reply continues; what cannot be continued is refused.
func TestChatContinuation(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"Tell me"},{"role":"assistant","content":"Once upon"}]`
	g, _, err := parseChat([]byte(`{"model":"tiny",` + msgs + `,"continue_final_message":true,"add_generation_prompt":false}`))
	if err != nil || g.Prefill != "Once upon" || !g.Continued || len(g.Messages) != 1 || g.Messages[0].Role != "user" {
		t.Fatalf("continued: %+v, %v", g, err)
	}
	if g, _, err := parseChat([]byte(`{"model":"tiny",` + msgs + `,"continue_final_message":true}`)); err != nil || g.Prefill != "Once upon" {
		t.Fatalf("continue_final_message alone: %v", err)
	}
	if g, _, err := parseChat([]byte(`{"model":"tiny",` + msgs + `,"add_generation_prompt":true,"reasoning_control":true}`)); err != nil || g.Prefill != "" || len(g.Messages) != 2 {
		t.Fatalf("a final assistant message not continued: %+v, %v", g, err)
	}
	for body, param := range map[string]string{
		`{"model":"tiny",` + msgs + `,"add_generation_prompt":false}`:                                                                                          "add_generation_prompt",
		`{"model":"tiny",` + msgs + `,"continue_final_message":true,"add_generation_prompt":true}`:                                                             "add_generation_prompt",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"continue_final_message":true}`:                                                            "continue_final_message",
		`{"model":"tiny","messages":[{"role":"assistant","content":"x"}],"continue_final_message":true}`:                                                       "messages",
		`{"model":"tiny","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y","reasoning_content":"z"}],"continue_final_message":true}`: "continue_final_message",
	} {
		_, _, err := parseChat([]byte(body))
		if e := asError(err); err == nil || e.Param != param {
			t.Errorf("%s: %v, want a 400 naming %s", body, err, param)
		}
	}
}

// TestChatControl: the control of a running chat completion is checked,
// then refused 501 (a node cannot end an answer's reasoning mid-answer).
func TestChatControl(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for body, want := range map[string]int{
		`{"id":"chatcmpl-1","action":"reasoning_end"}`:       501,
		`{"id":"chatcmpl-1","action":"stop"}`:                400,
		`{"action":"reasoning_end"}`:                         400,
		`{"id":"chatcmpl-1","action":"reasoning_end","x":1}`: 400,
		`[`: 400,
	} {
		resp := h.post(t, "/v1/chat/completions/control", body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", body, resp.StatusCode, want)
		}
	}
}

// FuzzParseChatControl: any body is read or refused with a 400 naming
// what is wrong, never a panic; a body read names the action.
func FuzzParseChatControl(f *testing.F) {
	for _, b := range []string{`{"id":"chatcmpl-1","action":"reasoning_end"}`, `{"id":"","action":"x"}`, `{}`, `[`, `{"id":1}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseChatControl(body)
		if err != nil {
			if e := asError(err); e.Status != 400 {
				t.Fatalf("%q: %v (status %d), want a 400", body, err, e.Status)
			}
			return
		}
		if c.ID == "" || c.Action != "reasoning_end" {
			t.Fatalf("%q read as %+v", body, c)
		}
	})
}
