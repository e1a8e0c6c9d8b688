package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/node/identity"
)

// onlyPeer is a mesh access policy that serves one peer and records whom
// it was asked about.
type onlyPeer struct {
	allowed identity.EndpointID
	mu      sync.Mutex
	asked   []identity.EndpointID
}

func (p *onlyPeer) AllowPeer(peer identity.EndpointID) error {
	p.mu.Lock()
	p.asked = append(p.asked, peer)
	p.mu.Unlock()
	if peer != p.allowed {
		return fmt.Errorf(`mesh_access = "test": peer %s is not the one allowed`, peer.Short())
	}
	return nil
}

// meshError posts a chat request to a mesh handler server with extra
// headers and returns the status and the error code, if any.
func meshError(t *testing.T, url string, header ...string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(b, &e)
	if resp.StatusCode != http.StatusOK && e.Error.Type == "" {
		t.Fatalf("status %d without an OpenAI error body: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, e.Error.Code, e.Error.Message
}

// TestAttackMeshPeerRefused: a tunnelled request from a peer the node's
// mesh access policy refuses gets 403 mesh_access_denied with the
// policy's reason, and the model never runs; so does every tunnelled
// request when the node has no policy at all, and one that reaches the
// mesh handler without a peer (not through the mesh's listener).
func TestAttackMeshPeerRefused(t *testing.T) {
	friend, stranger := testID(0xf), testID(0x5)
	policy := &onlyPeer{allowed: friend}
	h := newHarness(t, Config{APIKey: "sekret", MeshAccess: policy}, nil)

	status, code, msg := meshError(t, meshServer(t, h.srv, stranger).URL)
	if status != http.StatusForbidden || code != "mesh_access_denied" || !strings.Contains(msg, "not the one allowed") {
		t.Fatalf("a refused peer's request: %d %s %q, want 403 mesh_access_denied with the policy's reason", status, code, msg)
	}
	h.model.mu.Lock()
	ran := len(h.model.calls)
	h.model.mu.Unlock()
	if ran != 0 {
		t.Fatal("the model ran for a refused peer")
	}
	if status, _, _ := meshError(t, meshServer(t, h.srv, friend).URL); status != http.StatusOK {
		t.Fatalf("the allowed peer's request: %d, want 200 without the API key", status)
	}

	open := newHarness(t, Config{}, nil) // no MeshAccess
	status, code, msg = meshError(t, meshServer(t, open.srv, friend).URL)
	if status != http.StatusForbidden || code != "mesh_access_denied" || !strings.Contains(msg, "no policy") {
		t.Fatalf("a node without a policy: %d %s %q, want 403 mesh_access_denied", status, code, msg)
	}

	bare := httptest.NewServer(h.srv.MeshHandler()) // no peer on its connections
	defer bare.Close()
	status, code, msg = meshError(t, bare.URL)
	if status != http.StatusForbidden || code != "mesh_access_denied" || !strings.Contains(msg, "peer that sent it is unknown") {
		t.Fatalf("a request with no peer: %d %s %q, want 403 mesh_access_denied", status, code, msg)
	}
}

// TestAttackForwardedHeaderIsNotIdentity: the peer a policy judges is the
// one the connection proved, whatever X-Meshnode-Forwarded-By claims; the
// handlers behind see the proven id in that header.
func TestAttackForwardedHeaderIsNotIdentity(t *testing.T) {
	friend, stranger := testID(0xf), testID(0x5)
	policy := &onlyPeer{allowed: friend}
	h := newHarness(t, Config{MeshAccess: policy}, nil)
	status, code, _ := meshError(t, meshServer(t, h.srv, stranger).URL, ForwardedHeader, friend.String())
	if status != http.StatusForbidden || code != "mesh_access_denied" {
		t.Fatalf("a stranger naming a trusted peer in %s: %d %s, want 403", ForwardedHeader, status, code)
	}
	policy.mu.Lock()
	asked := policy.asked
	policy.mu.Unlock()
	if len(asked) != 1 || asked[0] != stranger {
		t.Fatalf("the policy was asked about %v, want only the connection's peer %s", asked, stranger.Short())
	}

	seen := make(chan string, 1)
	mh := newHarness(t, Config{MeshAccess: anyPeer{}}, nil).srv.MeshHandler()
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mh.ServeHTTP(w, r)
		seen <- r.Header.Get(ForwardedHeader)
	}))
	hs.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, meshPeerKey{}, stranger)
	}
	hs.Start()
	defer hs.Close()
	meshError(t, hs.URL, ForwardedHeader, friend.String())
	if got := <-seen; got != stranger.String() {
		t.Fatalf("handlers saw %s = %q, want the proven peer %s", ForwardedHeader, got, stranger)
	}
}

