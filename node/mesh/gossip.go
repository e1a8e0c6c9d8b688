package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var (
	errPeerGone  = errors.New("mesh: peer was evicted")
	errTableFull = errors.New("mesh: peer table full")
)

// decodeGossip decodes a GossipFrame and checks that it comes from the
// connection's own identity.
func decodeGossip(body []byte, from identity.EndpointID) (*nodev1.GossipFrame, error) {
	f, err := wire.DecodeGossipFrame(body)
	if err != nil {
		return nil, err
	}
	if err := wire.CheckSender(f, from[:]); err != nil {
		return nil, err
	}
	return f, nil
}

// exchange gossips with the peer over pc: our frame out, theirs back. The
// peer is admitted, or its announcement refreshed, when its frame
// validates; a frame that does not validate disconnects it.
func (n *Node) exchange(ctx context.Context, pc *peerConn) error {
	p := pc.peer
	n.mu.Lock()
	if n.member.Err() != nil {
		// Leaving: no new exchange, or a peer told we are leaving could
		// admit us again on it.
		n.mu.Unlock()
		return ErrNotServing
	}
	n.exchanges.Add(1)
	defer n.exchanges.Done()
	pre := !p.admitted
	if pre {
		p.awaiting++
	}
	n.mu.Unlock()
	if pre {
		defer func() {
			n.mu.Lock()
			p.awaiting--
			// The connection may have gone while we waited: detach left
			// the peer to us then.
			n.forgetIfIdleLocked(p)
			n.mu.Unlock()
		}()
	}
	pc.active.Add(1)
	defer pc.active.Add(-1)

	s, err := pc.conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("mesh: gossip with %s: %w", pc.id.Short(), err)
	}
	frame := n.gossipFrame()
	start := time.Now()
	if err := wire.WriteStreamOpen(ctx, s, wire.StreamGossip, frame); err != nil {
		reset(s, StreamCodeDone)
		return fmt.Errorf("mesh: gossip with %s: %w", pc.id.Short(), err)
	}
	s.Close()
	body, mem, err := n.readBody(ctx, pc, s)
	rtt := time.Since(start)
	s.CancelRead(StreamCodeDone)
	if err != nil {
		var fe *wire.FrameError
		if errors.As(err, &fe) {
			n.disconnect(pc, CodeProtocol, "bad gossip reply: "+err.Error())
		}
		var se *quic.StreamError
		if errors.As(err, &se) && se.Remote && se.ErrorCode == StreamCodeRejected {
			err = fmt.Errorf("%w: %w", ErrNotAdmitted, err)
		}
		return fmt.Errorf("mesh: gossip with %s: %w", pc.id.Short(), err)
	}
	defer mem.release()
	if err := n.decodeWithin(ctx, mem); err != nil {
		return fmt.Errorf("mesh: gossip from %s: %w", pc.id.Short(), err)
	}
	f, err := decodeGossip(body, pc.id)
	if err != nil {
		n.disconnect(pc, CodeProtocol, "bad gossip: "+err.Error())
		return fmt.Errorf("mesh: gossip from %s: %w", pc.id.Short(), err)
	}
	return n.acceptGossip(pc, f, rtt)
}

// serveGossip answers a gossip exchange the peer opened: its frame in, ours
// back, once its frame has validated (so a quarantined peer learns nothing
// before it has identified itself).
func (n *Node) serveGossip(pc *peerConn, s *quic.Stream) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
	defer cancel()
	body, mem, err := n.readBody(ctx, pc, s)
	if err == nil {
		defer mem.release()
		err = n.decodeWithin(ctx, mem)
	}
	if err != nil {
		n.frameFailed(pc, s, "GossipFrame", err)
		return
	}
	f, err := decodeGossip(body, pc.id)
	if err != nil {
		reset(s, StreamCodeRejected)
		n.disconnect(pc, CodeProtocol, "bad gossip: "+err.Error())
		return
	}
	err = n.acceptGossip(pc, f, 0)
	mem.release() // before waiting on the peer to take our reply
	if errors.Is(err, ErrNotServing) && n.isAdmitted(pc.peer) {
		// Leaving, and this peer missed our PeerLeaving or met us on a
		// connection it had yet to attach: tell it here, so that it
		// drops us as having left rather than as not answering (which
		// would close the connection under the tunnels kept on it).
		lctx, lcancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Leave)
		n.tellLeaving(lctx, pc)
		lcancel()
	}
	if err != nil {
		reset(s, StreamCodeRejected)
		if errors.Is(err, errTableFull) {
			n.disconnect(pc, CodeBusy, "peer table full")
		}
		return
	}
	if err := wire.WriteFrame(ctx, s, n.gossipFrame()); err != nil {
		reset(s, StreamCodeTimeout)
		return
	}
	finish(s)
}

