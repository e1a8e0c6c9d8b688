package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/node/identity"
)

// placingMesh is a Mesh and Placer whose hosts are scripted: each peer
// reads the request it is relayed and answers its reply. It places every
// request on hosts, in order, and records what it is told.
type placingMesh struct {
	hosts   []identity.EndpointID
	replies map[identity.EndpointID]string

	mu     sync.Mutex
	loads  []LocalLoad
	sent   []identity.EndpointID
	ended  map[identity.EndpointID][]string // the envelope_hex each attempt ended with
	header map[identity.EndpointID]string   // PlacementHeader each host was sent
}

func newPlacingMesh(hosts ...identity.EndpointID) *placingMesh {
	return &placingMesh{hosts: hosts, replies: map[identity.EndpointID]string{},
		ended: map[identity.EndpointID][]string{}, header: map[identity.EndpointID]string{}}
}

func (m *placingMesh) HostsOf(string) []identity.EndpointID { return nil }

func (m *placingMesh) Place(g *Generation, local bool, load LocalLoad) *Placement {
	m.mu.Lock()
	m.loads = append(m.loads, load)
	m.mu.Unlock()
	return &Placement{Hosts: m.hosts, Route: "the placement", Detail: map[string]string{"route": "the placement", "by": "fake"},
		Sent: func(peer identity.EndpointID) func(string) {
			m.mu.Lock()
			m.sent = append(m.sent, peer)
			m.mu.Unlock()
			return func(env string) {
				m.mu.Lock()
				m.ended[peer] = append(m.ended[peer], env)
				m.mu.Unlock()
			}
		}}
}

func (m *placingMesh) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	reply, ok := m.replies[peer]
	if !ok {
		return nil, fmt.Errorf("peer %s unreachable", peer.Short())
	}
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		req, err := http.ReadRequest(bufio.NewReader(b))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		m.mu.Lock()
		m.header[peer] = req.Header.Get(PlacementHeader)
		m.mu.Unlock()
		io.WriteString(b, reply)
	}()
	return a, nil
}

const hostAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"

func answerWith(body string) string { return fmt.Sprintf(hostAnswer, len(body), body) }

