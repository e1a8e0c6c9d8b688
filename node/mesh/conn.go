package mesh

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// peer is one remote node: its connections and, once admitted, what it
// announced. Fields are guarded by Node.mu; the channels are not.
type peer struct {
	id          identity.EndpointID
	conns       []*peerConn // registered connections, oldest first
	admitted    bool
	admittedAt  time.Time
	awaiting    int // our gossip exchanges awaiting its first reply
	evicted     bool
	ann         *nodev1.PeerAnnouncement
	advertised  []netip.AddrPort // from its serialized_addr
	observed    []netip.AddrPort // where its connections came from
	rtt         time.Duration
	rttAt       time.Time
	rttReported time.Duration // the RTT last published in an event
	tunnelMap   *nodev1.TunnelMap
	lastClose   error   // why its last connection closed
	probes      int     // PeerDown reports checked
	mem         *budget // frame memory it may hold once admitted, over all its connections

	admittedCh   chan struct{} // closed at admission
	gone         chan struct{} // closed at eviction
	kick         chan struct{} // gossip now
	probe        chan struct{} // a PeerDown named it: confirm it is reachable
	connsChanged chan struct{}
}

func newPeer(id identity.EndpointID, mem int64) *peer {
	return &peer{
		id:           id,
		mem:          newBudget("frame memory of a peer", mem),
		admittedCh:   make(chan struct{}),
		gone:         make(chan struct{}),
		kick:         make(chan struct{}, 1),
		probe:        make(chan struct{}, 1),
		connsChanged: make(chan struct{}, 1),
	}
}

// signal wakes whoever waits on ch without blocking; signals coalesce.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *peer) dialAddrs() []netip.AddrPort { return mergeAddrs(p.advertised, p.observed) }

// snapshot copies p for callers; Node.mu held.
func (p *peer) snapshot() Peer {
	out := Peer{
		ID:            p.id,
		Addrs:         p.dialAddrs(),
		RTT:           p.rtt,
		LatencySource: nodev1.LatencySource_LATENCY_SOURCE_UNKNOWN,
		RTTMeasuredAt: p.rttAt,
		AdmittedAt:    p.admittedAt,
	}
	if p.rtt > 0 {
		out.LatencySource = nodev1.LatencySource_LATENCY_SOURCE_DIRECT
	}
	if p.ann != nil {
		out.Announcement = proto.Clone(p.ann).(*nodev1.PeerAnnouncement)
	}
	if p.tunnelMap != nil {
		out.TunnelMap = proto.Clone(p.tunnelMap).(*nodev1.TunnelMap)
	}
	return out
}

// preferred is the connection new streams to p go on, or nil if none is
// live. Both ends choose the same one without talking: the connection
// dialled by the lower EndpointID, and of two from the same dialer the
// newer (the dialer made it because it gave up on the older). Node.mu held.
func (p *peer) preferred() *peerConn {
	var best *peerConn
	for _, pc := range p.conns {
		if !pc.alive() {
			continue
		}
		if best == nil {
			best = pc
			continue
		}
		switch c := bytes.Compare(pc.dialer[:], best.dialer[:]); {
		case c < 0, c == 0 && pc.seq > best.seq:
			best = pc
		}
	}
	return best
}

// peerConn is one QUIC connection to a peer.
type peerConn struct {
	conn     *quic.Conn
	peer     *peer
	id       identity.EndpointID
	dialer   identity.EndpointID // who opened it
	outbound bool
	seq      uint64 // registration order
	remote   netip.AddrPort
	since    time.Time
	limiter  tokenBucket // touched only by the stream accept loop
	strikes  atomic.Int32
	active   atomic.Int32  // streams in use on it
	tunnels  atomic.Int32  // HTTP tunnels on it, either way
	idle     chan struct{} // signalled when the last tunnel ends
	mem      *budget       // frame memory it may hold before admission
	stranger bool          // counted in Node.strangers; Node.mu guards it

	toldLeaving atomic.Bool // PeerLeaving sent on it
}

func (pc *peerConn) alive() bool { return pc.conn.Context().Err() == nil }

// tunnelOpened counts an HTTP tunnel on pc until the returned func is
// called: a connection to a peer that left stays up while it has any.
func (pc *peerConn) tunnelOpened() (closed func()) {
	pc.tunnels.Add(1)
	return func() {
		if pc.tunnels.Add(-1) == 0 {
			signal(pc.idle)
		}
	}
}

