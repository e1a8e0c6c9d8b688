package api

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// sseWriter writes Server-Sent Events, flushing each one so tokens reach
// the client as they are produced. Headers go out with the first event, so
// a generation that fails before producing anything still gets a proper
// HTTP error status instead of a 200 stream.
type sseWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	started bool
	buf     bytes.Buffer
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, flusher: f}
}

func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
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

// done writes the terminating "[DONE]" sentinel of OpenAI streams.
func (s *sseWriter) done() error {
	s.start()
	s.buf.Reset()
	s.buf.WriteString("data: [DONE]\n\n")
	return s.flush()
}

func (s *sseWriter) flush() error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}
