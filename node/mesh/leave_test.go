package mesh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// gatedHead and gatedTail are what a gated API answers: the head at
// once, the tail (large enough to take many stream frames) once the gate
// opens.
var (
	gatedHead = "head\n"
	gatedTail = bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB
)

// gatedAPI serves n's HTTP tunnels with a handler whose GET /gated
// answers the head, then waits for open (or the request's end) before the
// tail: an answer held in flight, as a generation is.
func gatedAPI(t testing.TB, n *Node) (open func()) {
	gate := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, gatedHead)
		w.(http.Flusher).Flush()
		select {
		case <-gate:
			w.Write(gatedTail)
		case <-r.Context().Done():
		}
	})
	closed := false
	open = func() {
		if !closed {
			closed = true
			close(gate)
		}
	}
	serveHTTP(t, n, h)
	t.Cleanup(open) // before the server's cleanup, so that its handlers return
	return open
}

// heldAnswer is a GET /gated through a tunnel, its head read.
type heldAnswer struct {
	resp *http.Response
	body *bufio.Reader
}

func getGated(t *testing.T, from *Node, to identity.EndpointID) *heldAnswer {
	t.Helper()
	// A tunnel per request, closed with its answer, as node/api relays.
	hc := &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return from.DialHTTP(ctx, to) },
		DisableKeepAlives: true,
	}}
	resp, err := hc.Get("http://mesh/gated")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	if head, err := br.ReadString('\n'); err != nil || head != gatedHead {
		t.Fatalf("head of the held answer: %q, %v", head, err)
	}
	return &heldAnswer{resp, br}
}

// finish reads the rest of the answer and checks it is whole.
func (h *heldAnswer) finish(t *testing.T, what string) {
	t.Helper()
	rest, err := io.ReadAll(h.body)
	if err != nil {
		t.Fatalf("%s: reading the rest: %v (after %d bytes)", what, err, len(rest))
	}
	if !bytes.Equal(rest, gatedTail) {
		t.Fatalf("%s: %d bytes after the head, want the %d-byte tail", what, len(rest), len(gatedTail))
	}
}

// conns counts n's registered connections.
func conns(n *Node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nConns
}