// register adds a handshaken connection to its peer's set and starts
// serving its streams. On any refusal the connection is closed.
func (n *Node) register(c *quic.Conn, id identity.EndpointID, outbound bool) (*peerConn, error) {
	pc := &peerConn{conn: c, id: id, outbound: outbound, dialer: id, since: time.Now(), idle: make(chan struct{}, 1)}
	if outbound {
		pc.dialer = n.id
	}
	if ua, ok := c.RemoteAddr().(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		pc.remote = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	pc.limiter = tokenBucket{rate: n.cfg.Limits.StreamRate, burst: float64(n.cfg.Limits.StreamBurst)}
	pc.mem = newBudget("frame memory of a connection not yet admitted", n.cfg.Limits.StrangerFrameMemory)
	code, reason := n.attach(pc)
	if reason != "" {
		c.CloseWithError(code, reason)
		return nil, fmt.Errorf("mesh: connection to %s refused: %s", id.Short(), reason)
	}
	if !n.spawn(func() { n.serveConn(pc) }) {
		n.detach(pc)
		c.CloseWithError(CodeLeaving, "node shutting down")
		return nil, ErrClosed
	}
	return pc, nil
}

// attach adds pc to the peer table, or says why not.
func (n *Node) attach(pc *peerConn) (quic.ApplicationErrorCode, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.serving() {
		return CodeLeaving, "node shutting down"
	}
	if n.nConns >= n.cfg.Limits.MaxConns {
		return CodeBusy, "too many connections"
	}
	p := n.peers[pc.id]
	// A peer in the table is not evicted (evict removes it), so one that
	// is there and admitted vouches for its new connection.
	stranger := !pc.outbound && (p == nil || !p.admitted)
	if stranger && n.strangers >= n.cfg.Limits.MaxStrangerConns {
		return CodeBusy, "too many connections not yet admitted"
	}
	if p == nil {
		p = newPeer(pc.id, n.cfg.Limits.PeerFrameMemory)
		n.peers[pc.id] = p
	}
	live := 0
	for _, q := range p.conns {
		if q.alive() {
			live++
		}
	}
	if live >= n.cfg.Limits.MaxConnsPerPeer {
		return CodeBusy, "too many connections from this peer"
	}
	n.connSeq++
	pc.seq, pc.peer = n.connSeq, p
	p.conns = append(p.conns, pc)
	n.nConns++
	if stranger {
		pc.stranger = true
		n.strangers++
	}
	if pc.remote.IsValid() {
		p.observed = mergeAddrs([]netip.AddrPort{pc.remote}, p.observed)
	}
	signal(p.connsChanged)
	return 0, ""
}

// detach removes pc from its peer, and forgets a peer that was never
// admitted once nothing is left of it.
func (n *Node) detach(pc *peerConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unstrangeLocked(pc)
	p := pc.peer
	i := slices.Index(p.conns, pc)
	if i < 0 {
		return
	}
	p.conns = slices.Delete(p.conns, i, i+1)
	n.nConns--
	p.lastClose = context.Cause(pc.conn.Context())
	n.forgetIfIdleLocked(p)
	signal(p.connsChanged)
}

// unstrangeLocked takes pc out of the strangers' count, if it is in it:
// at its peer's admission or its detach, whichever comes first, so that
// it is counted out exactly once. Node.mu held.
func (n *Node) unstrangeLocked(pc *peerConn) {
	if pc.stranger {
		pc.stranger = false
		n.strangers--
	}
}

// forgetIfIdleLocked drops a peer that was never admitted once nothing is
// left of it: no connection, and no exchange of ours awaiting its reply.
// Node.mu held.
func (n *Node) forgetIfIdleLocked(p *peer) {
	if !p.admitted && len(p.conns) == 0 && p.awaiting == 0 && n.peers[p.id] == p {
		delete(n.peers, p.id)
	}
}

// serveConn accepts the peer's streams until the connection ends.
func (n *Node) serveConn(pc *peerConn) {
	defer n.detach(pc)
	if !n.isAdmitted(pc.peer) {
		t := time.AfterFunc(n.cfg.Timeouts.Admission, func() {
			// Never admitted: one that was, and left, keeps the
			// connection for its tunnels (see retire).
			n.mu.Lock()
			never := !pc.peer.admitted
			n.mu.Unlock()
			if never {
				n.disconnect(pc, CodeNotAdmitted, fmt.Sprintf("no valid gossip within %v", n.cfg.Timeouts.Admission))
			}
		})
		defer t.Stop()
	}
	for {
		s, err := pc.conn.AcceptStream(n.ctx)
		if err != nil {
			return
		}
		if !pc.limiter.allow(time.Now()) {
			reset(s, StreamCodeRejected)
			n.disconnect(pc, CodeMisbehaving, fmt.Sprintf("stream flood: over %g streams/s", n.cfg.Limits.StreamRate))
			return
		}
		// Streams are accepted in the order the peer opened them, so a
		// stream it opened before its PeerLeaving is judged by the
		// admission it had then, and counts as a tunnel until its type
		// is known: the PeerLeaving must not close or refuse it.
		admitted, untyped := n.isAdmitted(pc.peer), pc.tunnelOpened()
		if !n.spawn(func() { n.handleStream(pc, s, admitted, untyped) }) {
			untyped()
			reset(s, StreamCodeShutdown)
			return
		}
	}
}

func (n *Node) isAdmitted(p *peer) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return p.admitted && !p.evicted
}