// acceptGossip applies a validated frame from pc's peer: it admits the
// peer, takes its own entry as its announcement, and notes the peers it
// lists for dialling. gossipRTT is the exchange's round trip when we
// started it, else zero.
func (n *Node) acceptGossip(pc *peerConn, f *nodev1.GossipFrame, gossipRTT time.Duration) error {
	var own *nodev1.PeerAnnouncement
	var others []*nodev1.PeerAnnouncement
	for _, a := range f.GetPeers() {
		switch id := identity.EndpointID(a.GetEndpointId()); id {
		case pc.id:
			own = a
		case n.id:
		default:
			others = append(others, a)
		}
	}
	now := n.cfg.Now()
	srtt := pc.conn.ConnectionStats().SmoothedRTT

	n.mu.Lock()
	p := pc.peer
	if p.evicted || n.peers[p.id] != p {
		n.mu.Unlock()
		return errPeerGone
	}
	if !n.serving() {
		// Leaving: no more gossip. One not yet admitted was never told,
		// so it must not be admitted; an admitted one would learn that we
		// are still here.
		n.mu.Unlock()
		return ErrNotServing
	}
	joined := false
	if !p.admitted {
		if n.nAdmitted >= n.cfg.Limits.MaxPeers {
			n.mu.Unlock()
			return errTableFull
		}
		p.admitted, p.admittedAt, joined = true, now, true
		n.nAdmitted++
		n.routeGen++
		close(p.admittedCh)
		for _, c := range p.conns {
			n.unstrangeLocked(c)
		}
	}
	updated := false
	if own != nil && !proto.Equal(own, p.ann) {
		p.ann, updated = own, !joined
		n.routeGen++
		p.advertised = nil
		if a, err := ParseEndpointAddr(own.GetSerializedAddr()); err == nil && a.ID == p.id {
			p.advertised = a.Addrs
		}
	}
	rttMoved := p.measured(now, gossipRTT, srtt) && !joined
	rtt := p.rtt
	for _, a := range others {
		n.hearLocked(a, p.id)
	}
	n.mu.Unlock()

	switch {
	case joined:
		n.log.Info("mesh: peer joined", "peer", p.id.Short(), "remote", pc.remote, "rtt", rtt)
		n.events.publish(Event{Kind: PeerJoined, Peer: p.id, Time: now, RTT: rtt})
		if !n.spawn(func() { n.runPeer(p) }) {
			return ErrClosed
		}
		n.kickAll(p.id) // tell the others about it
	case updated:
		n.events.publish(Event{Kind: PeerUpdated, Peer: p.id, Time: now})
	}
	if rttMoved {
		n.events.publish(Event{Kind: RTTChanged, Peer: p.id, Time: now, RTT: rtt})
	}
	return nil
}

// measured records an RTT sample, the lower of the gossip round trip and
// QUIC's smoothed RTT, and reports whether it has moved noticeably (by a
// quarter and at least a millisecond) from the value last reported, so
// that jitter does not become a stream of events. Node.mu held.
func (p *peer) measured(now time.Time, gossipRTT, srtt time.Duration) bool {
	rtt := srtt
	if gossipRTT > 0 && (rtt <= 0 || gossipRTT < rtt) {
		rtt = gossipRTT
	}
	if rtt <= 0 {
		return false
	}
	p.rtt, p.rttAt = rtt, now
	d := rtt - p.rttReported
	if d < 0 {
		d = -d
	}
	if p.rttReported != 0 && d <= max(p.rttReported/4, time.Millisecond) {
		return false
	}
	p.rttReported = rtt
	return true
}

// gossipFrame is what we tell a peer: ourselves, then every admitted peer
// as it announced itself, with our measured latency to it.
func (n *Node) gossipFrame() *nodev1.GossipFrame {
	self := n.selfAnnouncement()
	now := n.cfg.Now()
	n.mu.Lock()
	peers := make([]*nodev1.PeerAnnouncement, 0, 1+n.nAdmitted)
	for _, p := range n.peers {
		if !p.admitted || p.evicted || p.ann == nil {
			continue
		}
		a := relayCopy(p.ann)
		clearLatency(a)
		if p.rtt > 0 {
			ms := uint32(min(p.rtt.Milliseconds(), 1<<31))
			age := uint32(min(now.Sub(p.rttAt).Milliseconds(), 1<<31))
			a.RttMs, a.LatencyMs, a.LatencyAgeMs = &ms, proto.Uint32(ms), &age
			a.LatencySource = nodev1.LatencySource_LATENCY_SOURCE_DIRECT.Enum()
			a.LatencyObserverId = bytes.Clone(n.id[:])
		} else {
			a.LatencySource = nodev1.LatencySource_LATENCY_SOURCE_UNKNOWN.Enum()
		}
		peers = append(peers, a)
	}
	n.mu.Unlock()
	slices.SortFunc(peers, func(a, b *nodev1.PeerAnnouncement) int { return bytes.Compare(a.EndpointId, b.EndpointId) })
	f := &nodev1.GossipFrame{
		Gen:      wire.ProtocolGeneration,
		Peers:    append([]*nodev1.PeerAnnouncement{self}, peers...),
		SenderId: bytes.Clone(n.id[:]),
	}
	return fitFrame(f, wire.MaxControlFrameBytes)
}