// TestLeaveKeepsTunnels: a node that leaves while HTTP tunnels to it and
// from it are mid-answer is gone from its peer's tables at once (PeerLeft),
// and both answers still arrive whole; meanwhile the leaver takes no new
// tunnel or connection, nothing gossips over the connection kept, the
// same identity can rejoin, and the peer closes the kept connection once
// its tunnels are done.
func TestLeaveKeepsTunnels(t *testing.T) {
	checkLeaks(t)
	cfgA, cfgB := fastConfig(), fastConfig()
	keyA := newKey(t)
	a, b := startKey(t, cfgA, keyA), start(t, cfgB)
	openA, openB := gatedAPI(t, a.Node), gatedAPI(t, b.Node)
	if _, err := b.Dial(t.Context(), a.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	// A peer of the leaver's that never reads its PeerLeaving, as one the
	// message did not reach: it still gets to ask for a tunnel.
	rc := dialRaw(t, a.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the leaver to admit both", func() bool { return len(a.Peers()) == 2 })
	evB := b.Subscribe(t.Context(), 256)

	toA := getGated(t, b.Node, a.ID())   // relayed by a
	fromA := getGated(t, a.Node, b.ID()) // relayed by b

	if err := a.Leave(t.Context()); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := a.Leave(t.Context()); err != nil {
		t.Fatalf("Leave again: %v", err)
	}
	nextEvent(t, evB, PeerLeft, a.ID(), 5*time.Second)
	if hasPeer(b.Node, a.ID()) {
		t.Fatal("the leaver is still among the peer's peers")
	}
	idA := a.ID()
	if slices.ContainsFunc(b.RouteTable().GetEntries(), func(e *nodev1.RouteEntry) bool {
		return bytes.Equal(e.GetEndpointId(), idA[:])
	}) {
		t.Fatal("the leaver is still in the peer's route table")
	}
	if _, err := b.DialHTTP(t.Context(), a.ID()); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("new tunnel to the leaver: %v, want ErrUnknownPeer", err)
	}
	if _, err := a.DialHTTP(t.Context(), b.ID()); !errors.Is(err, ErrNotServing) {
		t.Fatalf("new tunnel from the leaver: %v, want ErrNotServing", err)
	}
	s := rc.open([]byte{byte(wire.StreamTunnelHTTP)})
	wantStreamCode(t, streamOutcome(t, s), StreamCodeTunnelUnavailable)
	c := start(t, fastConfig())
	if _, err := c.Dial(t.Context(), a.EndpointAddr()); err == nil {
		t.Fatal("the leaver admitted a new peer")
	}
	leaverHeard, _ := a.Peer(b.ID())

	// The same identity comes back while the old connection still carries
	// the tunnels.
	a2 := startKey(t, fastConfig(), keyA)
	if _, err := a2.Dial(t.Context(), b.EndpointAddr()); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	nextEvent(t, evB, PeerJoined, keyA.ID(), 5*time.Second)
	time.Sleep(3 * cfgB.GossipInterval) // gossip the kept connection must not carry
	if p, _ := a.Peer(b.ID()); !p.RTTMeasuredAt.Equal(leaverHeard.RTTMeasuredAt) {
		t.Fatal("the peer gossiped with the node that left")
	}

	openA()
	openB()
	toA.finish(t, "tunnel to the leaver")
	fromA.finish(t, "tunnel from the leaver")
	waitFor(t, 5*time.Second, "the peer to close the leaver's connection", func() bool { return conns(b.Node) == 1 })
	if !hasPeer(b.Node, keyA.ID()) {
		t.Fatal("the rejoined node was lost with the old connection")
	}
}

// TestLeaverCannotHoldConnection: a peer that says it is leaving and then
// never finishes its tunnel, nor closes, is gone from the tables at once,
// may open nothing more, and loses the connection after
// Timeouts.LeaveDrain, not before.
func TestLeaverCannotHoldConnection(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.LeaveDrain = 3 * time.Second
	// Shorter than the bound: the admission timer, armed when the
	// connection came, must leave a peer that was admitted alone.
	cfg.Timeouts.Admission = time.Second
	n := start(t, cfg)
	gatedAPI(t, n.Node)
	ev := n.Subscribe(t.Context(), 256)
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ev, PeerJoined, rc.id, 5*time.Second)

	s := rc.open([]byte{byte(wire.StreamTunnelHTTP)})
	io.WriteString(s, "GET /gated HTTP/1.1\r\nHost: mesh\r\n\r\n")
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(s)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the held answer's head: %v", err)
		}
		if line == gatedHead {
			break
		}
	}

	ls := rc.openFrame(wire.StreamPeerLeaving, &nodev1.PeerLeaving{PeerId: rc.id[:], Gen: wire.ProtocolGeneration})
	ls.Close()
	if err := streamOutcome(t, ls); err != nil {
		t.Fatalf("PeerLeaving not acknowledged: %v", err)
	}
	nextEvent(t, ev, PeerLeft, rc.id, 5*time.Second)
	if hasPeer(n.Node, rc.id) {
		t.Fatal("the leaver is still a peer")
	}
	s2 := rc.open([]byte{byte(wire.StreamTunnelHTTP)})
	wantStreamCode(t, streamOutcome(t, s2), StreamCodeNotAdmitted)
	if !rc.alive() {
		t.Fatal("the connection closed under a tunnel in flight, before the bound")
	}

	select {
	case <-rc.conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the leaver's connection is still open 10s after PeerLeaving, with a 3s bound")
	}
	var ae *quic.ApplicationError
	if err := context.Cause(rc.conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != CodeLeaving || !ae.Remote {
		t.Fatalf("connection closed with %v, want CodeLeaving from the node", err)
	}
	waitFor(t, 5*time.Second, "the connection to be forgotten", func() bool { return conns(n.Node) == 0 })
}

// TestTunnelOpenedBeforeLeaving: a tunnel a peer opens just before its
// PeerLeaving, on the same connection, is served whole: the receiver
// accepts the two streams in order, so the PeerLeaving neither closes the
// connection under the tunnel nor gets it refused as not admitted. Each
// round races the tunnel's handler against the PeerLeaving's; before the
// tunnel counted from its accept, about a third of the rounds were cut.
func TestTunnelOpenedBeforeLeaving(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	open := gatedAPI(t, n.Node)
	ev := n.Subscribe(t.Context(), 256)
	const rounds = 20
	type heldTunnel struct {
		s  interface{ SetReadDeadline(time.Time) error }
		br *bufio.Reader
	}
	var held []heldTunnel
	for i := range rounds {
		rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
		if _, err := rc.gossip(rc.frame()); err != nil {
			t.Fatal(err)
		}
		nextEvent(t, ev, PeerJoined, rc.id, 5*time.Second)
		s := rc.open([]byte{byte(wire.StreamTunnelHTTP)})
		io.WriteString(s, "GET /gated HTTP/1.1\r\nHost: mesh\r\nConnection: close\r\n\r\n")
		rc.openFrame(wire.StreamPeerLeaving, &nodev1.PeerLeaving{PeerId: rc.id[:], Gen: wire.ProtocolGeneration}).Close()
		nextEvent(t, ev, PeerLeft, rc.id, 5*time.Second)
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(s)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("round %d: the tunnel opened before PeerLeaving: %v", i, err)
			}
			if line == gatedHead {
				break
			}
		}
		held = append(held, heldTunnel{s, br})
	}
	open()
	for i, h := range held {
		// The tail, in chunks, then the end of the tunnel. The deadline
		// counts from here: the rounds before took as long as the machine
		// made them.
		h.s.SetReadDeadline(time.Now().Add(10 * time.Second))
		if rest, err := io.ReadAll(h.br); err != nil || len(rest) < len(gatedTail) {
			t.Fatalf("round %d: rest of the answer: %d bytes, %v", i, len(rest), err)
		}
	}
	waitFor(t, 15*time.Second, "the leavers' connections to close", func() bool { return conns(n.Node) == 0 })
}