// disconnect closes a connection for cause, and says so in the log.
func (n *Node) disconnect(pc *peerConn, code quic.ApplicationErrorCode, reason string) {
	const maxReason = 256 // a CONNECTION_CLOSE reason shares one packet
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	if pc.alive() {
		n.log.Warn("mesh: disconnecting peer", "peer", pc.id.Short(), "remote", pc.remote, "code", uint64(code), "reason", reason)
	}
	pc.conn.CloseWithError(code, reason)
}

// strike counts a rejected stream against pc; too many close it.
func (n *Node) strike(pc *peerConn, why string) {
	if int(pc.strikes.Add(1)) >= n.cfg.Limits.MaxStrikes {
		n.disconnect(pc, CodeMisbehaving, "too many rejected streams; last: "+why)
	}
}

// acceptLoop takes handshaken connections off the listener.
func (n *Node) acceptLoop() {
	for {
		c, err := n.ln.Accept(n.ctx)
		if err != nil {
			if n.ctx.Err() == nil {
				n.fail(fmt.Errorf("mesh: accept: %w", err))
			}
			return
		}
		if !n.spawn(func() { n.handleIncoming(c) }) {
			c.CloseWithError(CodeLeaving, "node shutting down")
			return
		}
	}
}

func (n *Node) handleIncoming(c *quic.Conn) {
	cs := c.ConnectionState()
	id, err := identity.PeerID(cs.TLS)
	if err != nil { // the TLS handshake checked it already
		c.CloseWithError(CodeProtocol, "no valid peer identity")
		return
	}
	switch cs.TLS.NegotiatedProtocol {
	case identity.ALPNControl:
		n.serveControl(c, id)
		return
	case identity.ALPNMesh:
	default:
		c.CloseWithError(CodeProtocol, "unknown ALPN")
		return
	}
	if id == n.id {
		// Dialled one of our own addresses, as a shared bridge address
		// makes a node do.
		c.CloseWithError(CodeSelf, "connected to itself")
		return
	}
	if _, err := n.register(c, id, false); err != nil {
		n.log.Debug("mesh: incoming connection refused", "peer", id.Short(), "err", err)
	}
}

// serveControl hands a mesh-llm-control/1 connection to the registered
// handler, or refuses it.
func (n *Node) serveControl(c *quic.Conn, id identity.EndpointID) {
	h := n.control.Load()
	if h == nil {
		c.CloseWithError(CodeControlUnavailable, "owner control is not served by this node")
		return
	}
	// Anyone may connect on this ALPN, owner or not: the handler decides
	// who is served, and this bounds how many it is asked to hold.
	n.mu.Lock()
	if len(n.controls) >= n.cfg.Limits.MaxControlConns {
		n.mu.Unlock()
		c.CloseWithError(CodeBusy, "too many owner-control connections")
		return
	}
	n.controls[c] = struct{}{}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.controls, c)
		n.mu.Unlock()
		c.CloseWithError(CodeOK, "")
	}()
	(*h)(n.ctx, c, id)
}

// tokenBucket limits a rate: burst tokens, refilled at rate per second.
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (b *tokenBucket) allow(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = b.burst
	} else {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