// TestAttackRelayForwardsAPIKey: a relaying node never passes its client's
// key to the host, in Authorization or in Anthropic's x-api-key (the key
// is for this node alone, and a host must not learn it), and marks the
// request relayed by itself.
func TestAttackRelayForwardsAPIKey(t *testing.T) {
	hostID := testID(0xb)
	got := make(chan http.Header, 1)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
	}))
	defer host.Close()
	relay := newHarness(t, Config{APIKey: "client-secret"}, &fakeMesh{
		hosts:   map[string][]identity.EndpointID{"remote": {hostID}},
		targets: map[identity.EndpointID]string{hostID: host.Listener.Addr().String()},
	})
	// The key as OpenAI's clients send it, and as Anthropic's do.
	for _, tc := range []struct{ path, body, header, value string }{
		{"/v1/chat/completions", `{"model":"remote","messages":[{"role":"user","content":"x"}]}`, "Authorization", "Bearer client-secret"},
		{"/v1/messages", `{"model":"remote","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "X-Api-Key", "client-secret"},
	} {
		resp := relay.post(t, tc.path, tc.body, tc.header, tc.value)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: relayed request: %d", tc.path, resp.StatusCode)
		}
		var hdr http.Header
		select {
		case hdr = <-got:
		default:
			t.Fatalf("%s: the request never reached the host", tc.path)
		}
		if a := hdr.Values(tc.header); len(a) != 0 {
			t.Fatalf("%s: the host received %s %q", tc.path, tc.header, a)
		}
		if f := hdr.Get(ForwardedHeader); f != testID(1).String() {
			t.Fatalf("%s: %s = %q, want the relaying node's id", tc.path, ForwardedHeader, f)
		}
		if strings.Contains(fmt.Sprint(hdr), "client-secret") {
			t.Fatalf("%s: the client's key reached the host in some header", tc.path)
		}
	}
}

// TestRelayPastRefusingHost: a host whose mesh access policy refuses this
// node served nothing, so the relay asks the model's next host; when every
// host refuses, the client gets the last refusal.
func TestRelayPastRefusingHost(t *testing.T) {
	idA, idStrict, idOpen := testID(0xa), testID(0xc), testID(0xb)
	strict := newHarness(t, Config{MeshAccess: &onlyPeer{allowed: testID(0xee)}}, nil)
	open := newHarness(t, Config{MeshAccess: anyPeer{}}, nil)
	relay := func(hosts ...identity.EndpointID) (int, string) {
		t.Helper()
		m := &fakeMesh{
			hosts: map[string][]identity.EndpointID{"tiny": hosts},
			targets: map[identity.EndpointID]string{
				idStrict: meshServer(t, strict.srv, idA).Listener.Addr().String(),
				idOpen:   meshServer(t, open.srv, idA).Listener.Addr().String(),
			},
		}
		reg := &fakeRegistry{self: idA, local: map[string]Model{}, remote: map[string][]identity.EndpointID{"tiny": hosts}}
		api := httptest.NewServer(New(Config{}, idA, reg, m, &fakeNode{}, nil, nil).Handler())
		defer api.Close()
		resp, err := http.Post(api.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := relay(idStrict, idOpen); status != http.StatusOK || !strings.Contains(body, "Hello, world!") {
		t.Fatalf("a refusing host, then an open one: %d %s", status, body)
	}
	if status, body := relay(idStrict); status != http.StatusForbidden || !strings.Contains(body, "mesh_access_denied") {
		t.Fatalf("only a refusing host: %d %s", status, body)
	}
}
