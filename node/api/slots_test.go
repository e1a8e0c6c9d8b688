package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// getSlots reads GET path (/slots and its query) and its status.
func (h *harness) getSlots(t *testing.T, path string) ([]llamaSlot, int, map[string]any) {
	t.Helper()
	resp, err := http.Get(h.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e map[string]any
		json.Unmarshal(body, &e)
		return nil, resp.StatusCode, e
	}
	var slots []llamaSlot
	if err := json.Unmarshal(body, &slots); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
	// The names llama-server's clients read are on the wire as such.
	for _, key := range []string{`"id_task"`, `"n_ctx"`, `"is_processing"`, `"next_token":[{"has_next_token"`, `"n_decoded"`, `"n_remain"`} {
		if !strings.Contains(string(body), key) {
			t.Fatalf("GET %s: no %s in %s", path, key, body)
		}
	}
	return slots, resp.StatusCode, nil
}

// TestSlots: GET /slots shows each of the model's slots idle until a
// generation takes it, then that generation's task, parameters and
// progress (tokens decoded, a newline seen, tokens left) while it runs,
// and idle again once it ends; fail_on_no_slot is 503 only while every
// slot is taken; a model not served here, slot actions and POST /props
// are refused.
func TestSlots(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 2}, nil)
	idle := func(sl llamaSlot, id int) bool {
		return sl.ID == id && sl.IDTask == -1 && !sl.IsProcessing && sl.Params == nil &&
			len(sl.NextToken) == 1 && sl.NextToken[0] == slotNext{NRemain: -1}
	}
	slots, _, _ := h.getSlots(t, "/slots")
	if len(slots) != 2 || !idle(slots[0], 0) || !idle(slots[1], 1) {
		t.Fatalf("before any request: %+v, want two idle slots", slots)
	}

	h.model.pieces = []string{"a", "b\n", "c", "d", "e"}
	h.model.pauseAt = 2
	h.model.pause, h.model.paused = make(chan struct{}), make(chan struct{}, 2)
	var resume sync.Once
	t.Cleanup(func() { resume.Do(func() { close(h.model.pause) }) }) // a failed check lets the generations end
	done := make(chan int, 2)
	send := func(path, body string) {
		resp := h.post(t, path, body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}
	go send("/completion", `{"prompt":"hi","n_predict":10,"temperature":0.5,"seed":7,"stream":true,"speculative.n_min":2}`)
	<-h.model.paused
	slots, _, _ = h.getSlots(t, "/slots")
	s0 := slots[0]
	if !s0.IsProcessing || s0.IDTask != 0 || s0.Params == nil || !idle(slots[1], 1) {
		t.Fatalf("one generation running: %+v", slots)
	}
	if p := s0.Params; p.NPredict != 10 || p.Temperature != 0.5 || p.Seed == nil || *p.Seed != 7 || !p.Stream {
		t.Fatalf("slot 0's params %+v, want the request's n_predict, temperature, seed and stream", *p)
	}
	if p := s0.Params; p.SpecNMin == nil || *p.SpecNMin != 2 || p.SpecNMax != nil || p.SpecPMin != nil {
		t.Errorf("slot 0's speculative bounds n_max %v, n_min %v, p_min %v: want only the n_min 2 the request set", p.SpecNMax, p.SpecNMin, p.SpecPMin)
	}
	if n := s0.NextToken[0]; n != (slotNext{HasNextToken: true, HasNewLine: true, NRemain: 8, NDecoded: 2}) {
		t.Fatalf("slot 0's progress %+v, want 2 decoded (one holding a newline) and 8 left", n)
	}
	if _, status, _ := h.getSlots(t, "/slots?fail_on_no_slot=1"); status != http.StatusOK {
		t.Fatalf("fail_on_no_slot with a slot idle: %d", status)
	}

	go send("/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":"a b"}}`)
	<-h.model.paused
	slots, _, _ = h.getSlots(t, "/slots?model=tiny")
	if slots[0].Speculative {
		t.Errorf("slot 0 speculating on a model without a draft: %+v", slots[0])
	}
	if s1 := slots[1]; !s1.IsProcessing || s1.IDTask != 1 || s1.Params == nil || s1.Params.Stream || !s1.Speculative ||
		s1.NextToken[0] != (slotNext{HasNextToken: true, HasNewLine: true, NRemain: -1, NDecoded: 2}) {
		t.Fatalf("slot 1 running an unbounded chat given a prediction: %+v (params %+v)", s1, s1.Params)
	}
	_, status, e := h.getSlots(t, "/slots?fail_on_no_slot")
	if status != http.StatusServiceUnavailable || e["error"].(map[string]any)["code"] != "no_slot_available" {
		t.Fatalf("fail_on_no_slot with every slot taken: %d %v", status, e)
	}

	resume.Do(func() { close(h.model.pause) })
	for range 2 {
		if s := <-done; s != http.StatusOK {
			t.Fatalf("a generation ended with %d", s)
		}
	}
	slots, _, _ = h.getSlots(t, "/slots")
	if len(slots) != 2 || !idle(slots[0], 0) || !idle(slots[1], 1) {
		t.Fatalf("after both ended: %+v, want two idle slots", slots)
	}

	if _, status, e := h.getSlots(t, "/slots?model=nope"); status != http.StatusNotFound || e["error"].(map[string]any)["code"] != "model_not_found" {
		t.Fatalf("a model not served here: %d %v", status, e)
	}
	for _, path := range []string{"/slots/0?action=save", "/slots/1?action=erase", "/props"} {
		resp := h.post(t, path, `{"filename":"x.bin"}`)
		var e errorBody
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented || e.Error.Code != "not_supported" {
			t.Errorf("POST %s: %d %+v, want 501 not_supported", path, resp.StatusCode, e.Error)
		}
	}
}