// TestPlacedRelay: a request placed on peers goes to them in order; one
// whose queue is full (429) passes it to the next, which serves it; each
// is told the placement, and the placer is told of each attempt and of
// the receipt envelope the answer carried.
func TestPlacedRelay(t *testing.T) {
	busy, free := testID(0xa), testID(0xb)
	m := newPlacingMesh(busy, free)
	m.replies[busy] = "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\nno"
	answer := `{"usage":{"energy":{"receipt":{},"envelope_hex":"d28458aB01"}}}`
	m.replies[free] = answerWith(answer)
	h := newHarness(t, Config{}, m)
	resp := h.post(t, "/v1/completions", `{"model":"remote","prompt":"x"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != answer {
		t.Fatalf("status %d %q, want the free host's answer", resp.StatusCode, body)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sent) != 2 || m.sent[0] != busy || m.sent[1] != free {
		t.Fatalf("attempts %v, want the busy host then the free one", m.sent)
	}
	if got := m.ended[busy]; len(got) != 1 || got[0] != "" {
		t.Fatalf("busy host's attempt ended with %q, want once with no receipt", got)
	}
	if got := m.ended[free]; len(got) != 1 || got[0] != "d28458aB01" {
		t.Fatalf("free host's attempt ended with %q, want its envelope once", got)
	}
	if m.header[busy] != "the placement" || m.header[free] != "the placement" {
		t.Fatalf("placement headers %q", m.header)
	}
	if len(m.loads) != 1 || m.loads[0] != (LocalLoad{}) {
		t.Fatalf("loads %v, want one, empty: the model is not local", m.loads)
	}
}

// TestPlacedLastHostBusy: the last host's 429 is what the client gets.
func TestPlacedLastHostBusy(t *testing.T) {
	only := testID(0xa)
	m := newPlacingMesh(only)
	m.replies[only] = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\nno"
	h := newHarness(t, Config{}, m)
	resp := h.post(t, "/v1/completions", `{"model":"remote","prompt":"x"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the host's 429", resp.StatusCode)
	}
}

// TestPlacedLocalAndSpill: a request placed on this node first is served
// here, with the placement in usage and for the receipt's route; once its
// one slot is taken and nothing may queue, the next spills to the peer
// placed after it instead of a 429, told that it was spilled.
func TestPlacedLocalAndSpill(t *testing.T) {
	peer := testID(0xb)
	m := newPlacingMesh(testID(1), peer)
	m.replies[peer] = answerWith(`{"spilled":true}`)
	h := newHarness(t, Config{Concurrency: 1, QueueDepth: -1}, m)

	resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x"}`)
	var got struct {
		Usage struct {
			Placement map[string]string `json:"placement"`
		} `json:"usage"`
	}
	err := json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || got.Usage.Placement["by"] != "fake" {
		t.Fatalf("status %d, usage.placement %v (%v); want served here with the placement's detail", resp.StatusCode, got.Usage.Placement, err)
	}
	if p := h.model.lastCall().Placement; p != "the placement" {
		t.Fatalf("the model was given placement %q", p)
	}
	if l, ok := h.srv.Load("tiny"); !ok || l != (LocalLoad{Slots: 1, Free: 1, QueueLimit: 0}) {
		t.Fatalf("load when idle %+v", l)
	}

	block, started := make(chan struct{}), make(chan struct{}, 1)
	h.model.mu.Lock()
	h.model.block, h.model.started = block, started
	h.model.mu.Unlock()
	held := make(chan int)
	go func() {
		resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"hold"}`)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	<-started
	if l, _ := h.srv.Load("tiny"); l != (LocalLoad{Slots: 1, Free: 0, QueueLimit: 0}) {
		t.Fatalf("load with the slot taken %+v", l)
	}
	resp = h.post(t, "/v1/completions", `{"model":"tiny","prompt":"spill"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != `{"spilled":true}` {
		t.Fatalf("with the queue full: %d %s, want the peer's answer", resp.StatusCode, body)
	}
	m.mu.Lock()
	header := m.header[peer]
	m.mu.Unlock()
	if header != "spilled, the queue here being full: the placement" {
		t.Fatalf("the peer was told %q", header)
	}
	close(block)
	if code := <-held; code != http.StatusOK {
		t.Fatalf("held request: %d", code)
	}
}

// TestPlacementHeader: a peer's placement, over the mesh, is handed to
// the model for the receipt's route and comes back in usage.placement;
// the header is refused on the main listener, and over the mesh when it
// is not one line of printable ASCII within its bound.
func TestPlacementHeader(t *testing.T) {
	h := newHarness(t, Config{MeshAccess: anyPeer{}}, nil)
	peer := testID(0xc)
	hs := meshServer(t, h.srv, peer)
	post := func(url, value string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(PlacementHeader, value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post(hs.URL, "abc: best of 2 weighed")
	want := "placed by " + peer.Short() + ": abc: best of 2 weighed"
	if resp.StatusCode != http.StatusOK || h.model.lastCall().Placement != want || !strings.Contains(body, `"placement":{"route":"`+want+`"}`) {
		t.Fatalf("%d %s; model given %q", resp.StatusCode, body, h.model.lastCall().Placement)
	}
	for _, tc := range []struct{ url, value, why string }{
		{h.http.URL, "abc", "set only by a node relaying"},
		{hs.URL, "caf\xc3\xa9", "printable ASCII"},
		{hs.URL, strings.Repeat("x", maxPlacementHeader+1), "printable ASCII of at most 4096 bytes"},
	} {
		resp, body := post(tc.url, tc.value)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.why) {
			t.Fatalf("header %.20q: %d %s, want 400 saying %q", tc.value, resp.StatusCode, body, tc.why)
		}
	}
}

// TestLatencyBudgetMetadata: metadata.latency_budget_ms is read as
// fidelity_floor is, and refused out of range.
func TestLatencyBudgetMetadata(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x","metadata":{"latency_budget_ms":"2500"}}`)
	resp.Body.Close()
	if b := h.model.lastCall().LatencyBudgetMS; resp.StatusCode != http.StatusOK || b == nil || *b != 2500 {
		t.Fatalf("status %d, budget %v", resp.StatusCode, b)
	}
	for _, v := range []string{`"0"`, `"86400001"`, `"-1"`, `"soon"`} {
		resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x","metadata":{"latency_budget_ms":`+v+`}}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "metadata.latency_budget_ms") {
			t.Fatalf("latency_budget_ms %s: %d %s", v, resp.StatusCode, b)
		}
	}
}

// TestReceiptTap: the tap finds the last envelope_hex however the
// answer is cut into reads, passes every byte through, and reports once.
func TestReceiptTap(t *testing.T) {
	stream := `data: {"x":"\"envelope_hex\":\"zz"}` + "\n\n" +
		`data: {"usage":{"energy":{"envelope_hex":"0011aa"}}}` + "\n\n" +
		`data: {"usage":{"energy":{"envelope_hex":"d284FF"}}}` + "\n\ndata: [DONE]\n\n"
	for size := 1; size <= len(stream); size++ {
		var got []string
		tap := newReceiptTap(io.NopCloser(&chunked{s: stream, size: size}), func(env string) { got = append(got, env) })
		out, err := io.ReadAll(tap)
		tap.Close()
		if err != nil || string(out) != stream {
			t.Fatalf("reads of %d: passed %q, %v", size, out, err)
		}
		if len(got) != 1 || got[0] != "d284FF" {
			t.Fatalf("reads of %d: reported %q, want the last envelope once", size, got)
		}
	}
	var got []string
	tap := newReceiptTap(io.NopCloser(strings.NewReader(`{"envelope_hex":"12`)), func(env string) { got = append(got, env) })
	io.ReadAll(tap)
	if len(got) != 1 || got[0] != "" {
		t.Fatalf("an unterminated envelope reported %q, want none", got)
	}
}

// chunked reads s size bytes at a time.
type chunked struct {
	s    string
	size int
}

func (c *chunked) Read(b []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), c.size)], c.s)
	c.s = c.s[n:]
	return n, nil
}

