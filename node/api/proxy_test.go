package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// meshNode serves a real mesh node on loopback until the test ends.
func meshNode(t *testing.T) *mesh.Node {
	t.Helper()
	key, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := mesh.New(mesh.Config{ListenAddr: "127.0.0.1:0"}, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mesh Serve: %v", err)
		}
	})
	return n
}

// serveMesh serves srv's tunnel API on n's HTTP tunnels until the test
// ends, as the node does.
func serveMesh(t *testing.T, srv *Server, n *mesh.Node) {
	t.Helper()
	ln, err := n.ListenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeMesh(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("ServeMesh: %v", err)
		}
	})
}

// waitServing waits until from can dial each of nodes: their Serve
// starts in the background, and a dial may come before it.
func waitServing(t *testing.T, from *mesh.Node, nodes ...*mesh.Node) {
	t.Helper()
	for _, n := range nodes {
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := from.Dial(t.Context(), n.EndpointAddr())
			if err == nil {
				break
			}
			if !errors.Is(err, mesh.ErrNotServing) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// recordingMesh relays through a real mesh node to fixed hosts, and
// records the hosts dialled.
type recordingMesh struct {
	node  *mesh.Node
	hosts []identity.EndpointID
	mu    sync.Mutex
	dials []identity.EndpointID
}

func (m *recordingMesh) HostsOf(string) []identity.EndpointID { return m.hosts }

func (m *recordingMesh) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	m.mu.Lock()
	m.dials = append(m.dials, peer)
	m.mu.Unlock()
	return m.node.DialHTTP(ctx, peer)
}

func (m *recordingMesh) dialled() []identity.EndpointID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]identity.EndpointID(nil), m.dials...)
}

// TestRelayPastRefusal: over real QUIC, a host that refuses the tunnel
// (it has nowhere to relay it) does not fail the request: the next host
// serves it.
func TestRelayPastRefusal(t *testing.T) {
	modelB := &fakeModel{pieces: []string{"from", " B"}}
	regB := &fakeRegistry{self: testID(0xb), local: map[string]Model{"remote-model": modelB}}
	refuser := meshNode(t) // no tunnel listener: refuses every tunnel
	host := meshNode(t)
	relay := meshNode(t)
	srvB := New(Config{MeshAccess: anyPeer{}}, host.ID(), regB, nil, &fakeNode{}, nil, nil)
	serveMesh(t, srvB, host)
	waitServing(t, relay, refuser, host)
	m := &recordingMesh{node: relay, hosts: []identity.EndpointID{refuser.ID(), host.ID()}}
	regA := &fakeRegistry{self: relay.ID(), local: map[string]Model{}}
	srvA := New(Config{}, relay.ID(), regA, m, &fakeNode{}, nil, nil)
	apiA := httptest.NewServer(srvA.Handler())
	defer apiA.Close()

	resp, err := http.Post(apiA.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"remote-model","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &c); err != nil || len(c.Choices) == 0 || c.Choices[0].Message.Content != "from B" {
		t.Fatalf("answer %s (%v)", body, err)
	}
	if got := m.dialled(); len(got) != 2 || got[0] != refuser.ID() || got[1] != host.ID() {
		t.Fatalf("dialled %v, want the refusing host, then the other", got)
	}
}

// refusingConn is a tunnel whose host answers some bytes, then says it
// refused: what a broken host might do. Like a real host it answers only
// once the request has begun to arrive: an answer before that would be an
// unsolicited response to the HTTP client.
type refusingConn struct {
	net.Conn
	reply   io.Reader
	written chan struct{}
	once    sync.Once
}

func newRefusingConn(c net.Conn, reply string) *refusingConn {
	return &refusingConn{Conn: c, reply: strings.NewReader(reply), written: make(chan struct{})}
}

func (c *refusingConn) Read(b []byte) (int, error) {
	<-c.written
	n, err := c.reply.Read(b)
	if err == io.EOF {
		return 0, fmt.Errorf("after %d bytes: %w", n, tunnelRefused{})
	}
	return n, err
}

func (c *refusingConn) Write(b []byte) (int, error) {
	c.once.Do(func() { close(c.written) })
	return len(b), nil
}

func (c *refusingConn) Close() error {
	c.once.Do(func() { close(c.written) }) // a Read waiting for the request ends
	return c.Conn.Close()
}

type tunnelRefused struct{}