// TestShutdownFlushesTunnels: a response the local API has finished
// writing when the host's Serve ends still reaches the peer whole (the
// shutdown waits up to Timeouts.TunnelFlush for the tunnel to end), and a
// tunnel that never ends does not hold the shutdown past that.
func TestShutdownFlushesTunnels(t *testing.T) {
	checkLeaks(t)
	// 480 KiB: many stream frames, yet within the stream's first
	// flow-control window, so that the API finishes writing it (and
	// closes) before the peer has read any of it.
	body := bytes.Repeat([]byte("flushed tunnel\n"), 1<<15)
	cfg := fastConfig()
	cfg.Timeouts.TunnelFlush = 5 * time.Second
	client, host := startHost(t, cfg)
	ln, err := host.ListenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	written := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer close(written)
		defer c.Close() // as the API closes an idle connection when it stops
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			t.Errorf("API: %v", err)
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		c.Write(body)
	}()
	resp, err := tunnelClient(client.Node, host.ID()).Get("http://mesh/large")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-written
	stopped := make(chan struct{})
	go func() { host.stop(t); close(stopped) }()
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("answer finished before the host stopped: %d of %d bytes, %v", len(got), len(body), err)
	}
	<-stopped

	// A tunnel held open by its API: the host stops after TunnelFlush.
	cfg = fastConfig()
	cfg.Timeouts.TunnelFlush = 200 * time.Millisecond
	host = start(t, cfg)
	gatedAPI(t, host.Node)
	if _, err := client.Dial(t.Context(), host.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	held := getGated(t, client.Node, host.ID())
	host.stop(t) // fails the test unless Serve returns within 10s
	if rest, err := io.ReadAll(held.body); err == nil {
		t.Fatalf("the held answer ended cleanly (%d bytes) though its host stopped mid-answer", len(rest))
	}
}

// TestLeaveWaitsForExchanges: a node that leaves while its own gossip to a
// peer awaits the reply sends its PeerLeaving only after the reply. Cut
// short, that exchange could reach the peer after the PeerLeaving, on a
// connection the peer had yet to attach, and admit the leaver again as a
// new peer (TestCleanShutdown failed once so under -race).
func TestLeaveWaitsForExchanges(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	// The node gossips with its new peer on schedule: hold that reply.
	st, s, _, err := rc.acceptFrame(5 * time.Second)
	if err != nil || st != wire.StreamGossip {
		t.Fatalf("first stream from the node: %v %v, want its gossip", st, err)
	}
	left := make(chan error, 1)
	go func() { left <- n.Leave(context.Background()) }()
	if st, _, _, err := rc.acceptFrame(300 * time.Millisecond); err == nil {
		t.Fatalf("a %v stream while the node's gossip awaited our reply", st)
	}
	if err := wire.WriteFrame(t.Context(), s, rc.frame()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	st, ls, body, err := rc.acceptFrame(5 * time.Second)
	if err != nil || st != wire.StreamPeerLeaving {
		t.Fatalf("after our reply: %v %v, want PeerLeaving", st, err)
	}
	if _, err := wire.DecodePeerLeaving(body); err != nil {
		t.Fatal(err)
	}
	ls.Close()
	if err := <-left; err != nil {
		t.Fatal(err)
	}
}

// TestLeaverAnswersGossipWithLeaving: a node that has left gossips with
// nobody; a peer that asks, on a connection its PeerLeaving did not go on,
// has the exchange refused and is told there that the node is leaving, so
// it drops the node as having left rather than as not answering.
func TestLeaverAnswersGossipWithLeaving(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	key := newKey(t)
	older := dialRawKey(t, n.EndpointAddr(), identity.ALPNMesh, key)
	if _, err := older.gossip(older.frame()); err != nil {
		t.Fatal(err)
	}
	// A second connection of the same peer: the newer is preferred, and
	// the PeerLeaving goes there.
	newer := dialRawKey(t, n.EndpointAddr(), identity.ALPNMesh, key)
	waitFor(t, 5*time.Second, "both connections attached", func() bool { return conns(n.Node) == 2 })
	go func() {
		for {
			st, s, _, err := newer.acceptFrame(5 * time.Second)
			if err != nil {
				return
			}
			if st == wire.StreamPeerLeaving {
				s.Close()
			}
		}
	}()
	if err := n.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	gs := older.openFrame(wire.StreamGossip, older.frame())
	gs.Close()
	st, ls, body, err := older.acceptFrame(5 * time.Second)
	if err != nil || st != wire.StreamPeerLeaving {
		t.Fatalf("on the other connection: %v %v, want PeerLeaving", st, err)
	}
	if _, err := wire.DecodePeerLeaving(body); err != nil {
		t.Fatal(err)
	}
	ls.Close()
	wantStreamCode(t, streamOutcome(t, gs), StreamCodeRejected)
}