// FuzzReceiptTap: whatever a host answers, the tap passes it through
// unchanged, however it is cut into reads, and reports once, with hex
// only, within its bound.
func FuzzReceiptTap(f *testing.F) {
	f.Add([]byte(`{"usage":{"energy":{"envelope_hex":"d28458"}}}`), uint8(3))
	f.Add([]byte(`data: {"envelope_hex":"0a"}`+"\n\n"+`data: {"envelope_hex":"zz"}`), uint8(1))
	f.Add([]byte(`"envelope_hex":"envelope_hex":"12"`), uint8(7))
	f.Fuzz(func(t *testing.T, answer []byte, size uint8) {
		var got []string
		tap := newReceiptTap(io.NopCloser(&chunked{s: string(answer), size: int(size%64) + 1}), func(env string) { got = append(got, env) })
		out, err := io.ReadAll(tap)
		tap.Close()
		if err != nil || string(out) != string(answer) {
			t.Fatalf("passed %q, %v; want the answer unchanged", out, err)
		}
		if len(got) != 1 {
			t.Fatalf("reported %d times", len(got))
		}
		if len(got[0]) > maxEnvelopeHex || strings.IndexFunc(got[0], func(c rune) bool {
			return !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F')
		}) >= 0 {
			t.Fatalf("reported %.40q", got[0])
		}
		if got[0] != "" && !strings.Contains(string(answer), envelopeMarker+got[0]+`"`) {
			t.Fatalf("reported %q, which the answer does not hold as an envelope", got[0])
		}
	})
}

// TestLoadChanged: the server says when a model's slots are all taken or
// its queue fills, and when either comes free, and not otherwise.
func TestLoadChanged(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	h := newHarness(t, Config{Concurrency: 2, QueueDepth: 1, LoadChanged: func(model string) {
		mu.Lock()
		calls = append(calls, model)
		mu.Unlock()
	}}, nil)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls)
	}
	block, started := make(chan struct{}), make(chan struct{}, 3)
	h.model.mu.Lock()
	h.model.block, h.model.started = block, started
	h.model.mu.Unlock()
	codes := make(chan int, 3)
	ask := func() {
		resp := h.post(t, "/v1/completions", `{"model":"tiny","prompt":"x"}`)
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go ask()
	<-started
	if n := count(); n != 0 {
		t.Fatalf("%d calls with 1 of 2 slots taken, want none", n)
	}
	go ask()
	<-started
	if n := count(); n != 1 {
		t.Fatalf("%d calls with both slots taken, want 1", n)
	}
	go ask() // waits in the queue of 1, which it fills
	waitFor(t, "the third to queue", func() bool { l, _ := h.srv.Load("tiny"); return l.Queued == 1 })
	if n := count(); n != 2 {
		t.Fatalf("%d calls with the queue full, want 2", n)
	}
	close(block)
	for range 3 {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	// Back from full, then from every slot taken: 2 more.
	if n := count(); n != 4 || calls[0] != "tiny" {
		t.Fatalf("calls %q, want 4 for tiny", calls)
	}
}
