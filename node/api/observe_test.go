package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/identity"
)

// observer records the events it hears of.
type observer struct {
	mu     sync.Mutex
	events []RequestEvent
}

func (o *observer) ObserveRequest(ev RequestEvent) {
	o.mu.Lock()
	o.events = append(o.events, ev)
	o.mu.Unlock()
}

// nth waits for the nth event (from 1): a client may have its whole
// answer before the handler returns, and the event comes after.
func (o *observer) nth(t *testing.T, n int) RequestEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o.mu.Lock()
		got := len(o.events)
		var ev RequestEvent
		if got >= n {
			ev = o.events[n-1]
		}
		o.mu.Unlock()
		switch {
		case got > n:
			t.Fatalf("%d events, want %d", got, n)
		case got == n:
			return ev
		case time.Now().After(deadline):
			t.Fatalf("event %d never came (%d so far)", n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func drain(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

// TestObserverHearsEachRequest: every generation request, answered or
// refused, local, relayed or served for a peer, streamed or not, reaches
// the observer once answered, with what the API knows of it.
func TestObserverHearsEachRequest(t *testing.T) {
	hostID := testID(0xb)
	hostObs := &observer{}
	host := newHarness(t, Config{Observer: hostObs, MeshAccess: anyPeer{}}, nil)
	hostMesh := meshServer(t, host.srv, testID(1))
	obs := &observer{}
	h := newHarness(t, Config{Observer: obs}, &fakeMesh{
		hosts:   map[string][]identity.EndpointID{"remote": {hostID}},
		targets: map[identity.EndpointID]string{hostID: hostMesh.Listener.Addr().String()},
	})

	drain(h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`))
	ev := obs.nth(t, 1)
	if ev.Endpoint != "/v1/chat/completions" || ev.Model != "tiny" || ev.Route != "local" || ev.Stream || ev.Status != 200 ||
		ev.Error != "" || ev.PromptTokens != 3 || ev.CompletionTokens != 4 || ev.Time.IsZero() {
		t.Fatalf("local serve: %+v", ev)
	}

	drain(h.post(t, "/v1/completions", `{"model":"tiny","prompt":"hi","stream":true}`))
	if ev := obs.nth(t, 2); ev.Endpoint != "/v1/completions" || !ev.Stream || ev.Route != "local" || ev.Status != 200 || ev.CompletionTokens != 4 {
		t.Fatalf("streamed serve: %+v", ev)
	}

	drain(h.post(t, "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`))
	if ev := obs.nth(t, 3); ev.Model != "nope" || ev.Route != "" || ev.Status != http.StatusNotFound || !strings.Contains(ev.Error, `model "nope" is not served`) {
		t.Fatalf("unknown model: %+v", ev)
	}

	drain(h.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[]}`))
	if ev := obs.nth(t, 4); ev.Status != http.StatusBadRequest || ev.Model != "" || !strings.Contains(ev.Error, "messages") {
		t.Fatalf("bad request: %+v", ev)
	}

	long := strings.Repeat("é", 100_000)
	drain(h.post(t, "/v1/chat/completions", `{"model":"`+long+`","messages":[{"role":"user","content":"hi"}]}`))
	if ev := obs.nth(t, 5); len(ev.Model) > MaxEventModel || !strings.HasSuffix(ev.Model, "é…") || len(ev.Error) > MaxEventError || !strings.HasSuffix(ev.Error, "é…") || !utf8.ValidString(ev.Error) {
		t.Fatalf("a huge model name is kept whole: model %d bytes, error %d bytes", len(ev.Model), len(ev.Error))
	}

	h.model.midErr = errBoom
	drain(h.post(t, "/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if ev := obs.nth(t, 6); ev.Status != 200 || ev.Error == "" || !ev.Stream {
		t.Fatalf("a stream that failed mid-way: %+v", ev)
	}

	host.reg.local = map[string]Model{"remote": host.model}
	body := drain(h.post(t, "/v1/chat/completions", `{"model":"remote","messages":[{"role":"user","content":"hi"}]}`))
	if ev := obs.nth(t, 7); ev.Route != "peer" || ev.Peer != hostID.String() || ev.Status != 200 || ev.Model != "remote" {
		t.Fatalf("relayed: %+v (%s)", ev, body)
	}
	if ev := hostObs.nth(t, 1); ev.Route != "local" || ev.RelayedFor != testID(1).String() || ev.CompletionTokens != 4 {
		t.Fatalf("served for a peer: %+v", ev)
	}
}

// TestPublicRoutesWithoutKey: Config.Public is served without the API key
// (a browser's navigation cannot carry it) but behind the browser guard;
// everything else still wants the key.
func TestPublicRoutesWithoutKey(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page") })
	h := newHarness(t, Config{APIKey: "k", Public: map[string]http.Handler{"/console/": page}}, nil)
	get := func(path, host string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, h.http.URL+path, nil)
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, drain(resp)
	}
	if code, body := get("/console/", ""); code != 200 || body != "page" {
		t.Fatalf("public page without the key: %d %q", code, body)
	}
	if code, _ := get("/api/status", ""); code != http.StatusUnauthorized {
		t.Fatalf("/api/status without the key: %d", code)
	}
	if code, _ := get("/api/status", "", "Authorization", "Bearer k"); code != 200 {
		t.Fatalf("/api/status with the key: %d", code)
	}
	if code, body := get("/console/", "evil.example:80"); code != http.StatusForbidden || !strings.Contains(body, "host_not_allowed") {
		t.Fatalf("public page under a rebound name: %d %s", code, body)
	}
	if code, _ := get("/console/", "", "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Fatalf("public page from another site: %d", code)
	}
}

// lister is a node that lists recent receipts.
type lister struct {
	fakeNode
	limits []int
}

func (l *lister) RecentReceipts(limit int) (RecentReceipts, error) {
	l.limits = append(l.limits, limit)
	return RecentReceipts{Steward: "did:key:z6MkFake", NextSequence: 7,
		Receipts: []ReceiptSummary{{Sequence: 6, ID: "ab", Verified: true, Verification: "ok"}}}, nil
}

// TestRecentReceiptsEndpoint: GET /api/receipts takes limit only, within
// its bounds, and answers 404 on a node that keeps no receipt log.
func TestRecentReceiptsEndpoint(t *testing.T) {
	l := &lister{}
	srv := New(Config{}, testID(1), &fakeRegistry{}, nil, l, nil, nil)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for _, tc := range []struct {
		query string
		code  int
		limit int
	}{
		{"", 200, DefaultRecentReceipts},
		{"?limit=5", 200, 5},
		{"?limit=100", 200, MaxRecentReceipts},
		{"?limit=0", 400, 0},
		{"?limit=101", 400, 0},
		{"?limit=x", 400, 0},
		{"?from=3", 400, 0},
	} {
		before := len(l.limits)
		resp, err := http.Get(hs.URL + "/api/receipts" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		body := drain(resp)
		if resp.StatusCode != tc.code {
			t.Fatalf("%s: %d %s", tc.query, resp.StatusCode, body)
		}
		if tc.code != 200 {
			if len(l.limits) != before {
				t.Fatalf("%s: refused, yet the node was asked", tc.query)
			}
			continue
		}
		var page RecentReceipts
		if err := json.Unmarshal([]byte(body), &page); err != nil || l.limits[len(l.limits)-1] != tc.limit || len(page.Receipts) != 1 || !page.Receipts[0].Verified {
			t.Fatalf("%s: %s (%v), limit %v", tc.query, body, err, l.limits)
		}
	}
	plain := httptest.NewServer(New(Config{}, testID(1), &fakeRegistry{}, nil, &fakeNode{}, nil, nil).Handler())
	defer plain.Close()
	resp, err := http.Get(plain.URL + "/api/receipts")
	if err != nil {
		t.Fatal(err)
	}
	if drain(resp); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a node without a receipt log: %d", resp.StatusCode)
	}
}