// Field numbers of the repeated fields trimToFit shortens.
var (
	peersField   = (*nodev1.GossipFrame)(nil).ProtoReflect().Descriptor().Fields().ByName("peers").Number()
	entriesField = (*nodev1.RouteTable)(nil).ProtoReflect().Descriptor().Fields().ByName("entries").Number()
)

// fitFrame drops relayed entries from the end of f until it encodes within
// limit, so that a large mesh degrades to partial relaying (peers still
// gossip directly) instead of no gossip at all. The self entry stays.
func fitFrame(f *nodev1.GossipFrame, limit int) *nodev1.GossipFrame {
	f.Peers = trimToFit(f.Peers, peersField, proto.Size(f), limit, 1)
	return f
}

// trimToFit drops elements from the end of list, the repeated message
// field numbered field of a message encoding to size bytes, until that
// message would encode within limit or only keep elements are left.
func trimToFit[M proto.Message](list []M, field protowire.Number, size, limit, keep int) []M {
	for size > limit && len(list) > keep {
		last := list[len(list)-1]
		list = list[:len(list)-1]
		// An element costs its bytes, its tag and its length prefix,
		// exactly: more would let an oversized message through.
		// Recomputing the whole size each time would be quadratic.
		size -= protowire.SizeTag(field) + protowire.SizeBytes(proto.Size(last))
	}
	return list
}

// kickAll asks every admitted peer but except to gossip now.
func (n *Node) kickAll(except identity.EndpointID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, p := range n.peers {
		if p.admitted && id != except {
			signal(p.kick)
		}
	}
}

// heardPeer is a peer known from someone's gossip (or configured) that we
// have no admitted connection to yet.
type heardPeer struct {
	addr      EndpointAddr
	bootstrap bool                // configured: never forgotten until joined
	boot      []netip.AddrPort    // its configured addresses, always dialled first
	source    identity.EndpointID // whose gossip chose its addresses; zero for none
	lastHeard time.Time
	next      time.Time // earliest next dial
	failures  int
	dialing   bool
}

// hearLocked notes a peer that from announced, for dialling. Node.mu held.
func (n *Node) hearLocked(a *nodev1.PeerAnnouncement, from identity.EndpointID) {
	id := identity.EndpointID(a.GetEndpointId())
	if p := n.peers[id]; p != nil && p.admitted {
		return
	}
	addr, err := ParseEndpointAddr(a.GetSerializedAddr())
	if err != nil || addr.ID != id || len(addr.Addrs) == 0 {
		return // nothing we could dial
	}
	n.noteHeard(addr, from)
}

// hear notes a configured peer for dialling.
func (n *Node) hear(addr EndpointAddr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.noteHeard(addr, identity.EndpointID{})
}

// noteHeard notes addr for dialling, as announced by from, or configured
// when from is zero. Each peer may choose what is dialled for at most
// MaxHeardPerPeer entries, so that one cannot fill the queue with
// addresses of its choosing. Node.mu held.
func (n *Node) noteHeard(addr EndpointAddr, from identity.EndpointID) {
	if addr.ID == n.id {
		return
	}
	configured := from == identity.EndpointID{}
	h := n.heard[addr.ID]
	if !configured && (h == nil || h.source != from) && n.heardFrom[from] >= n.cfg.Limits.MaxHeardPerPeer {
		return
	}
	if h == nil {
		if len(n.heard) >= n.cfg.Limits.MaxHeard {
			return
		}
		h = &heardPeer{}
		n.heard[addr.ID] = h
		signal(n.dialKick)
	}
	if configured {
		h.bootstrap = true
		h.boot = mergeAddrs(addr.Addrs, h.boot)
	} else if h.source != from {
		n.uncountHeard(h)
		h.source = from
		n.heardFrom[from]++
	}
	// What gossip says adds to the configured addresses, never replaces
	// them: any admitted peer can name any address for anyone.
	h.addr = addr
	h.addr.Addrs = mergeAddrs(h.boot, addr.Addrs)
	h.lastHeard = time.Now()
}

// forgetHeard drops the heard-of peer id. Node.mu held.
func (n *Node) forgetHeard(id identity.EndpointID, h *heardPeer) {
	delete(n.heard, id)
	n.uncountHeard(h)
}

