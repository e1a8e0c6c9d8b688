package console

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/api"
)

// Event is one request of the live log: the API's RequestEvent with its
// place in the feed and, for a routed request, its model's totals after it.
type Event struct {
	Seq uint64 `json:"seq"`
	api.RequestEvent
	Stats *ModelStats `json:"model_stats,omitempty"`
}

// ModelStats are one model's totals since the node started, over the
// requests routed to it from this node or served here for peers.
type ModelStats struct {
	Model string `json:"model"`
	// Requests counts every routed request; Relayed those sent to a peer,
	// Failed those that did not end in a complete answer.
	Requests uint64 `json:"requests"`
	Relayed  uint64 `json:"relayed"`
	Failed   uint64 `json:"failed"`
	// Served counts the local serves that completed, whose tokens,
	// generation time and energy the rest add up.
	Served           uint64  `json:"served"`
	PromptTokens     uint64  `json:"prompt_tokens"`
	CompletionTokens uint64  `json:"completion_tokens"`
	GenerationMS     float64 `json:"generation_ms"`
	EnergyUJ         uint64  `json:"energy_uj"`
	// TokensPerSecond is CompletionTokens over GenerationMS (the prompt's
	// processing included, the wait in the queue not); UJPerToken is
	// EnergyUJ over CompletionTokens (the receipts' energy covers the
	// prompt's processing too). Zero until there is something to divide.
	TokensPerSecond float64 `json:"tokens_per_second"`
	UJPerToken      float64 `json:"uj_per_token"`
}

// Events keeps the latest requests in a ring and streams new ones to the
// console's subscribers (GET /api/events). A subscriber that does not keep
// up loses events, and is told how many; publishing never waits for one.
type Events struct {
	mu      sync.Mutex
	ring    []Event // the last len(ring) events, oldest at next once full
	next    int
	seq     uint64
	models  map[string]*ModelStats
	subs    map[*subscriber]struct{}
	dropped uint64 // events lost by subscribers, all together
	closed  bool

	maxSubs   int
	subBuffer int
	keepalive time.Duration
}

// Default bounds of NewEvents.
const (
	DefaultRing        = 256
	DefaultSubscribers = 16
	subscriberBuffer   = 64
)

// NewEvents returns a feed that keeps the last ring requests (DefaultRing
// when 0) and serves at most subs subscribers at once (DefaultSubscribers
// when 0).
func NewEvents(ring, subs int) *Events {
	if ring <= 0 {
		ring = DefaultRing
	}
	if subs <= 0 {
		subs = DefaultSubscribers
	}
	return &Events{ring: make([]Event, 0, ring), models: map[string]*ModelStats{}, subs: map[*subscriber]struct{}{},
		maxSubs: subs, subBuffer: subscriberBuffer, keepalive: 15 * time.Second}
}

type subscriber struct {
	c       chan Event
	dropped uint64 // guarded by Events.mu
	done    chan struct{}
}

// ObserveRequest implements api.RequestObserver: it records ev and hands
// it to every subscriber whose buffer has room.
func (e *Events) ObserveRequest(ev api.RequestEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	out := Event{Seq: e.seq, RequestEvent: ev}
	if ev.Route != "" && ev.Model != "" {
		// Only a routed request names a model that exists: totals are
		// never kept for names a client made up.
		st := e.models[ev.Model]
		if st == nil {
			st = &ModelStats{Model: ev.Model}
			e.models[ev.Model] = st
		}
		st.add(ev)
		c := *st
		out.Stats = &c
	}
	if len(e.ring) < cap(e.ring) {
		e.ring = append(e.ring, out)
	} else {
		e.ring[e.next] = out
		e.next = (e.next + 1) % len(e.ring)
	}
	for s := range e.subs {
		select {
		case s.c <- out:
		default:
			s.dropped++
			e.dropped++
		}
	}
}

