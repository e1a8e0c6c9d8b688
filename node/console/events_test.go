package console

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/api"
)

func served(model string, out int, ms float64, uj uint64) api.RequestEvent {
	return api.RequestEvent{Endpoint: "/v1/chat/completions", Model: model, Route: "local", Status: 200,
		PromptTokens: 4, CompletionTokens: out, DurationMS: ms + 7, GenerationMS: ms, EnergyUJ: uj}
}

// TestEventsRing: the feed keeps the last events, oldest first, numbered
// without a gap.
func TestEventsRing(t *testing.T) {
	e := NewEvents(4, 1)
	for i := range 7 {
		e.ObserveRequest(served("m", i, 1, 1))
	}
	snap := e.Snapshot()
	if len(snap.Recent) != 4 {
		t.Fatalf("%d events kept, want 4", len(snap.Recent))
	}
	for i, ev := range snap.Recent {
		if ev.Seq != uint64(4+i) || ev.CompletionTokens != 3+i {
			t.Fatalf("event %d: seq %d, %d tokens; want seq %d, %d tokens", i, ev.Seq, ev.CompletionTokens, 4+i, 3+i)
		}
	}
}

// TestEventsModelStats: a model's totals add up its completed local
// serves: tokens over serve time, energy over generated tokens; failures
// and relays are counted but add no tokens; a request refused before it
// was routed makes no model.
func TestEventsModelStats(t *testing.T) {
	e := NewEvents(0, 0)
	e.ObserveRequest(served("a", 10, 500, 2000))
	e.ObserveRequest(served("a", 30, 1500, 6000))
	failed := served("a", 5, 100, 100)
	failed.Error = "engine failed"
	e.ObserveRequest(failed)
	e.ObserveRequest(api.RequestEvent{Model: "a", Route: "peer", Peer: "p", Status: 200, DurationMS: 80})
	e.ObserveRequest(api.RequestEvent{Model: "made-up", Status: 404})
	snap := e.Snapshot()
	if len(snap.Models) != 1 {
		t.Fatalf("models %+v, want a only", snap.Models)
	}
	st := snap.Models[0]
	if st.Requests != 4 || st.Served != 2 || st.Failed != 1 || st.Relayed != 1 || st.CompletionTokens != 40 || st.EnergyUJ != 8000 {
		t.Fatalf("stats %+v", st)
	}
	// 40 tokens in 2 s of generation; 8000 µJ over 40 tokens.
	if math.Abs(st.TokensPerSecond-20) > 1e-9 || math.Abs(st.UJPerToken-200) > 1e-9 {
		t.Fatalf("%.3f tokens/s, %.3f µJ/token; want 20 and 200", st.TokensPerSecond, st.UJPerToken)
	}
	if last := snap.Recent[len(snap.Recent)-1]; last.Stats != nil {
		t.Fatalf("an unrouted request carries stats %+v", last.Stats)
	}
	if ev := snap.Recent[1]; ev.Stats == nil || ev.Stats.Served != 2 {
		t.Fatalf("an event carries its model's totals after it: %+v", ev.Stats)
	}
}

