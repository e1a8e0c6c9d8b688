package api

import (
	"bufio"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSSEPing: the pinger writes an SSE comment where the stream was
// silent for the interval, by the injected clock, and not where an event
// went out within it; its first ping starts the stream; stop waits for
// it, and nothing is written after.
func TestSSEPing(t *testing.T) {
	var clock atomic.Int64 // seconds
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	rec := httptest.NewRecorder()
	srv := &Server{now: now}
	s := srv.newSSEWriter(rec)

	s.pingIfSilent(10 * time.Second) // not started: a ping starts it
	if rec.Code != 200 || rec.Body.String() != ":\n\n" {
		t.Fatalf("first ping: %d %q", rec.Code, rec.Body.String())
	}
	clock.Store(5)
	if err := s.event("", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	clock.Store(14) // 9 s after the event
	s.pingIfSilent(10 * time.Second)
	if strings.Count(rec.Body.String(), ":\n\n") != 1 {
		t.Fatalf("pinged within the interval: %q", rec.Body.String())
	}
	clock.Store(15)
	s.pingIfSilent(10 * time.Second)
	if got := rec.Body.String(); !strings.HasSuffix(got, "\n\n:\n\n") || strings.Count(got, ":\n\n") != 2 {
		t.Fatalf("no ping after 10 s of silence: %q", got)
	}

	// The ticker: a clock that jumps an hour at each look pings at
	// each; after stop, nothing more.
	now2 := func() time.Time { return time.Unix(clock.Add(3600), 0) }
	rec2 := httptest.NewRecorder()
	s2 := (&Server{now: now2}).newSSEWriter(rec2)
	stop := s2.pingEvery(time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		s2.mu.Lock()
		n := strings.Count(rec2.Body.String(), ":\n\n")
		s2.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pings in 5 s at an interval of 1 ms", n)
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	after := rec2.Body.Len()
	time.Sleep(20 * time.Millisecond)
	if rec2.Body.Len() != after {
		t.Fatal("a ping after stop")
	}
	if stop := s2.pingEvery(0); stop == nil {
		t.Fatal("no stop for an interval of 0")
	}
}

// TestSSEPingInterval: a stream that asks for pings gets one before its
// model answers (llama-server's web UI sends sse_ping_interval 1 so a
// long prompt does not look like a dead connection), then its events;
// the field is checked and refused out of range.
func TestSSEPingInterval(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"tiny","stream":true,"sse_ping_interval":1,"messages":[{"role":"user","content":"x"}]}`},
		{"/v1/completions", `{"model":"tiny","stream":true,"sse_ping_interval":1,"prompt":"x"}`},
		{"/completion", `{"stream":true,"sse_ping_interval":1,"prompt":"x"}`},
	} {
		h.model.block = make(chan struct{})
		h.model.started = make(chan struct{}, 1)
		lines := make(chan string, 64)
		go func() {
			resp := h.post(t, tc.path, tc.body)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		<-h.model.started
		// The model is held: the stream's first line is the ping (the
		// harness's clock stands still, so it pings only to start).
		select {
		case l := <-lines:
			if l != ":" {
				t.Fatalf("%s: first line %q, want the ping", tc.path, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no ping while the model was held", tc.path)
		}
		close(h.model.block)
		data := 0
		for l := range lines {
			if strings.HasPrefix(l, "data: ") {
				data++
			}
		}
		if data == 0 {
			t.Fatalf("%s: no events after the ping", tc.path)
		}
		h.model.unblock()
	}
	for _, v := range []string{"-2", "86401", `"1"`} {
		resp := h.post(t, "/v1/chat/completions", `{"model":"tiny","stream":true,"sse_ping_interval":`+v+`,"messages":[{"role":"user","content":"x"}]}`)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("sse_ping_interval %s: %d, want 400", v, resp.StatusCode)
		}
	}
}
