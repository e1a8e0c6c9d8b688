package node

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// certify makes a state dir whose node key ownerKey's owner has certified
// for an hour (node.ownership, as `meshcli auth sign-node` writes it).
func certify(t *testing.T, ownerKey *identity.Key) string {
	t.Helper()
	state := t.TempDir()
	nodeKey, _, err := identity.LoadOrCreateKey(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Save(filepath.Join(state, "node.ownership"), issueCert(t, ownerKey, nodeKey.ID(), time.Hour)); err != nil {
		t.Fatal(err)
	}
	return state
}

// issueCert is ownerKey's certificate for ep, issued a minute ago and
// valid for validFor from then (a negative validFor has expired).
func issueCert(t *testing.T, ownerKey *identity.Key, ep identity.EndpointID, validFor time.Duration) *nodev1.SignedNodeOwnership {
	t.Helper()
	issued := time.Now().Add(-time.Minute)
	if validFor < 0 {
		issued = time.Now().Add(2 * validFor)
	}
	c, err := owner.Issue(ownerKey, owner.Options{Endpoint: ep, IssuedAt: issued, ExpiresAt: issued.Add(max(validFor, -validFor))})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newOwner(t *testing.T) *identity.Key {
	t.Helper()
	k, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startFortunesHost starts a node that serves the fortunes model, with
// cfg (its API key, policy, state dir).
func startFortunesHost(t *testing.T, cfg Config) *Node {
	t.Helper()
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	host, _ := startNode(t, cfg)
	return host
}

// startRelay starts a node that serves only the reference engine, joined
// to host (state: its state dir, "" for a fresh one), and waits until it
// knows that host serves the fortunes model.
func startRelay(t *testing.T, host *Node, state string) *Node {
	t.Helper()
	relay, _ := startNode(t, Config{StateDir: state, Join: []string{host.invite}, Models: []string{ReferenceModel}})
	waitFor(t, "the relaying node to learn the host's model", func() bool {
		return len(relay.mesh.PeersHosting(fortunesModel)) > 0
	})
	return relay
}

const fortunesChat = `{"model":"` + fortunesModel + `","max_tokens":4,"messages":[{"role":"user","content":"Love is"}]}`

// apiAnswer is a response's status and, when it is an error, its OpenAI
// error object; else its usage.energy.
type apiAnswer struct {
	status int
	code   string
	msg    string
	energy json.RawMessage
}

func readAnswer(t *testing.T, resp *http.Response) apiAnswer {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Usage struct {
			Energy json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("status %d, body not JSON: %s", resp.StatusCode, b)
	}
	return apiAnswer{resp.StatusCode, v.Error.Code, v.Error.Message, v.Usage.Energy}
}

// wantServedBy checks a 200 whose receipt host sealed.
func wantServedBy(t *testing.T, a apiAnswer, host *Node, who string) {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%s: %d %s %q, want 200", who, a.status, a.code, a.msg)
	}
	var e struct {
		EnvelopeHex string `json:"envelope_hex"`
	}
	json.Unmarshal(a.energy, &e)
	env, _ := hex.DecodeString(e.EnvelopeHex)
	if _, err := receipt.Open(env, host.key.Public()); err != nil {
		t.Fatalf("%s: the answer's receipt is not the host's: %v", who, err)
	}
}

// wantDenied checks a 403 mesh_access_denied whose message says each of
// why.
func wantDenied(t *testing.T, a apiAnswer, who string, why ...string) {
	t.Helper()
	if a.status != http.StatusForbidden || a.code != "mesh_access_denied" {
		t.Fatalf("%s: %d %s %q, want 403 mesh_access_denied", who, a.status, a.code, a.msg)
	}
	for _, w := range why {
		if !strings.Contains(a.msg, w) {
			t.Fatalf("%s: message %q does not say %q", who, a.msg, w)
		}
	}
}

// TestAttackMeshStrangerRelayed: a host that asks its clients for an API
// key, with the default mesh policy, refuses a request relayed by a
// stranger the mesh admitted (it answered 200 before the policy), and the
// relaying node hands its client the host's 403; peers certified by the
// host's own owner, or by an owner in its control.owner_keys, are served.
func TestAttackMeshStrangerRelayed(t *testing.T) {
	ownerKey, otherOwner := newOwner(t), newOwner(t)
	host := startFortunesHost(t, Config{StateDir: certify(t, ownerKey), APIKey: "host-key",
		Control: ControlConfig{OwnerKeys: []string{owner.KeyOf(otherOwner).String()}}})
	if host.cfg.API.MeshAccess != MeshAccessOwner {
		t.Fatalf("a host with an API key defaults to mesh_access %q, want owner", host.cfg.API.MeshAccess)
	}

	stranger := startRelay(t, host, "")
	wantDenied(t, readAnswer(t, post(t, stranger, "/v1/chat/completions", fortunesChat)), "the stranger's relayed request",
		`mesh_access = "owner"`, stranger.key.ID().String(), "announces no ownership certificate")

	friend := startRelay(t, host, certify(t, ownerKey))
	wantServedBy(t, readAnswer(t, post(t, friend, "/v1/chat/completions", fortunesChat)), host, "a peer of the host's owner")
	colleague := startRelay(t, host, certify(t, otherOwner))
	wantServedBy(t, readAnswer(t, post(t, colleague, "/v1/chat/completions", fortunesChat)), host, "a peer of a trusted owner key")

	// The host's own clients still need the key.
	resp := post(t, host, "/v1/chat/completions", fortunesChat)
	if a := readAnswer(t, resp); a.status != http.StatusUnauthorized {
		t.Fatalf("the host's API without its key: %d, want 401", a.status)
	}
}

// rawPeer joins host as a bare mesh node with key that gossips cert as its
// ownership certificate, and returns an HTTP client whose every request
// it tunnels straight to host.
func rawPeer(t *testing.T, host *Node, key *identity.Key, cert *nodev1.SignedNodeOwnership) *http.Client {
	t.Helper()
	mn, err := mesh.New(mesh.Config{
		ListenAddr: "127.0.0.1:0",
		Self: func() *nodev1.PeerAnnouncement {
			return &nodev1.PeerAnnouncement{Role: nodev1.NodeRole_WORKER, OwnerAttestation: cert}
		},
	}, key, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mn.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the raw peer to join the host", func() bool {
		_, err := mn.Dial(t.Context(), host.mesh.EndpointAddr())
		return err == nil
	})
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return mn.DialHTTP(ctx, host.key.ID()) },
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// tunnelled sends the fortunes chat straight through a raw peer's tunnel,
// with extra headers.
func tunnelled(t *testing.T, c *http.Client, header ...string) apiAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://meshnode.internal/v1/chat/completions", strings.NewReader(fortunesChat))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, resp)
}

