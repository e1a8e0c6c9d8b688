package api

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestQueues: while one generation holds the model's only slot and a
// second waits behind it, Queues says so; once both ended, neither.
func TestQueues(t *testing.T) {
	h := newHarness(t, Config{Concurrency: 1}, nil)
	if q := h.srv.Queues(); len(q) != 0 {
		t.Fatalf("Queues() = %+v before any request", q)
	}
	h.model.block = make(chan struct{})
	h.model.started = make(chan struct{}, 2)
	done := make(chan int, 2)
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, h.http.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}
	go send()
	<-h.model.started // the slot is held
	go send()
	deadline := time.Now().Add(10 * time.Second)
	for q := h.srv.Queues(); len(q) != 1 || q[0] != (QueueState{Model: "tiny", Running: 1, Waiting: 1}); q = h.srv.Queues() {
		if time.Now().After(deadline) {
			t.Fatalf("Queues() = %+v, want tiny with 1 running and 1 waiting", q)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(h.model.block)
	for range 2 {
		if s := <-done; s != http.StatusOK {
			t.Fatalf("a request got %d", s)
		}
	}
	if q := h.srv.Queues(); len(q) != 1 || q[0] != (QueueState{Model: "tiny"}) {
		t.Fatalf("Queues() = %+v once both ended, want tiny with none", q)
	}
}
