package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// fastConfig is a loopback node with every timer short, so that tests of
// gossip, failure detection and shutdown take a fraction of a second.
func fastConfig() Config {
	return Config{
		ListenAddr:     "127.0.0.1:0",
		Version:        "test",
		MeshID:         "test-mesh",
		GossipInterval: 300 * time.Millisecond,
		Timeouts: Timeouts{
			Handshake:    2 * time.Second,
			Idle:         3 * time.Second,
			KeepAlive:    500 * time.Millisecond,
			Admission:    5 * time.Second,
			StreamHeader: 2 * time.Second,
			Gossip:       2 * time.Second,
			Confirm:      time.Second,
			Leave:        time.Second,
			TunnelAccept: 2 * time.Second,
			TunnelIdle:   5 * time.Second,
			Redundant:    300 * time.Millisecond,
			RedialMin:    100 * time.Millisecond,
			RedialMax:    time.Second,
		},
	}
}

// slowDetection makes a node that notices a dead peer only by being told:
// long gossip interval and idle timeout.
func slowDetection(c Config) Config {
	c.GossipInterval = time.Minute
	c.Timeouts.Idle = time.Minute
	c.Timeouts.KeepAlive = 5 * time.Second
	return c
}

// testLogger logs a node's debug lines to the test as they come with
// MESH_TEST_LOG set; otherwise it keeps the last of them and prints them
// only if the test fails, so that a failure seen once in CI says what the
// nodes did.
func testLogger(t testing.TB) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	if os.Getenv("MESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(tbWriter{t}, opts))
	}
	r := &logRing{max: 2000}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's log (its last %d lines at most):\n%s", r.max, r.String())
		}
	})
	return slog.New(slog.NewTextHandler(r, opts))
}

