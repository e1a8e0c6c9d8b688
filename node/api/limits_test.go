package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAttackHugePromptWaitsBehindSlot: with one generation slot held by a
// running generation, a request whose prompt cannot fit the model's
// context is answered 400 context_length_exceeded at once: it is prepared
// (tokenized and checked) while it holds a place in the queue, not after
// it has waited for the slot, and so delays nothing. (Before the fix the
// prompt was tokenized inside the slot, so it queued behind the running
// generation, and its tokenizing then held the slot from the next.)
func TestAttackHugePromptWaitsBehindSlot(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 1}, nil)
	const contextBytes = 1 << 20
	h.model.prepare = func(g *Generation) error {
		n := 0
		for _, m := range g.Messages {
			n += len(m.Content)
		}
		if n > contextBytes {
			e := Errorf(http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "the prompt is over %d bytes", contextBytes)
			e.Param = "messages"
			return e
		}
		return nil
	}
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 1)
	release := sync.OnceFunc(func() { close(h.model.block) })
	t.Cleanup(release) // a failure below must not leave the generation holding the server
	running := make(chan int, 1)
	go func() {
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		running <- resp.StatusCode
	}()
	<-h.model.started // the slot is held until block is closed

	huge, _ := json.Marshal(map[string]any{"model": "tiny",
		"messages": []map[string]string{{"role": "user", "content": strings.Repeat("ha", 3<<19)}}})
	// The deadline only keeps a regression from hanging the test: the
	// slot is not given back before the answer is read.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/chat/completions", strings.NewReader(string(huge)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the huge prompt was not answered while the slot was held: %v", err)
	}
	var got struct {
		Error Error `json:"error"`
	}
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || got.Error.Code != "context_length_exceeded" {
		t.Fatalf("huge prompt: %d %+v, want 400 context_length_exceeded", resp.StatusCode, got.Error)
	}
	select {
	case code := <-running:
		t.Fatalf("the running generation ended (%d) before the huge prompt was answered", code)
	default:
	}
	if n := h.srv.queued("tiny"); n != 1 {
		t.Fatalf("%d generations hold places after the refusal, want the running one", n)
	}
	release()
	if code := <-running; code != http.StatusOK {
		t.Fatalf("the running generation: %d", code)
	}
}

// TestPrepareConcurrency: preparations beyond PrepareConcurrency wait for
// one to finish, over every model, and a request that gives up while it
// waits prepares nothing.
func TestPrepareConcurrency(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 4, PrepareConcurrency: 1}, nil)
	entered, leave := make(chan struct{}, 2), make(chan struct{})
	release := sync.OnceFunc(func() { close(leave) })
	t.Cleanup(release)
	h.model.prepare = func(g *Generation) error {
		entered <- struct{}{}
		<-leave
		return nil
	}
	done := make(chan int, 1)
	go func() {
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered // one preparation runs and holds the only place

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"again"}]}`))
	req.Header.Set("Content-Type", "application/json")
	gaveUp := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	waitFor(t, "the second request to hold its place, waiting to prepare", func() bool { return h.srv.queued("tiny") == 2 })
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a cancelled request got an answer")
	}
	waitFor(t, "the server to see the second request leave and give back its place", func() bool { return h.srv.queued("tiny") == 1 })
	release()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the first request: %d", code)
	}
	h.model.mu.Lock()
	calls := len(h.model.calls)
	h.model.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d preparations ran, want 1: the second request gave up while it waited", calls)
	}
}

// TestJouleCeilingFinish: a generation the steward stopped at its joule
// ceiling answers normally, saying so: finish_reason "joule_ceiling" on
// chat and completions, streamed or not; status "incomplete" with
// incomplete_details.reason "joule_ceiling" on responses, and the
// response.incomplete event when streamed.
func TestJouleCeilingFinish(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	h.model.finish = FinishJouleCeiling

	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
		if path == "/v1/completions" {
			body = `{"model":"tiny","prompt":"hi"}`
		}
		resp := h.post(t, path, body)
		var got struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		decodeJSON(t, resp.Body, &got)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(got.Choices) != 1 || got.Choices[0].FinishReason != "joule_ceiling" || got.Usage == nil || got.Usage.Energy == nil {
			t.Fatalf("%s: %d %+v, want 200 with finish_reason joule_ceiling and the usage", path, resp.StatusCode, got)
		}

		resp = h.post(t, path, strings.TrimSuffix(body, "}")+`,"stream":true}`)
		events := readSSE(t, resp.Body)
		resp.Body.Close()
		finishes := 0
		for _, e := range events[:len(events)-1] {
			var c struct {
				Choices []struct {
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(e.data), &c); err != nil {
				t.Fatal(err)
			}
			if len(c.Choices) == 1 && c.Choices[0].FinishReason != nil {
				if *c.Choices[0].FinishReason != "joule_ceiling" {
					t.Fatalf("%s stream: finish_reason %q", path, *c.Choices[0].FinishReason)
				}
				finishes++
			}
		}
		if finishes != 1 || events[len(events)-1].data != "[DONE]" {
			t.Fatalf("%s stream: %d finish chunks, last event %q", path, finishes, events[len(events)-1].data)
		}
	}

	resp := h.post(t, "/v1/responses", `{"model":"tiny","input":"hi"}`)
	var got responseJSON
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	if got.Status != "incomplete" || got.IncompleteDetails["reason"] != "joule_ceiling" || got.Output[0].Content[0].Text != "Hello, world!" {
		t.Fatalf("response = %+v, want incomplete for joule_ceiling with the text so far", got)
	}
	resp = h.post(t, "/v1/responses", `{"model":"tiny","input":"hi","stream":true}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	last := events[len(events)-1]
	var final struct {
		Response responseObject `json:"response"`
	}
	if err := json.Unmarshal([]byte(last.data), &final); err != nil || last.name != "response.incomplete" ||
		final.Response.IncompleteDetails["reason"] != "joule_ceiling" {
		t.Fatalf("last event %s %s, want response.incomplete for joule_ceiling", last.name, last.data)
	}
}

