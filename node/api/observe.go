package api

import (
	"context"
	"net/http"
	"sync"
	"time"
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
	// The tokens, the time to the first piece of text and the energy of
	// a local serve, and its receipt's envelope id; zero or empty for a
	// relayed request (its host's receipt rides in its answer).
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	DurationMS       float64 `json:"duration_ms"`
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
		if ev.Status == 0 {
			ev.Status = http.StatusOK
		}
		s.cfg.Observer.ObserveRequest(ev)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// statusWriter notes the status a handler sends. Unwrap keeps
// http.ResponseController's flushes and deadlines reaching the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
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