// TestAttackMeshForgedOwnership: under mesh_access = "owner", what counts
// is a certificate bound to the QUIC identity that presents it: a peer
// gossiping a trusted peer's certificate, and naming that peer in
// X-Meshnode-Forwarded-By, is refused; so are a certificate of an owner
// the host does not trust and an expired one of its own owner. The same
// raw peer with a certificate of its own is served.
func TestAttackMeshForgedOwnership(t *testing.T) {
	ownerKey := newOwner(t)
	host := startFortunesHost(t, Config{StateDir: certify(t, ownerKey), APIKey: "host-key"})
	friend := newOwner(t) // a node key
	friendCert := issueCert(t, ownerKey, friend.ID(), time.Hour)

	thief := newOwner(t)
	wantDenied(t, tunnelled(t, rawPeer(t, host, thief, friendCert), "X-Meshnode-Forwarded-By", friend.ID().String(), "Authorization", "Bearer host-key"),
		"a peer replaying another's certificate", thief.ID().String(), "bound to another endpoint")

	outsider := newOwner(t)
	wantDenied(t, tunnelled(t, rawPeer(t, host, outsider, issueCert(t, newOwner(t), outsider.ID(), time.Hour))),
		"a peer of an untrusted owner", "owner is not trusted")

	lapsed := newOwner(t)
	wantDenied(t, tunnelled(t, rawPeer(t, host, lapsed, issueCert(t, ownerKey, lapsed.ID(), -time.Hour))),
		"a peer with an expired certificate", "expired")

	wantServedBy(t, tunnelled(t, rawPeer(t, host, friend, friendCert)), host, "the certified peer itself")
}

// TestMeshAccessAnyServesEveryone: mesh_access = "any" serves a stranger's
// relayed request even on a host with an API key.
func TestMeshAccessAnyServesEveryone(t *testing.T) {
	host := startFortunesHost(t, Config{APIKey: "host-key", API: APIConfig{MeshAccess: MeshAccessAny}})
	stranger := startRelay(t, host, "")
	wantServedBy(t, readAnswer(t, post(t, stranger, "/v1/chat/completions", fortunesChat)), host, "a stranger under any")
}

// TestMeshAccessNoneRefusesEveryone: mesh_access = "none" refuses even a
// peer of the host's own owner, and says so.
func TestMeshAccessNoneRefusesEveryone(t *testing.T) {
	ownerKey := newOwner(t)
	host := startFortunesHost(t, Config{StateDir: certify(t, ownerKey), API: APIConfig{MeshAccess: MeshAccessNone}})
	friend := startRelay(t, host, certify(t, ownerKey))
	wantDenied(t, readAnswer(t, post(t, friend, "/v1/chat/completions", fortunesChat)), "the owner's own peer under none",
		`mesh_access = "none"`)
}

