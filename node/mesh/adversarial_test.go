package mesh

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// TestQuarantine: before its gossip, a peer may open only GOSSIP and
// ROUTE_REQUEST. Anything else is reset while the connection survives, and
// valid gossip afterwards admits it.
func TestQuarantine(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	other := newKey(t).ID()
	for _, tc := range []struct {
		name string
		open func() []byte
	}{
		{"tunnel map", func() []byte {
			b, _ := wire.AppendStreamOpen(nil, wire.StreamTunnelMap, &nodev1.TunnelMap{OwnerPeerId: rc.id[:]})
			return b
		}},
		{"http tunnel", func() []byte { return []byte{byte(wire.StreamTunnelHTTP), 'G', 'E', 'T', ' '} }},
		{"peer down", func() []byte {
			b, _ := wire.AppendStreamOpen(nil, wire.StreamPeerDown, &nodev1.PeerDown{PeerId: other[:], Gen: 1})
			return b
		}},
		{"peer leaving", func() []byte {
			b, _ := wire.AppendStreamOpen(nil, wire.StreamPeerLeaving, &nodev1.PeerLeaving{PeerId: rc.id[:], Gen: 1})
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rc.open(tc.open())
			wantStreamCode(t, streamOutcome(t, s), StreamCodeNotAdmitted)
			if !rc.alive() {
				t.Fatal("connection closed; quarantine must keep it open for gossip")
			}
		})
	}
	if len(n.Peers()) != 0 {
		t.Fatal("a quarantined peer is in the table")
	}
	reply, err := rc.gossip(rc.frame())
	if err != nil {
		t.Fatalf("gossip after the refused streams: %v", err)
	}
	if got := identity.EndpointID(reply.GetSenderId()); got != n.ID() || reply.GetPeers()[0].GetMeshId() != "test-mesh" {
		t.Errorf("reply from %s, self entry %v", got.Short(), reply.GetPeers()[0])
	}
	waitFor(t, 2*time.Second, "admission", func() bool { return hasPeer(n.Node, rc.id) })
	// Admitted now: an HTTP tunnel is served (and refused only because this
	// node has no HTTP target).
	s := rc.open([]byte{byte(wire.StreamTunnelHTTP)})
	wantStreamCode(t, streamOutcome(t, s), StreamCodeTunnelUnavailable)
}

// TestUnsupportedStreams: stream types this node does not serve are reset
// as unsupported, even for an admitted peer; unknown bytes count as strikes.
func TestUnsupportedStreams(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	for _, st := range []byte{0x02, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0xff} {
		s := rc.open([]byte{st})
		wantStreamCode(t, streamOutcome(t, s), StreamCodeUnsupported)
	}
	if !rc.alive() {
		t.Fatal("connection closed")
	}
}

// TestBadGossip: frames that break the protocol's rules do not admit, and
// the node closes the connection with CodeProtocol.
func TestBadGossip(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	for _, tc := range []struct {
		name  string
		frame func(rc *rawClient) *nodev1.GossipFrame
	}{
		{"wrong sender_id", func(rc *rawClient) *nodev1.GossipFrame {
			f := rc.frame()
			other := newKey(t).ID()
			f.SenderId = other[:]
			return f
		}},
		{"sender_id of the node itself", func(rc *rawClient) *nodev1.GossipFrame {
			f := rc.frame()
			id := n.ID()
			f.SenderId = id[:]
			return f
		}},
		{"gen 2", func(rc *rawClient) *nodev1.GossipFrame {
			f := rc.frame()
			f.Gen = 2
			return f
		}},
		{"gen 0", func(rc *rawClient) *nodev1.GossipFrame {
			f := rc.frame()
			f.Gen = 0
			return f
		}},
		{"short sender_id", func(rc *rawClient) *nodev1.GossipFrame {
			f := rc.frame()
			f.SenderId = rc.id[:31]
			return f
		}},
		{"short endpoint_id", func(rc *rawClient) *nodev1.GossipFrame {
			return rc.frame(&nodev1.PeerAnnouncement{EndpointId: make([]byte, 16)})
		}},
		{"HOST without http_port", func(rc *rawClient) *nodev1.GossipFrame {
			f := rc.frame()
			f.Peers[0].Role = nodev1.NodeRole_HOST
			return f
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
			if reply, err := rc.gossip(tc.frame(rc)); err == nil {
				t.Fatalf("node answered a bad frame with %v", reply)
			}
			rc.connClosedWith(CodeProtocol)
			if hasPeer(n.Node, rc.id) {
				t.Fatal("sender admitted")
			}
		})
	}
	if got := len(n.Peers()); got != 0 {
		t.Fatalf("%d peers after bad gossip only", got)
	}
}