// TestEventsSlowSubscriberDrops: a subscriber that reads nothing never
// holds up publishing; what does not fit its buffer is dropped and
// counted.
func TestEventsSlowSubscriberDrops(t *testing.T) {
	e := NewEvents(0, 0)
	s, _, ok := e.subscribe()
	if !ok {
		t.Fatal("subscribe refused")
	}
	done := make(chan struct{})
	go func() {
		for range subscriberBuffer + 10 {
			e.ObserveRequest(served("m", 1, 1, 1))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publishing blocked on a subscriber that reads nothing")
	}
	if len(s.c) != subscriberBuffer || e.takeDropped(s) != 10 || e.takeDropped(s) != 0 || e.Snapshot().Dropped != 10 {
		t.Fatalf("buffered %d, snapshot dropped %d", len(s.c), e.Snapshot().Dropped)
	}
}

type sse struct{ name, data string }

func readEvents(t *testing.T, r *bufio.Reader, n int) []sse {
	t.Helper()
	var out []sse
	var cur sse
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur.name != "" {
				out = append(out, cur)
			}
			cur = sse{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	return out
}

// TestEventsStream: GET /api/events sends the snapshot, then each request
// as it is observed; Serve's end closes the stream and refuses new ones.
func TestEventsStream(t *testing.T) {
	e := NewEvents(0, 0)
	e.ObserveRequest(served("m", 2, 10, 100))
	hs := httptest.NewServer(e)
	defer hs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx) }()

	resp, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	first := readEvents(t, r, 1)[0]
	var snap Snapshot
	if err := json.Unmarshal([]byte(first.data), &snap); first.name != "snapshot" || err != nil || len(snap.Recent) != 1 || snap.Recent[0].Seq != 1 {
		t.Fatalf("first event %+v (%v)", first, err)
	}
	e.ObserveRequest(api.RequestEvent{Model: "m", Route: "peer", Peer: "abc", Status: 502, Error: "relay failed"})
	got := readEvents(t, r, 1)[0]
	var ev Event
	if err := json.Unmarshal([]byte(got.data), &ev); got.name != "request" || err != nil || ev.Seq != 2 || ev.Peer != "abc" || ev.Status != 502 || ev.Stats == nil || ev.Stats.Failed != 1 {
		t.Fatalf("request event %+v (%v)", got, err)
	}
	if resp, err := http.Get(hs.URL + "?since=3"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a parameter: %v %v", resp.StatusCode, err)
	}

	cancel()
	<-served
	if _, err := io.ReadAll(r); err != nil {
		t.Fatalf("the stream did not end cleanly at Serve's end: %v", err)
	}
	resp2, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream after Serve's end: %d, want 503", resp2.StatusCode)
	}
}

// TestEventsSubscriberBound: past its most subscribers the feed answers
// 503 with Retry-After.
func TestEventsSubscriberBound(t *testing.T) {
	e := NewEvents(0, 1)
	hs := httptest.NewServer(e)
	defer hs.Close()
	resp, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	readEvents(t, bufio.NewReader(resp.Body), 1)
	resp2, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusServiceUnavailable || resp2.Header.Get("Retry-After") == "" {
		t.Fatalf("a second subscriber: %d, want 503 with Retry-After", resp2.StatusCode)
	}
}

// stuckWriter is a client connection that takes nothing until released.
type stuckWriter struct {
	h        http.Header
	mu       sync.Mutex
	buf      strings.Builder
	writing  chan struct{} // closed at the first write
	once     sync.Once
	released chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.h }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.released
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.WriteString(string(b))
}
func (w *stuckWriter) Flush() {}

// TestEventsStreamSaysDropped: a stream whose client stalls loses what
// does not fit its buffer, and says how many it lost once it moves again.
func TestEventsStreamSaysDropped(t *testing.T) {
	e := NewEvents(0, 0)
	w := &stuckWriter{h: http.Header{}, writing: make(chan struct{}), released: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/api/events", nil).WithContext(ctx)
	done := make(chan struct{})
	go func() { e.ServeHTTP(w, req); close(done) }()
	<-w.writing // subscribed, and stuck writing the snapshot
	for range subscriberBuffer + 3 {
		e.ObserveRequest(served("m", 1, 1, 1))
	}
	close(w.released)
	var out string
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out, `"seq":`+strconv.Itoa(subscriberBuffer)+`,`) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		w.mu.Lock()
		out = w.buf.String()
		w.mu.Unlock()
	}
	cancel()
	<-done
	if !strings.Contains(out, "event: dropped\ndata: {\"dropped\":3}\n\n") {
		t.Fatalf("no dropped event for the 3 lost:\n%s", out)
	}
	if n := strings.Count(out, "event: request\n"); n != subscriberBuffer {
		t.Fatalf("%d request events, want the %d buffered", n, subscriberBuffer)
	}
}