func (tunnelRefused) Error() string       { return "refused" }
func (tunnelRefused) TunnelRefused() bool { return true }

// scriptedMesh answers each host's tunnel with a script.
type scriptedMesh struct {
	hosts   []identity.EndpointID
	replies map[identity.EndpointID]string
	mu      sync.Mutex
	dials   []identity.EndpointID
}

func (m *scriptedMesh) HostsOf(string) []identity.EndpointID { return m.hosts }

func (m *scriptedMesh) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	m.mu.Lock()
	m.dials = append(m.dials, peer)
	m.mu.Unlock()
	a, b := net.Pipe()
	b.Close()
	return newRefusingConn(a, m.replies[peer]), nil
}

// TestRelayNoRetryOnceAnswered: a refusal before the host has sent
// anything moves on to the next host; one after any of its response is
// not retried elsewhere, whether the response had begun reaching the
// client (cut short) or not (502).
func TestRelayNoRetryOnceAnswered(t *testing.T) {
	first, second := testID(0xa), testID(0xb)
	for _, tc := range []struct {
		name       string
		reply      string // what the first host sends before refusing
		wantDials  int
		wantStatus int
		wantBody   string
		wantCut    bool
	}{
		{"refused before any byte", "", 2, http.StatusOK, "ok", false},
		{"refused inside the headers", "HTTP/1.1 200 OK\r\nContent-", 1, http.StatusBadGateway, "", false},
		{"refused inside the body", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: one\n\n", 1, http.StatusOK, "data: one\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scriptedMesh{hosts: []identity.EndpointID{first, second}, replies: map[identity.EndpointID]string{
				first:  tc.reply,
				second: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			}}
			h := newHarness(t, Config{}, m)
			resp := h.post(t, "/v1/chat/completions", `{"model":"remote","messages":[{"role":"user","content":"x"}]}`)
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			m.mu.Lock()
			dials := len(m.dials)
			m.mu.Unlock()
			if dials != tc.wantDials || resp.StatusCode != tc.wantStatus {
				t.Fatalf("%d hosts dialled, status %d (%q); want %d, %d", dials, resp.StatusCode, got, tc.wantDials, tc.wantStatus)
			}
			if tc.wantBody != "" && string(got) != tc.wantBody {
				t.Fatalf("body %q, want %q", got, tc.wantBody)
			}
			if cut := err != nil; cut != tc.wantCut {
				t.Fatalf("reading the answer: %v; want it cut short: %v", err, tc.wantCut)
			}
		})
	}
}

// TestRefusedRecognisesMesh: refused finds mesh.ErrTunnelRefused, however
// wrapped, and nothing else.
func TestRefusedRecognisesMesh(t *testing.T) {
	if !refused(fmt.Errorf("read: %w", mesh.ErrTunnelRefused)) || !refused(tunnelRefused{}) {
		t.Fatal("a tunnel refusal not recognised")
	}
	if refused(errors.New("mesh: peer refused the HTTP tunnel")) || refused(context.DeadlineExceeded) {
		t.Fatal("another error taken for a refusal")
	}
}

// unreachableMesh fails every dial, as a node that is shutting down does.
type unreachableMesh struct{ hosts []identity.EndpointID }

func (m unreachableMesh) HostsOf(string) []identity.EndpointID { return m.hosts }

func (m unreachableMesh) DialHTTP(context.Context, identity.EndpointID) (net.Conn, error) {
	return nil, errors.New("mesh: node is not serving")
}

// TestRelayNoHostTook: when no host took the request (each unreachable or
// refusing the tunnel before any byte), the client gets 503 with
// Retry-After, since sending it again is safe; once a host answered
// anything, it is 502.
func TestRelayNoHostTook(t *testing.T) {
	a, b := testID(0xa), testID(0xb)
	for _, tc := range []struct {
		name  string
		mesh  Mesh
		want  int
		retry string
	}{
		{"every host unreachable", unreachableMesh{hosts: []identity.EndpointID{a, b}}, http.StatusServiceUnavailable, "1"},
		{"every host refused", &scriptedMesh{hosts: []identity.EndpointID{a, b}, replies: map[identity.EndpointID]string{}},
			http.StatusServiceUnavailable, "1"},
		{"a host answered part of a response", &scriptedMesh{hosts: []identity.EndpointID{a, b},
			replies: map[identity.EndpointID]string{a: "HTTP/1.1 200 OK\r\nContent-"}}, http.StatusBadGateway, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{}, tc.mesh)
			resp := h.post(t, "/v1/chat/completions", `{"model":"remote","messages":[{"role":"user","content":"x"}]}`)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || resp.Header.Get("Retry-After") != tc.retry {
				t.Fatalf("status %d, Retry-After %q (%s); want %d, %q", resp.StatusCode, resp.Header.Get("Retry-After"), body, tc.want, tc.retry)
			}
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "mesh_unreachable" {
				t.Fatalf("error body %s (%v)", body, err)
			}
		})
	}
}