// uncountHeard takes h off its source's quota. Node.mu held.
func (n *Node) uncountHeard(h *heardPeer) {
	if h.source == (identity.EndpointID{}) {
		return
	}
	if n.heardFrom[h.source]--; n.heardFrom[h.source] <= 0 {
		delete(n.heardFrom, h.source)
	}
	h.source = identity.EndpointID{}
}

// dialLoop dials heard-of peers, a few at a time, backing off per peer on
// failure, and forgets those nobody has mentioned for a while.
func (n *Node) dialLoop() {
	forget := 3*n.cfg.GossipInterval + n.cfg.Timeouts.Confirm
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		wait := time.Hour
		var due []*heardPeer
		n.mu.Lock()
		for id, h := range n.heard {
			if p := n.peers[id]; p != nil && p.admitted && !h.dialing {
				n.forgetHeard(id, h)
				continue
			}
			if !h.bootstrap && !h.dialing && now.Sub(h.lastHeard) > forget {
				n.forgetHeard(id, h)
				continue
			}
			if h.dialing {
				continue
			}
			if d := h.next.Sub(now); d > 0 {
				wait = min(wait, d)
				continue
			}
			if n.dialing < n.cfg.Limits.MaxDialsInFlight {
				h.dialing = true
				n.dialing++
				due = append(due, h)
			}
		}
		n.mu.Unlock()
		for _, h := range due {
			if !n.spawn(func() { n.dialHeard(h) }) {
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-n.member.Done():
			return
		case <-n.dialKick:
		case <-timer.C:
		}
	}
}

func (n *Node) dialHeard(h *heardPeer) {
	n.mu.Lock()
	addr := h.addr
	n.mu.Unlock()
	// Not n.member: a dial that reaches its exchange finishes it, as
	// every exchange does, when the node leaves (drainExchanges).
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Handshake+n.cfg.Timeouts.Gossip)
	_, err := n.Dial(ctx, addr)
	cancel()
	n.mu.Lock()
	h.dialing = false
	n.dialing--
	if err == nil {
		if n.heard[addr.ID] == h {
			n.forgetHeard(addr.ID, h)
		}
	} else {
		backoff := n.cfg.Timeouts.RedialMin << min(h.failures, 16)
		h.failures++
		h.next = time.Now().Add(min(backoff, n.cfg.Timeouts.RedialMax))
		n.log.Debug("mesh: dial failed", "peer", addr.ID.Short(), "err", err, "retry_in", time.Until(h.next))
	}
	n.mu.Unlock()
	signal(n.dialKick)
}

// Dial joins the node at addr, or confirms it is joined: it connects (or
// reuses a connection), exchanges gossip, and returns the admitted peer.
// The dial fails unless the node proves the identity addr names.
func (n *Node) Dial(ctx context.Context, addr EndpointAddr) (Peer, error) {
	if addr.ID == n.id {
		return Peer{}, ErrSelf
	}
	if !n.serving() {
		return Peer{}, ErrNotServing
	}
	n.mu.Lock()
	var pc *peerConn
	addrs := addr.Addrs
	if p := n.peers[addr.ID]; p != nil {
		pc = p.preferred()
		addrs = mergeAddrs(addrs, p.dialAddrs())
	}
	n.mu.Unlock()
	if pc == nil {
		c, err := n.dialQUIC(ctx, addr.ID, addrs)
		if err != nil {
			return Peer{}, err
		}
		if pc, err = n.register(c, addr.ID, true); err != nil {
			return Peer{}, err
		}
	}
	if !n.isAdmitted(pc.peer) {
		if err := n.exchange(ctx, pc); err != nil {
			return Peer{}, err
		}
	}
	if p, ok := n.Peer(addr.ID); ok {
		return p, nil
	}
	return Peer{}, fmt.Errorf("mesh: %s: %w", addr.ID.Short(), ErrUnknownPeer)
}

func (n *Node) dialQUIC(ctx context.Context, id identity.EndpointID, addrs []netip.AddrPort) (*quic.Conn, error) {
	allowed := slices.DeleteFunc(slices.Clone(addrs), func(ap netip.AddrPort) bool { return !n.allowed(ap) })
	if len(allowed) == 0 && len(addrs) > 0 {
		return nil, fmt.Errorf("mesh: dial %s: %w: none of %v is allowed", id.Short(), ErrNoAddress, addrs)
	}
	return DialQUIC(ctx, n.tr, n.key, n.quicConf, id, identity.ALPNMesh, allowed)
}

// allowed reports whether Config.AllowAddr lets the node talk to ap.
func (n *Node) allowed(ap netip.AddrPort) bool {
	return n.cfg.AllowAddr == nil || n.cfg.AllowAddr(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
}