// TestOversizeFrame: a length prefix over 8 MiB is refused on sight; the
// node does not wait for (or allocate) the body.
func TestOversizeFrame(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	for _, st := range []wire.StreamType{wire.StreamGossip, wire.StreamRouteRequest} {
		rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
		hdr := binary.LittleEndian.AppendUint32([]byte{byte(st)}, wire.MaxControlFrameBytes+1)
		rc.open(hdr) // no body follows: a node reading it would hang
		rc.connClosedWith(CodeProtocol)
	}
	// The node is unharmed.
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatalf("gossip after oversize frames: %v", err)
	}
}

// TestForgedPeerLeaving: a PeerLeaving naming anyone but its sender is
// refused and changes nothing.
func TestForgedPeerLeaving(t *testing.T) {
	checkLeaks(t)
	a := start(t, fastConfig())
	b := start(t, fastConfig())
	if _, err := a.Dial(t.Context(), b.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, a.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	events := a.Subscribe(t.Context(), 256)
	bid := b.ID()
	s := rc.openFrame(wire.StreamPeerLeaving, &nodev1.PeerLeaving{PeerId: bid[:], Gen: 1})
	wantStreamCode(t, streamOutcome(t, s), StreamCodeRejected)
	if !hasPeer(a.Node, b.ID()) || !hasPeer(a.Node, rc.id) {
		t.Fatalf("peers after a forged PeerLeaving: %v", peerIDs(a.Node))
	}
	select {
	case ev := <-events:
		if ev.Kind == PeerLeft || ev.Kind == PeerDown {
			t.Fatalf("event %v for %s after a forged PeerLeaving", ev.Kind, ev.Peer.Short())
		}
	case <-time.After(100 * time.Millisecond):
	}
	// The genuine article removes the sender, and only it.
	s = rc.openFrame(wire.StreamPeerLeaving, &nodev1.PeerLeaving{PeerId: rc.id[:], Gen: 1})
	// The node acknowledges, or has already closed the connection as
	// leaving: the stream can report that before the connection does.
	var ae *quic.ApplicationError
	if err := streamOutcome(t, s); err != nil && !(errors.As(err, &ae) && ae.Remote && ae.ErrorCode == CodeLeaving) {
		t.Fatalf("genuine PeerLeaving: %v", err)
	}
	waitFor(t, 2*time.Second, "the leaver dropped", func() bool { return !hasPeer(a.Node, rc.id) })
	if !hasPeer(a.Node, b.ID()) {
		t.Fatal("B dropped by someone else's PeerLeaving")
	}
}

// TestPeerDownReports: a PeerDown about a live peer does not evict it, one
// naming the receiver is ignored, and a true one evicts the dead peer after
// the receiver's own check, long before the receiver would have noticed
// alone.
func TestPeerDownReports(t *testing.T) {
	checkLeaks(t)
	a := start(t, slowDetection(fastConfig()))
	b := start(t, fastConfig())
	c := start(t, fastConfig())
	for _, x := range []*testNode{b, c} {
		if _, err := a.Dial(t.Context(), x.EndpointAddr()); err != nil {
			t.Fatal(err)
		}
	}
	rc := dialRaw(t, a.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	events := a.Subscribe(t.Context(), 256)
	report := func(id identity.EndpointID) {
		t.Helper()
		s := rc.openFrame(wire.StreamPeerDown, &nodev1.PeerDown{PeerId: id[:], Gen: 1})
		s.Close()
		if err := streamOutcome(t, s); err != nil {
			t.Fatalf("PeerDown not accepted: %v", err)
		}
	}

	report(a.ID()) // about the receiver itself
	report(b.ID()) // a lie: B is fine
	waitFor(t, 5*time.Second, "A to check on B", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		p := a.peers[b.ID()]
		return p == nil || p.probes > 0
	})
	if !hasPeer(a.Node, b.ID()) {
		t.Fatal("A evicted live B on a false PeerDown")
	}
	for len(events) > 0 {
		if ev := <-events; ev.Kind == PeerDown || ev.Kind == PeerLeft {
			t.Fatalf("event %v for %s after false reports", ev.Kind, ev.Peer.Short())
		}
	}

	c.kill()
	report(c.ID())
	ev := nextEvent(t, events, PeerDown, c.ID(), 5*time.Second)
	if hasPeer(a.Node, c.ID()) {
		t.Fatal("C still in the table after its PeerDown event")
	}
	t.Logf("C evicted: %s", ev.Reason)
	if !hasPeer(a.Node, b.ID()) {
		t.Fatal("B lost along with C")
	}
}

// TestUnknownFieldsRelayed: fields a newer peer adds survive our relaying
// of its announcement; and what we relay carries our direct latency to it.
func TestUnknownFieldsRelayed(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	newer := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	f := newer.frame()
	unknown := protowire.AppendString(protowire.AppendTag(nil, 999, protowire.BytesType), "from the future")
	f.Peers[0].ProtoReflect().SetUnknown(unknown)
	if _, err := newer.gossip(f); err != nil {
		t.Fatal(err)
	}
	observer := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	var relayed *nodev1.PeerAnnouncement
	waitFor(t, 3*time.Second, "the newer peer relayed with a measured latency", func() bool {
		reply, err := observer.gossip(observer.frame())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range reply.GetPeers() {
			if identity.EndpointID(a.GetEndpointId()) == newer.id {
				relayed = a
			}
		}
		return relayed != nil && relayed.GetLatencySource() == nodev1.LatencySource_LATENCY_SOURCE_DIRECT
	})
	if got := relayed.ProtoReflect().GetUnknown(); string(got) != string(unknown) {
		t.Errorf("unknown fields relayed as %q, want %q", got, unknown)
	}
	nid := n.ID()
	if string(relayed.GetLatencyObserverId()) != string(nid[:]) || relayed.RttMs == nil || relayed.LatencyAgeMs == nil {
		t.Errorf("relayed latency fields: rtt %v observer %x age %v", relayed.RttMs, relayed.GetLatencyObserverId(), relayed.LatencyAgeMs)
	}
	if relayed.GetVersion() != "raw" || relayed.MeshId != nil {
		t.Errorf("relayed announcement: %v", relayed)
	}
}

// TestTunnelMap: an admitted peer's own TunnelMap is kept; one claiming
// another owner is refused.
func TestTunnelMap(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	target := newKey(t).ID()
	good := &nodev1.TunnelMap{OwnerPeerId: rc.id[:], Entries: []*nodev1.TunnelEntry{{TargetPeerId: target[:], TunnelPort: 50001}}}
	s := rc.openFrame(wire.StreamTunnelMap, good)
	s.Close()
	if err := streamOutcome(t, s); err != nil {
		t.Fatalf("TunnelMap: %v", err)
	}
	p, _ := n.Peer(rc.id)
	if !proto.Equal(p.TunnelMap, good) {
		t.Fatalf("stored tunnel map %v, want %v", p.TunnelMap, good)
	}
	forged := &nodev1.TunnelMap{OwnerPeerId: target[:]}
	s = rc.openFrame(wire.StreamTunnelMap, forged)
	wantStreamCode(t, streamOutcome(t, s), StreamCodeRejected)
	if p, _ := n.Peer(rc.id); !proto.Equal(p.TunnelMap, good) {
		t.Fatalf("tunnel map changed by a forged one: %v", p.TunnelMap)
	}
	// A node-to-node TunnelMap lands the same way.
	m := start(t, fastConfig())
	if _, err := m.Dial(t.Context(), n.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	if err := m.SendTunnelMap(t.Context(), n.ID(), good.Entries); err != nil {
		t.Fatal(err)
	}
	if p, _ := n.Peer(m.ID()); len(p.TunnelMap.GetEntries()) != 1 {
		t.Fatalf("tunnel map from a node: %v", p.TunnelMap)
	}
}

// TestSendHonoursCancel: a one-way send that the peer never acknowledges
// ends when its context is cancelled, deadline or not.
func TestSendHonoursCancel(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// The raw peer answers gossip, so that the connection stays up,
		// and reads the TunnelMap without ever acknowledging it.
		defer cancel()
		for {
			s, err := rc.conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			st, err := wire.ReadStreamType(ctx, s)
			if err != nil {
				return
			}
			if _, err := wire.ReadFrame(ctx, s, nil); err != nil || st == wire.StreamTunnelMap {
				return
			}
			wire.WriteFrame(ctx, s, rc.frame())
			s.Close()
		}
	}()
	target := newKey(t).ID()
	sent := make(chan error, 1)
	go func() {
		sent <- n.SendTunnelMap(ctx, rc.id, []*nodev1.TunnelEntry{{TargetPeerId: target[:], TunnelPort: 50001}})
	}()
	select {
	case err := <-sent:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("send cancelled while awaiting its acknowledgement: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("send still waiting for an acknowledgement 5s after its context was cancelled")
	}
}

// TestStreamFlood: a connection opening streams faster than the limit is
// closed; the node carries on.
func TestStreamFlood(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.StreamRate, cfg.Limits.StreamBurst = 5, 10
	n := start(t, cfg)
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for range 30 {
		// The node may close the connection at any open or write here:
		// that is the outcome wanted, checked below.
		s, err := rc.conn.OpenStreamSync(ctx)
		if err != nil {
			break
		}
		if _, err := s.Write([]byte{byte(wire.StreamTunnelHTTP)}); err != nil {
			break
		}
	}
	rc.connClosedWith(CodeMisbehaving)
	ok := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := ok.gossip(ok.frame()); err != nil {
		t.Fatalf("node unusable after a flood: %v", err)
	}
}

// TestStrikes: a peer that keeps opening refused streams is disconnected
// once it runs out of strikes.
func TestStrikes(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxStrikes = 4
	n := start(t, cfg)
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	for i := range cfg.Limits.MaxStrikes {
		s := rc.open([]byte{byte(wire.StreamPeerDown)})
		err := streamOutcome(t, s)
		if i < cfg.Limits.MaxStrikes-1 {
			wantStreamCode(t, err, StreamCodeNotAdmitted)
		}
	}
	rc.connClosedWith(CodeMisbehaving)
}

// TestAdmissionTimeout: a peer that never gossips is dropped.
func TestAdmissionTimeout(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.Admission = 200 * time.Millisecond
	n := start(t, cfg)
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	rc.connClosedWith(CodeNotAdmitted)
}

// TestMaxStrangerConns: incoming connections not yet admitted are capped
// node-wide, each being granted the whole connection window at the
// handshake; one over the cap is closed at once, and a place frees when a
// stranger is admitted or closes, exactly once.
func TestMaxStrangerConns(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.Admission = time.Minute // nobody is dropped for silence here
	cfg.Limits.MaxStrangerConns = 2
	n := start(t, cfg)
	strangers := func() int {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.strangers
	}
	// dial connects a raw client and waits until the node has counted it
	// (or refused it), so that the next dial meets a settled count.
	dial := func(want int) *rawClient {
		t.Helper()
		rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
		waitFor(t, 5*time.Second, fmt.Sprintf("%d strangers", want), func() bool { return strangers() == want })
		return rc
	}
	// refused dials one over the cap: the node closes it, saying why, and
	// the count stays where it was.
	refused := func() {
		t.Helper()
		if ae := dialRefused(t, n.EndpointAddr(), identity.ALPNMesh, CodeBusy); ae.ErrorMessage != "too many connections not yet admitted" {
			t.Fatalf("refused with %q, want it to say why", ae.ErrorMessage)
		}
		if got := strangers(); got != 2 {
			t.Fatalf("%d strangers counted after a refusal, want 2", got)
		}
	}

	a, b := dial(1), dial(2)
	refused()
	if !a.alive() || !b.alive() {
		t.Fatal("a stranger within the cap was closed")
	}

	// a is admitted: its place frees, and admitted it stays connected.
	if _, err := a.gossip(a.frame()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "admission", func() bool { return hasPeer(n.Node, a.id) })
	c := dial(2)
	refused()

	// b closes: its place frees.
	b.conn.CloseWithError(0, "")
	waitFor(t, 5*time.Second, "b's place freed", func() bool { return strangers() == 1 })
	d := dial(2)
	refused()
	for _, rc := range []*rawClient{a, c, d} {
		if !rc.alive() {
			t.Fatal("a connection within the cap was closed")
		}
	}

	// Once every connection has closed, the admitted one's included, the
	// count is back to zero: each left it once.
	for _, rc := range []*rawClient{a, c, d} {
		rc.conn.CloseWithError(0, "")
	}
	waitFor(t, 5*time.Second, "every connection gone", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.nConns == 0
	})
	if got := strangers(); got != 0 {
		t.Fatalf("%d strangers counted after every connection closed", got)
	}
}

// TestStreamLimit: a peer cannot hold more streams open at once than the
// limit; QUIC flow control refuses it the next one.
func TestStreamLimit(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxIncomingStreams = 3
	n := start(t, cfg)
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	for range cfg.Limits.MaxIncomingStreams {
		rc.open([]byte{byte(wire.StreamRouteRequest)}) // the request never follows
	}
	var limit *quic.StreamLimitReachedError
	if _, err := rc.conn.OpenStream(); !errors.As(err, &limit) {
		t.Fatalf("stream past the limit: %v, want StreamLimitReachedError", err)
	}
}

// TestFailedJoinLeavesNoPeer: a node that hangs up while our first gossip
// awaits its reply leaves nothing behind in the peer table, whichever of
// the hang-up and the failed exchange is handled first.
func TestFailedJoinLeavesNoPeer(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	addr := rawServer(t, func(c *quic.Conn) {
		if s, err := c.AcceptStream(context.Background()); err == nil {
			var b [1]byte
			s.Read(b[:]) // our gossip has arrived
		}
		c.CloseWithError(CodeProtocol, "no")
	})
	for i := range 10 {
		if _, err := n.Dial(t.Context(), addr); err == nil {
			t.Fatal("joined a node that never gossiped")
		}
		waitFor(t, 2*time.Second, fmt.Sprintf("dial %d's peer entry dropped", i), func() bool {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.peers[addr.ID] == nil
		})
	}
}

// TestHeardQuotaPerPeer: one peer's gossip can fill at most its share of
// the queue of peers to dial; a peer named by someone else still gets in
// and is joined.
func TestHeardQuotaPerPeer(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxHeard, cfg.Limits.MaxHeardPerPeer = 8, 4
	n := start(t, cfg)
	hostile := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	var fakes []*nodev1.PeerAnnouncement
	for range cfg.Limits.MaxHeard {
		// Each names this node's own address under another identity: a
		// dial of it fails at once.
		id := newKey(t).ID()
		addr, err := json.Marshal(EndpointAddr{ID: id, Addrs: []netip.AddrPort{n.LocalAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		fakes = append(fakes, &nodev1.PeerAnnouncement{EndpointId: id[:], SerializedAddr: addr})
	}
	if _, err := hostile.gossip(hostile.frame(fakes...)); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	heard, fromHostile := len(n.heard), n.heardFrom[hostile.id]
	n.mu.Unlock()
	if heard != cfg.Limits.MaxHeardPerPeer || fromHostile != cfg.Limits.MaxHeardPerPeer {
		t.Fatalf("after one peer named %d: %d heard of, %d charged to it; want %d", len(fakes), heard, fromHostile, cfg.Limits.MaxHeardPerPeer)
	}

	c := start(t, fastConfig())
	honest := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := honest.gossip(honest.frame(c.selfAnnouncement())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the peer another named joined", func() bool { return hasPeer(n.Node, c.ID()) })
	waitFor(t, 5*time.Second, "its entry and charge dropped", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		_, still := n.heard[c.ID()]
		return !still && n.heardFrom[honest.id] == 0
	})
}

// TestSlowPeerAdmitted: the quarantine bounds (Timeouts.Admission,
// Limits.MaxStrikes) at their defaults still admit a well-behaved peer on
// a lossy link: one whose first streams race ahead of its gossip and are
// refused, and whose gossip gets through only ten seconds after it
// connected.
func TestSlowPeerAdmitted(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.Admission, cfg.Timeouts.Idle, cfg.Timeouts.KeepAlive, cfg.Timeouts.Handshake = 0, 0, 0, 0
	n := start(t, cfg)
	lossy := lossyProxy(t, n.EndpointAddr().Addrs[0], 0.1)
	rc := dialRaw(t, EndpointAddr{ID: n.ID(), Addrs: []netip.AddrPort{lossy}}, identity.ALPNMesh)
	for range 3 {
		s := rc.open([]byte{byte(wire.StreamTunnelHTTP)})
		wantStreamCode(t, streamOutcome(t, s), StreamCodeNotAdmitted)
	}
	time.Sleep(10 * time.Second)
	if !rc.alive() {
		t.Fatal("the quarantined peer was cut before its gossip arrived")
	}
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatalf("gossip after 10 s: %v", err)
	}
	waitFor(t, 5*time.Second, "admission", func() bool { return hasPeer(n.Node, rc.id) })
}

// lossyProxy relays UDP datagrams between one client and target, dropping
// each with probability loss (a fixed sequence, so runs are alike), and
// returns the address clients dial.
func lossyProxy(t testing.TB, target netip.AddrPort, loss float64) netip.AddrPort {
	t.Helper()
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(target))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	drop := func() bool { mu.Lock(); defer mu.Unlock(); return rng.Float64() < loss }
	var client atomic.Pointer[net.UDPAddr]
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // client → target
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			nr, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			client.Store(from)
			if !drop() {
				back.Write(buf[:nr])
			}
		}
	}()
	go func() { // target → client
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			nr, err := back.Read(buf)
			if err != nil {
				return
			}
			if c := client.Load(); c != nil && !drop() {
				front.WriteToUDP(buf[:nr], c)
			}
		}
	}()
	t.Cleanup(func() {
		front.Close()
		back.Close()
		wg.Wait()
	})
	return front.LocalAddr().(*net.UDPAddr).AddrPort()
}
