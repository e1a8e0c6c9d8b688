package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"
)

// sseWriter writes Server-Sent Events, flushing each one so tokens reach
// the client as they are produced. Headers go out with the first event, so
// a generation that fails before producing anything still gets a proper
// HTTP error status instead of a 200 stream.
type sseWriter struct {
	w   *stallGuard
	buf bytes.Buffer
	// ndjson writes newline-delimited JSON instead (Ollama's streams):
	// one object a line, through line.
	ndjson bool

	// mu orders the stream's writes and the pinger's (pingEvery); wrote
	// is the last write's time, by now.
	mu      sync.Mutex
	started bool
	wrote   time.Time
	now     func() time.Time
}

func (s *Server) newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: s.guard(w), now: s.now}
}

// pingEvery writes an SSE comment (":") each time the stream has been
// silent for d, until the stop it returns is called (which waits for
// the pinger): llama-server's sse_ping_interval, which its web UI sends
// so that a client that drops a silent connection (undici) keeps it
// through a long prompt. A ping starts the stream (200), so an error
// after it is an error event. d ≤ 0 pings never. The pinger looks four
// times an interval, so a silence lasts at most 1¼ d.
func (s *sseWriter) pingEvery(d time.Duration) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	t := time.NewTicker(max(d/4, time.Millisecond))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s.pingIfSilent(d)
			}
		}
	}()
	return func() {
		t.Stop()
		close(quit)
		wg.Wait()
	}
}

// pingIfSilent writes the ping where nothing was written for d; an error
// is the stream's, which its next write meets.
func (s *sseWriter) pingIfSilent(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started && s.now().Sub(s.wrote) < d {
		return
	}
	s.startLocked()
	_ = s.writeLocked([]byte(":\n\n"))
}

// stallGuard bounds each write to a client by a deadline. A streamed
// response is written while the model generates, and a client that reads
// nothing would otherwise block that write, and the model's slot with it,
// for as long as it keeps the connection open. (The server lifts the
// deadline once the response is done.)
type stallGuard struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *Server) guard(w http.ResponseWriter) *stallGuard {
	return &stallGuard{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.StreamWriteTimeout}
}

// Write buffers b or writes it to the client, within the deadline.
func (g *stallGuard) Write(b []byte) (int, error) {
	// A writer without deadlines (a test recorder) is written as it is.
	_ = g.rc.SetWriteDeadline(time.Now().Add(g.timeout))
	return g.ResponseWriter.Write(b)
}

// FlushError sends what is buffered to the client within the deadline.
// http.ResponseController, and so httputil.ReverseProxy, flush through it.
func (g *stallGuard) FlushError() error {
	_ = g.rc.SetWriteDeadline(time.Now().Add(g.timeout))
	if err := g.rc.Flush(); !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (g *stallGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }

func (s *sseWriter) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
}

func (s *sseWriter) startLocked() {
	if s.started {
		return
	}
	s.started = true
	s.wrote = s.now()
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	if s.ndjson {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold tokens back
	s.w.WriteHeader(http.StatusOK)
}

// event writes one event; name is empty for data-only events (chat and
// completions streams), set for the Responses API's typed events.
func (s *sseWriter) event(name string, v any) error {
	s.start()
	s.buf.Reset()
	if name != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(name)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends with '\n'
		return err
	}
	s.buf.WriteByte('\n')
	return s.flush()
}

// line writes v as one line of an NDJSON stream.
func (s *sseWriter) line(v any) error {
	s.start()
	s.buf.Reset()
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends with '\n'
		return err
	}
	return s.flush()
}

// done writes the terminating "[DONE]" sentinel of OpenAI streams.
func (s *sseWriter) done() error {
	s.start()
	s.buf.Reset()
	s.buf.WriteString("data: [DONE]\n\n")
	return s.flush()
}

func (s *sseWriter) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(s.buf.Bytes())
}

func (s *sseWriter) writeLocked(b []byte) error {
	s.wrote = s.now()
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.w.FlushError()
}
