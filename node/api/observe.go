package api

import (
	"context"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"
)

// RequestEvent is one generation request as the API answered it, for an
// observer (Config.Observer): the web console's live request log. It holds
// no prompt and no generated text.
type RequestEvent struct {
	Time     time.Time `json:"time"`
	Endpoint string    `json:"endpoint"`
	Model    string    `json:"model,omitempty"`
	// Route is "local" (served here), "peer" (relayed to Peer) or empty
	// for a request refused before it was routed.
	Route string `json:"route,omitempty"`
	Peer  string `json:"peer,omitempty"`
	// RelayedFor is the peer this node served the request for, when it
	// came through the mesh.
	RelayedFor string `json:"relayed_for,omitempty"`
	Stream     bool   `json:"stream"`
	// Status is the HTTP status sent (499: the client left first); Error
	// the message of a failure, mid-stream ones included.
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
	// The tokens, times and energy of a local serve, and its receipt's
	// envelope id; zero or empty for a relayed request (its host's
	// receipt rides in its answer).
	// DurationMS is the whole request's time; GenerationMS the part the
	// model generated for, from taking its slot, and FirstTokenMS when
	// within it the first text came.
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	DurationMS       float64 `json:"duration_ms"`
	GenerationMS     float64 `json:"generation_ms,omitempty"`
	FirstTokenMS     float64 `json:"first_token_ms,omitempty"`
	EnergyUJ         uint64  `json:"energy_uj,omitempty"`
	Receipt          string  `json:"receipt,omitempty"`
}

// RequestObserver is told of every generation request once it has been
// answered. It is called on the request's goroutine, so it must not block.
type RequestObserver interface {
	ObserveRequest(RequestEvent)
}

// StatusClientClosed is the status an event records for a request whose
// client went away before its answer ended (nginx's 499).
const StatusClientClosed = 499

type recordKey struct{}

// record is what a request's handlers learn of it, for its event.
type record struct {
	mu sync.Mutex
	ev RequestEvent
}

func recordOf(ctx context.Context) *record {
	rec, _ := ctx.Value(recordKey{}).(*record)
	return rec
}

// update changes the request's record, if it is observed.
func updateRecord(ctx context.Context, f func(ev *RequestEvent)) {
	if rec := recordOf(ctx); rec != nil {
		rec.mu.Lock()
		f(&rec.ev)
		rec.mu.Unlock()
	}
}

// observed wraps a generation endpoint so that the observer hears of each
// request it answers, with the status written.
func (s *Server) observed(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Observer == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := s.now()
		rec := &record{ev: RequestEvent{Time: start, Endpoint: r.URL.Path}}
		if p, ok := meshPeer(r.Context()); ok {
			rec.ev.RelayedFor = p.String()
		}
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r.WithContext(context.WithValue(r.Context(), recordKey{}, rec)))
		rec.mu.Lock()
		ev := rec.ev
		rec.mu.Unlock()
		ev.DurationMS = ms(s.now().Sub(start))
		if ev.Status == 0 {
			ev.Status = sw.status
		}
		if ev.Error == "" {
			ev.Error = sw.err
		}
		if ev.Status == 0 {
			ev.Status = http.StatusOK
		}
		// A client's model name, which errors quote too, can be as long as
		// a body: an observer that keeps events keeps only so much of it.
		ev.Model, ev.Error = clip(ev.Model, MaxEventModel), clip(ev.Error, MaxEventError)
		s.cfg.Observer.ObserveRequest(ev)
	}
}

// The longest Model and Error a RequestEvent carries, in bytes; longer
// ones are cut, and end in "…".
const (
	MaxEventModel = 256
	MaxEventError = 1024
)

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for len(s) > 0 && !utf8.ValidString(s) { // not inside a character
		s = s[:len(s)-1]
	}
	return s + "…"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// noteError gives an observed request's event the message of the error it
// is answered with, where w is (or wraps) its statusWriter.
func noteError(w http.ResponseWriter, msg string) {
	if sw, ok := unwrapTo[*statusWriter](w); ok && sw.err == "" {
		sw.err = msg
	}
}

// statusWriter notes the status a handler sends. Unwrap keeps
// http.ResponseController's flushes and deadlines reaching the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
	err    string // the message of the error answered, if any
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