// relayToHost starts two nodes over real QUIC: a host serving model as
// "remote-model" beside another model, "other" (so that a request naming
// no model is the host's to refuse), and a relay serving none, whose API
// it returns.
func relayToHost(t *testing.T, model *fakeModel) *httptest.Server {
	t.Helper()
	host, relay := meshNode(t), meshNode(t)
	regB := &fakeRegistry{self: testID(0xb), local: map[string]Model{"remote-model": model, "other": &fakeModel{pieces: []string{"wrong"}}}}
	serveMesh(t, New(Config{MeshAccess: anyPeer{}}, host.ID(), regB, nil, &fakeNode{}, nil, nil), host)
	waitServing(t, relay, host)
	m := &recordingMesh{node: relay, hosts: []identity.EndpointID{host.ID()}}
	regA := &fakeRegistry{self: relay.ID(), local: map[string]Model{}, remote: map[string][]identity.EndpointID{"remote-model": {host.ID()}}}
	apiA := httptest.NewServer(New(Config{}, relay.ID(), regA, m, &fakeNode{}, nil, nil).Handler())
	t.Cleanup(apiA.Close)
	return apiA
}

// TestRelayNamesTheSoleModel: a node that serves no model takes a request
// that names none (llama-server's clients send none) for the one model
// its mesh serves, and relays it naming that model, so that the host,
// which serves several, serves that one.
func TestRelayNamesTheSoleModel(t *testing.T) {
	apiA := relayToHost(t, &fakeModel{pieces: []string{"from", " B"}})
	resp, err := http.Post(apiA.URL+"/completion", "application/json", strings.NewReader(`{"prompt":"x","n_predict":4}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got struct {
		Content string `json:"content"`
		Model   string `json:"model"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != http.StatusOK || got.Content != "from B" || got.Model != "remote-model" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestRelayedProps: GET /props and GET /tokenizer_info for a model a peer
// hosts are answered by the peer, over real QUIC; named by no ?model=,
// the request is relayed naming the mesh's one model, so that the host,
// which serves several, describes that one.
func TestRelayedProps(t *testing.T) {
	apiA := relayToHost(t, &fakeModel{pieces: []string{"from", " B"}})
	for _, path := range []string{"/props", "/props?model=remote-model", "/tokenizer_info"} {
		resp, err := http.Get(apiA.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			ModelAlias string `json:"model_alias"`
		}
		ok := resp.StatusCode == http.StatusOK && json.Unmarshal(body, &got) == nil
		if path != "/tokenizer_info" {
			ok = ok && got.ModelAlias == "remote-model"
		}
		if !ok {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(apiA.URL + "/props?model=nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a model nobody serves: %d", resp.StatusCode)
	}
}

// TestRelayedRerank: a rerank request for a model a peer hosts is
// answered by the peer over real QUIC; one naming no model is relayed
// naming the mesh's one model.
func TestRelayedRerank(t *testing.T) {
	hostModel := &fakeModel{pieces: []string{"x"}}
	apiA := relayToHost(t, hostModel)
	for _, body := range []string{`{"model":"remote-model","query":"cat","documents":["zzz","a cat"]}`, `{"query":"cat","documents":["zzz","a cat"]}`} {
		resp, err := http.Post(apiA.URL+"/v1/rerank", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			Model   string `json:"model"`
			Results []struct {
				Index int `json:"index"`
			} `json:"results"`
		}
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusOK || got.Model != "remote-model" || len(got.Results) != 2 || got.Results[0].Index != 1 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	hostModel.mu.Lock() // the host's handler wrote it on a goroutine of its own
	n := len(hostModel.reranks)
	hostModel.mu.Unlock()
	if n != 2 {
		t.Fatalf("the host reranked %d requests, want 2", n)
	}
}