func (st *ModelStats) add(ev api.RequestEvent) {
	st.Requests++
	ok := ev.Status == http.StatusOK && ev.Error == ""
	if !ok {
		st.Failed++
	}
	if ev.Route == "peer" {
		st.Relayed++
		return
	}
	if !ok {
		return
	}
	st.Served++
	st.PromptTokens += uint64(ev.PromptTokens)
	st.CompletionTokens += uint64(ev.CompletionTokens)
	st.GenerationMS += ev.GenerationMS
	st.EnergyUJ += ev.EnergyUJ
	if st.GenerationMS > 0 {
		st.TokensPerSecond = float64(st.CompletionTokens) / (st.GenerationMS / 1000)
	}
	if st.CompletionTokens > 0 {
		st.UJPerToken = float64(st.EnergyUJ) / float64(st.CompletionTokens)
	}
}

// Snapshot is what a subscriber gets first: the ring, oldest first, every
// model's totals, and how many events subscribers have lost.
type Snapshot struct {
	Recent  []Event      `json:"recent"`
	Models  []ModelStats `json:"models"`
	Dropped uint64       `json:"dropped"`
}

// Snapshot returns the feed's current state.
func (e *Events) Snapshot() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshotLocked()
}

func (e *Events) snapshotLocked() Snapshot {
	s := Snapshot{Recent: make([]Event, 0, len(e.ring)), Models: make([]ModelStats, 0, len(e.models)), Dropped: e.dropped}
	s.Recent = append(append(s.Recent, e.ring[e.next:]...), e.ring[:e.next]...)
	for _, st := range e.models {
		s.Models = append(s.Models, *st)
	}
	sort.Slice(s.Models, func(i, j int) bool { return s.Models[i].Model < s.Models[j].Model })
	return s
}

// subscribe adds a subscriber with the snapshot it starts from; false when
// the feed has its most subscribers, or is closed.
func (e *Events) subscribe() (*subscriber, Snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || len(e.subs) >= e.maxSubs {
		return nil, Snapshot{}, false
	}
	s := &subscriber{c: make(chan Event, e.subBuffer), done: make(chan struct{})}
	e.subs[s] = struct{}{}
	return s, e.snapshotLocked(), true
}

func (e *Events) unsubscribe(s *subscriber) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.subs, s)
}

// takeDropped returns how many events s lost since the last call.
func (e *Events) takeDropped(s *subscriber) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := s.dropped
	s.dropped = 0
	return n
}

// Serve ends every stream when ctx is done, so that they do not hold up
// the API server's shutdown, and refuses new ones from then on.
func (e *Events) Serve(ctx context.Context) error {
	<-ctx.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for s := range e.subs {
		close(s.done)
		delete(e.subs, s)
	}
	return ctx.Err()
}

// writeTimeout bounds each write to a subscriber: one that reads nothing
// for this long loses its stream.
const writeTimeout = 30 * time.Second

// ServeHTTP is GET /api/events: Server-Sent Events, first a "snapshot"
// (Snapshot), then a "request" (Event) for each request answered, a
// "dropped" ({"dropped": N}) when this stream lost N events for not
// reading fast enough, and a comment line now and then to keep it open.
func (e *Events) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "GET /api/events takes no parameters")
		return
	}
	s, snap, ok := e.subscribe()
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "server_error", "the live request log has its most subscribers, or the node is stopping; retry shortly")
		return
	}
	defer e.unsubscribe(s)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	send := func(name string, v any) bool {
		buf.Reset()
		buf.WriteString("event: " + name + "\ndata: ")
		if err := json.NewEncoder(&buf).Encode(v); err != nil {
			return false
		}
		buf.WriteByte('\n')
		return write(w, rc, buf.Bytes())
	}
	if !send("snapshot", snap) {
		return
	}
	tick := time.NewTicker(e.keepalive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case ev := <-s.c:
			if n := e.takeDropped(s); n > 0 && !send("dropped", map[string]uint64{"dropped": n}) {
				return
			}
			if !send("request", ev) {
				return
			}
		case <-tick.C:
			if n := e.takeDropped(s); n > 0 && !send("dropped", map[string]uint64{"dropped": n}) {
				return
			}
			if !write(w, rc, []byte(": keepalive\n\n")) {
				return
			}
		}
	}
}

func write(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// writeError answers as the API does: {"error": {"message", "type"}}.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg, "type": typ}})
}