// logRing keeps the last max lines written to it. The nodes' goroutines
// may write after the test has ended, which t.Log forbids.
type logRing struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (r *logRing) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == r.max {
		r.lines = r.lines[1:]
	}
	r.lines = append(r.lines, strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (r *logRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func newKey(t testing.TB) *identity.Key {
	t.Helper()
	k, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testNode is a served Node and how to stop it.
type testNode struct {
	*Node
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start serves a node until the test ends (or stop is called).
func start(t testing.TB, cfg Config) *testNode {
	t.Helper()
	return startKey(t, cfg, newKey(t))
}

// startKey is start with the node's key given.
func startKey(t testing.TB, cfg Config, key *identity.Key) *testNode {
	t.Helper()
	n, err := New(cfg, key, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { tn.done <- n.Serve(ctx) }()
	t.Cleanup(func() { tn.stop(t) })
	select {
	case <-n.Started():
	case <-time.After(5 * time.Second):
		t.Fatal("node not started after 5s")
	}
	return tn
}

// stop cancels Serve and waits for it to return; a no-op the second time.
func (tn *testNode) stop(t testing.TB) {
	t.Helper()
	tn.once.Do(func() {
		tn.cancel()
		select {
		case err := <-tn.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return within 10s of cancellation")
		}
	})
}

// kill stops the node without a word to its peers, as a crash would: no
// PeerLeaving, no CONNECTION_CLOSE, the socket simply goes quiet. The
// socket closes before anything else: a node that is stopping would refuse
// a connection whose handshake completed meanwhile with CodeLeaving, and a
// peer that saw that close last would take the node as having left, not
// died. Serve's error, if any, is the closed socket's.
func (tn *testNode) kill() {
	tn.Node.udp.Close()
	tn.once.Do(func() {
		tn.cancel()
		<-tn.done
	})
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func peerIDs(n *Node) []identity.EndpointID {
	var out []identity.EndpointID
	for _, p := range n.Peers() {
		out = append(out, p.ID)
	}
	return out
}

func hasPeer(n *Node, id identity.EndpointID) bool {
	_, ok := n.Peer(id)
	return ok
}

// checkLeaks fails the test if goroutines started during it outlive it.
// Register it first so that it runs after every other cleanup.
func checkLeaks(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				var b bytes.Buffer
				pprof.Lookup("goroutine").WriteTo(&b, 1)
				t.Errorf("%d goroutines at the start, %d after:\n%s", before, runtime.NumGoroutine(), b.String())
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// nextEvent waits for an event of kind about peer on ch.
func nextEvent(t testing.TB, ch <-chan Event, kind EventKind, peer identity.EndpointID, within time.Duration) Event {
	t.Helper()
	timeout := time.After(within)
	var seen []string // what came instead, for the failure's message
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event stream closed waiting for %v of %s; saw %v", kind, peer.Short(), seen)
			}
			if ev.Kind == kind && ev.Peer == peer {
				return ev
			}
			seen = append(seen, fmt.Sprintf("%v %s %q", ev.Kind, ev.Peer.Short(), ev.Reason))
		case <-timeout:
			t.Fatalf("no %v event for %s within %v; saw %v", kind, peer.Short(), within, seen)
		}
	}
}

// rawClient is a hand-driven peer: a QUIC connection with a node identity
// that speaks whatever bytes a test writes.
type rawClient struct {
	t    testing.TB
	key  *identity.Key
	id   identity.EndpointID
	tr   *quic.Transport
	conn *quic.Conn
}

func dialRaw(t testing.TB, to EndpointAddr, alpn string) *rawClient {
	t.Helper()
	return dialRawKey(t, to, alpn, newKey(t))
}

// dialRawKey is dialRaw under a given identity: a second connection of
// the same peer.
func dialRawKey(t testing.TB, to EndpointAddr, alpn string, key *identity.Key) *rawClient {
	t.Helper()
	rc, err := tryDialRaw(t, to, alpn, key)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// tryDialRaw is dialRawKey that hands back the dial's error.
func tryDialRaw(t testing.TB, to EndpointAddr, alpn string, key *identity.Key) (*rawClient, error) {
	t.Helper()
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() {
		tr.Close()
		udp.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := DialQUIC(ctx, tr, key, &quic.Config{MaxIdleTimeout: 10 * time.Second, KeepAlivePeriod: time.Second}, to.ID, alpn, to.Addrs)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return &rawClient{t: t, key: key, id: key.ID(), tr: tr, conn: conn}, nil
}

// dialRefused dials the node and wants the connection closed by it with
// code, and returns the close. The node closes a refused connection as
// soon as its handshake completes, so the close may reach the dialler
// before its dial returns: then the dial itself fails with it.
func dialRefused(t testing.TB, to EndpointAddr, alpn string, code quic.ApplicationErrorCode) *quic.ApplicationError {
	t.Helper()
	rc, err := tryDialRaw(t, to, alpn, newKey(t))
	if err == nil {
		rc.connClosedWith(code)
		err = context.Cause(rc.conn.Context())
	}
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || ae.ErrorCode != code || !ae.Remote {
		t.Fatalf("dial ended with %v, want the connection closed by the node with code %#x", err, code)
	}
	return ae
}

// announce is a valid self announcement for the raw client.
func (rc *rawClient) announce() *nodev1.PeerAnnouncement {
	return &nodev1.PeerAnnouncement{EndpointId: rc.id[:], Role: nodev1.NodeRole_WORKER, Version: proto.String("raw")}
}

func (rc *rawClient) frame(peers ...*nodev1.PeerAnnouncement) *nodev1.GossipFrame {
	return &nodev1.GossipFrame{Gen: wire.ProtocolGeneration, SenderId: rc.id[:], Peers: append([]*nodev1.PeerAnnouncement{rc.announce()}, peers...)}
}

// open opens a stream and writes b on it.
func (rc *rawClient) open(b []byte) *quic.Stream {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := rc.conn.OpenStreamSync(ctx)
	if err != nil {
		rc.t.Fatal(err)
	}
	if _, err := s.Write(b); err != nil {
		rc.t.Fatal(err)
	}
	return s
}

func (rc *rawClient) openFrame(st wire.StreamType, m proto.Message) *quic.Stream {
	rc.t.Helper()
	b, err := wire.AppendStreamOpen(nil, st, m)
	if err != nil {
		rc.t.Fatal(err)
	}
	return rc.open(b)
}

// gossip runs one exchange and returns the node's reply.
func (rc *rawClient) gossip(f *nodev1.GossipFrame) (*nodev1.GossipFrame, error) {
	rc.t.Helper()
	s := rc.openFrame(wire.StreamGossip, f)
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	body, err := wire.ReadFrame(ctx, s, nil)
	if err != nil {
		return nil, err
	}
	return wire.DecodeGossipFrame(body)
}

// acceptFrame takes the next stream the node opens and reads its type and
// first frame, within d.
func (rc *rawClient) acceptFrame(d time.Duration) (wire.StreamType, *quic.Stream, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := rc.conn.AcceptStream(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	st, err := wire.ReadStreamType(ctx, s)
	if err != nil {
		return 0, s, nil, err
	}
	body, err := wire.ReadFrame(ctx, s, nil)
	return st, s, body, err
}

// streamOutcome waits for the node to end the stream and returns how: nil
// for a clean end, else the error (a *quic.StreamError for a reset). The
// wait is a bound on a loaded machine, well past any deadline a test
// configures (a reset due at 3 s arrived after 3 s more once, under load).
func streamOutcome(t testing.TB, s *quic.Stream) error {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, s)
	return err
}

func wantStreamCode(t testing.TB, err error, code quic.StreamErrorCode) {
	t.Helper()
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != code || !se.Remote {
		t.Fatalf("stream ended with %v, want a reset by the node with code %#x", err, code)
	}
}

// connClosedWith waits for the node to close the raw connection and checks
// the code.
func (rc *rawClient) connClosedWith(code quic.ApplicationErrorCode) {
	rc.t.Helper()
	select {
	case <-rc.conn.Context().Done():
	case <-time.After(3 * time.Second):
		rc.t.Fatalf("connection still open, want it closed with %#x", code)
	}
	var ae *quic.ApplicationError
	if err := context.Cause(rc.conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != code || !ae.Remote {
		rc.t.Fatalf("connection closed with %v, want code %#x from the node", err, code)
	}
}

func (rc *rawClient) alive() bool { return rc.conn.Context().Err() == nil }

// rawServer listens on loopback as a hand-driven node: each mesh-llm/1
// connection to it is handed to serve, in turn.
func rawServer(t testing.TB, serve func(*quic.Conn)) EndpointAddr {
	t.Helper()
	key := newKey(t)
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := identity.ServerConfig(key, identity.ALPNMesh)
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsConf, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		tr.Close()
		udp.Close()
		<-done
	})
	return EndpointAddr{ID: key.ID(), Addrs: []netip.AddrPort{udp.LocalAddr().(*net.UDPAddr).AddrPort()}}
}

// freeUDPAddr is a loopback address with a UDP port nobody listens on.
func freeUDPAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}