// waitFor polls cond until it holds; the deadline only keeps a regression
// from hanging the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// slotModel is the fake model with slots (api.SlotModel).
type slotModel struct {
	*fakeModel
	slots int
}

func (m slotModel) Slots() int { return m.slots }

// TestConcurrencyIsTheModelsSlots: with api.concurrency unset, a model's
// generations run as many at once as it has slots; the next one waits in
// the queue (512 deep by default) rather than being refused.
func TestConcurrencyIsTheModelsSlots(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	if h.srv.cfg.QueueDepth != DefaultQueueDepth || h.srv.cfg.QueueWait != DefaultQueueWait {
		t.Fatalf("queue defaults %d, %v", h.srv.cfg.QueueDepth, h.srv.cfg.QueueWait)
	}
	h.reg.local["tiny"] = slotModel{fakeModel: h.model, slots: 3}
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 8)
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	results := make(chan int, 4)
	for range 4 {
		go func() {
			resp := h.post(t, "/v1/chat/completions", body)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	for range 3 {
		<-h.model.started // three run at once
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.queued("tiny") < 4 {
		if time.Now().After(deadline) {
			t.Fatal("the fourth request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-h.model.started:
		t.Fatal("a fourth generation ran beside the model's three slots")
	case <-time.After(50 * time.Millisecond):
	}
	close(h.model.block)
	for range 4 {
		if code := <-results; code != 200 {
			t.Fatalf("a request got %d", code)
		}
	}
}

// TestQueueWaitIsBounded: a request that has waited api.queue_wait for a
// slot is answered 429 with Retry-After, and gives its place back.
func TestQueueWaitIsBounded(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 1, QueueWait: time.Minute, RetryAfter: 3 * time.Second}, nil)
	expire := make(chan time.Time)
	h.srv.after = func(d time.Duration) <-chan time.Time {
		if d != time.Minute {
			t.Errorf("queue wait %v, want the configured minute", d)
		}
		return expire
	}
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 2)
	body := `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`
	running := make(chan int, 1)
	go func() {
		resp := h.post(t, "/v1/chat/completions", body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		running <- resp.StatusCode
	}()
	<-h.model.started
	waited := make(chan *http.Response, 1)
	go func() { waited <- h.post(t, "/v1/chat/completions", body) }()
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.queued("tiny") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(expire) // its minute is up
	resp := <-waited
	var got struct {
		Error Error `json:"error"`
	}
	decodeJSON(t, resp.Body, &got)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" || got.Error.Code != "overloaded" ||
		!strings.Contains(got.Error.Message, "no generation slot came free") {
		t.Fatalf("after its wait: %d, Retry-After %q, %+v", resp.StatusCode, resp.Header.Get("Retry-After"), got.Error)
	}
	if n := h.srv.queued("tiny"); n != 1 {
		t.Fatalf("%d places held after the refusal, want the running one", n)
	}
	close(h.model.block)
	if code := <-running; code != 200 {
		t.Fatalf("the running generation: %d", code)
	}
}