// lockedBuffer is a log sink tests read while the node writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMeshAccessOwnerWithoutTrustWarns: a node with an API key (so
// mesh_access = "owner") that trusts no owner warns at start that it will
// refuse every peer, and does, saying why.
func TestMeshAccessOwnerWithoutTrustWarns(t *testing.T) {
	var logs lockedBuffer
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	host, _ := startNodeWith(t, Config{APIKey: "host-key"}, func(n *Node) {
		n.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	if !strings.Contains(logs.String(), `level=WARN msg="api.mesh_access is \"owner\" but this node trusts no owner`) {
		t.Fatalf("no warning that every peer will be refused; the log:\n%s", logs.String())
	}
	peer := startRelay(t, host, certify(t, newOwner(t)))
	wantDenied(t, readAnswer(t, post(t, peer, "/v1/chat/completions", fortunesChat)), "a certified peer of a host that trusts no owner",
		"trusts no owner")
}

// TestMeshAccessPolicy: each policy's decision, and why it refuses.
func TestMeshAccessPolicy(t *testing.T) {
	ownerKey := newOwner(t)
	trusted := owner.NewTrust(owner.KeyOf(ownerKey))
	peers := map[identity.EndpointID]*nodev1.PeerAnnouncement{}
	announce := func(cert func(ep identity.EndpointID) *nodev1.SignedNodeOwnership) identity.EndpointID {
		ep := newOwner(t).ID()
		peers[ep] = &nodev1.PeerAnnouncement{OwnerAttestation: cert(ep)}
		return ep
	}
	certifiedCert := issueCert(t, ownerKey, newOwner(t).ID(), time.Hour)
	certified := identity.EndpointID(certifiedCert.NodeEndpointId)
	peers[certified] = &nodev1.PeerAnnouncement{OwnerAttestation: certifiedCert}
	uncertified := announce(func(identity.EndpointID) *nodev1.SignedNodeOwnership { return nil })
	replayer := announce(func(identity.EndpointID) *nodev1.SignedNodeOwnership { return certifiedCert })
	untrusted := announce(func(ep identity.EndpointID) *nodev1.SignedNodeOwnership {
		return issueCert(t, newOwner(t), ep, time.Hour)
	})
	expired := announce(func(ep identity.EndpointID) *nodev1.SignedNodeOwnership {
		return issueCert(t, ownerKey, ep, -time.Hour)
	})
	unknown := newOwner(t).ID()
	lookup := func(id identity.EndpointID) (*nodev1.PeerAnnouncement, bool) { a, ok := peers[id]; return a, ok }

	for _, tt := range []struct {
		name   string
		policy string
		trust  *owner.Trust
		peer   identity.EndpointID
		want   string // "" for served, else part of the reason
		is     error  // what the refusal wraps, when it is owner's
	}{
		{"any serves a stranger", MeshAccessAny, owner.NewTrust(), unknown, "", nil},
		{"none refuses a certified peer", MeshAccessNone, trusted, certified, `mesh_access = "none"`, nil},
		{"owner serves a certified peer", MeshAccessOwner, trusted, certified, "", nil},
		{"owner with no trust", MeshAccessOwner, owner.NewTrust(), certified, "trusts no owner", nil},
		{"owner, a peer not admitted", MeshAccessOwner, trusted, unknown, "not an admitted member", nil},
		{"owner, no certificate", MeshAccessOwner, trusted, uncertified, "announces no ownership certificate", nil},
		{"owner, another's certificate", MeshAccessOwner, trusted, replayer, replayer.String(), owner.ErrWrongEndpoint},
		{"owner, an untrusted owner", MeshAccessOwner, trusted, untrusted, untrusted.String(), owner.ErrUntrusted},
		{"owner, an expired certificate", MeshAccessOwner, trusted, expired, expired.String(), owner.ErrExpired},
		{"an unknown policy", "friends", trusted, certified, `policy "friends" is unknown`, nil},
	} {
		trust := tt.trust
		m := &meshAccess{policy: tt.policy, trust: func() *owner.Trust { return trust }, peer: lookup, now: time.Now}
		err := m.AllowPeer(tt.peer)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused (%v), want served", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tt.name, err, tt.want)
		case tt.is != nil && !errors.Is(err, tt.is):
			t.Errorf("%s: %v does not wrap %v", tt.name, err, tt.is)
		}
	}
}
