package mesh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// kickGap is the least time between gossip exchanges prompted by changes.
const kickGap = 25 * time.Millisecond

// runPeer keeps one admitted peer: it gossips on schedule and on request,
// checks reachability when a PeerDown names it, and when the peer has no
// live connection left, confirms by redialling before evicting it. It
// returns once the peer is evicted or the node stops.
func (n *Node) runPeer(p *peer) {
	timer := time.NewTimer(n.jittered())
	defer timer.Stop()
	// Kicks arrive in bursts while a mesh forms (every join kicks every
	// peer); one exchange per kickGap carries them all.
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	var soonC <-chan time.Time
	var last time.Time
	failures := 0
	for {
		n.mu.Lock()
		pc := p.preferred()
		n.mu.Unlock()
		if pc == nil {
			if !n.recover(p) {
				return
			}
			continue
		}
		probe := false
		select {
		case <-n.member.Done():
			return
		case <-p.gone:
			return
		case <-p.connsChanged:
			continue
		case <-pc.conn.Context().Done():
			continue
		case <-p.kick:
			if wait := kickGap - time.Since(last); wait > 0 {
				if soonC == nil {
					soon.Reset(wait)
					soonC = soon.C
				}
				continue
			}
		case <-soonC:
			soonC = nil
		case <-timer.C:
			timer.Reset(n.jittered())
		case <-p.probe:
			probe = true
		}
		timeout := n.cfg.Timeouts.Gossip
		if probe {
			timeout = n.cfg.Timeouts.Confirm
		}
		ctx, cancel := context.WithTimeout(n.ctx, timeout) // not member: see drainExchanges
		err := n.exchange(ctx, pc)
		cancel()
		last = time.Now()
		if probe {
			n.mu.Lock()
			p.probes++
			n.mu.Unlock()
		}
		switch {
		case err == nil:
			failures = 0
		case n.member.Err() != nil || errors.Is(err, errPeerGone):
			return
		case probe || failures > 0:
			// Two misses in a row, or one when a peer has reported it
			// down: give up on this connection. If it was the last, the
			// next turn confirms by redialling.
			failures = 0
			n.log.Info("mesh: peer not answering", "peer", p.id.Short(), "err", err, "reported_down", probe)
			n.disconnect(pc, CodeUnreachable, "gossip unanswered")
		default:
			failures++
		}
		n.closeRedundant(p)
	}
}

// recover runs when p has no live connection: it dials p afresh, within
// the confirmation timeout, and evicts p if that fails. It reports whether
// p is reachable again.
func (n *Node) recover(p *peer) bool {
	if !n.serving() {
		return false
	}
	n.mu.Lock()
	cause, addrs := p.lastClose, p.dialAddrs()
	n.mu.Unlock()
	var ae *quic.ApplicationError
	if errors.As(cause, &ae) && ae.Remote && ae.ErrorCode == CodeLeaving {
		// It closed as leaving; its PeerLeaving was lost or is in flight.
		n.evict(p, PeerLeft, "closed as leaving")
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Confirm) // not member: see drainExchanges
	defer cancel()
	err := n.redial(ctx, p, addrs)
	if err == nil {
		return true
	}
	if n.member.Err() != nil {
		return false
	}
	reason := fmt.Sprintf("unreachable: %v", err)
	if n.evict(p, PeerDown, reason) {
		n.broadcastPeerDown(p.id)
	}
	return false
}

// redial opens a new connection to p and gossips over it.
func (n *Node) redial(ctx context.Context, p *peer, addrs []netip.AddrPort) error {
	c, err := n.dialQUIC(ctx, p.id, addrs)
	if err != nil {
		return err
	}
	pc, err := n.register(c, p.id, true)
	if err != nil {
		return err
	}
	if pc.peer != p {
		// p was evicted meanwhile and this connection began a new peer.
		return errPeerGone
	}
	return n.exchange(ctx, pc)
}

// evict removes p from the table and closes its connections. It reports
// whether this call did it (an eviction happens once). A peer that left
// keeps, for a while, the connections with HTTP tunnels in flight: it is
// gone from every table at once, but what it relays, and what is relayed
// to it, finishes.
func (n *Node) evict(p *peer, kind EventKind, reason string) bool {
	n.mu.Lock()
	if p.evicted {
		n.mu.Unlock()
		return false
	}
	p.evicted = true
	close(p.gone)
	if n.peers[p.id] == p {
		delete(n.peers, p.id)
	}
	admitted := p.admitted
	if admitted {
		n.nAdmitted--
		n.routeGen++
	}
	conns := slices.Clone(p.conns)
	n.mu.Unlock()

	code := CodeEvicted
	if kind == PeerLeft {
		code = CodeLeaving
	}
	for _, pc := range conns {
		if kind == PeerLeft && pc.tunnels.Load() > 0 && n.spawn(func() { n.retire(pc, code, reason) }) {
			continue
		}
		pc.conn.CloseWithError(code, reason)
	}
	if admitted {
		n.log.Info("mesh: peer "+kind.String(), "peer", p.id.Short(), "reason", reason)
		n.events.publish(Event{Kind: kind, Peer: p.id, Time: n.cfg.Now(), Reason: reason})
	}
	return true
}

// retire closes the connection of a peer that left once no HTTP tunnel is
// left on it, or after Timeouts.LeaveDrain, so that a peer that says it
// is leaving cannot hold a connection open by never finishing. The peer
// gets no new stream meanwhile: it is not admitted any more.
func (n *Node) retire(pc *peerConn, code quic.ApplicationErrorCode, reason string) {
	t := time.NewTimer(n.cfg.Timeouts.LeaveDrain)
	defer t.Stop()
wait:
	for pc.tunnels.Load() > 0 {
		select {
		case <-pc.idle:
		case <-pc.conn.Context().Done():
			return
		case <-n.ctx.Done():
			break wait
		case <-t.C:
			n.log.Info("mesh: closing the connection of a peer that left, its tunnels unfinished",
				"peer", pc.id.Short(), "tunnels", pc.tunnels.Load(), "after", n.cfg.Timeouts.LeaveDrain)
			break wait
		}
	}
	pc.conn.CloseWithError(code, reason)
}

// peerDownReported handles a PeerDown from pc's peer naming target: the
// report is only a reason to look, never to evict on its own.
func (n *Node) peerDownReported(pc *peerConn, target identity.EndpointID) {
	if target == n.id {
		n.log.Debug("mesh: PeerDown names this node; ignored", "from", pc.id.Short())
		return
	}
	n.mu.Lock()
	p := n.peers[target]
	if p != nil && p.admitted && !p.evicted {
		signal(p.probe)
	}
	n.mu.Unlock()
	n.log.Debug("mesh: PeerDown received", "from", pc.id.Short(), "target", target.Short(), "known", p != nil)
}

// Probe has an admitted peer's reachability confirmed now, as a PeerDown
// naming it would: one gossip exchange within Timeouts.Confirm; if the
// peer does not answer, its connection is closed (streams on it fail at
// once), and a peer that cannot be redialled within Confirm is evicted
// with PeerDown. A peer that answers is left as it was. Probe does not
// wait; probes of a peer already being checked are one check.
func (n *Node) Probe(id identity.EndpointID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.peers[id]; p != nil && p.admitted && !p.evicted {
		signal(p.probe)
	}
}

// broadcastPeerDown tells every admitted peer that down is unreachable.
func (n *Node) broadcastPeerDown(down identity.EndpointID) {
	msg := &nodev1.PeerDown{PeerId: down[:], Gen: wire.ProtocolGeneration}
	for _, pc := range n.admittedConns(down) {
		n.spawn(func() {
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
			defer cancel()
			if err := sendOneWay(ctx, pc, wire.StreamPeerDown, msg); err != nil {
				n.log.Debug("mesh: PeerDown not delivered", "peer", pc.id.Short(), "err", err)
			}
		})
	}
}

// sendLeaving tells every admitted peer this node is leaving and waits,
// within the leave timeout and ctx, for each to acknowledge.
func (n *Node) sendLeaving(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.Leave)
	defer cancel()
	n.drainExchanges(ctx)
	var wg sync.WaitGroup
	for _, pc := range n.admittedConns(identity.EndpointID{}) {
		wg.Go(func() { n.tellLeaving(ctx, pc) })
	}
	wg.Wait()
}

// tellLeaving sends PeerLeaving on pc, once per connection, and waits
// within ctx for the peer to take it.
func (n *Node) tellLeaving(ctx context.Context, pc *peerConn) {
	if pc.toldLeaving.Swap(true) {
		return
	}
	msg := &nodev1.PeerLeaving{PeerId: n.id[:], Gen: wire.ProtocolGeneration}
	err := sendOneWay(ctx, pc, wire.StreamPeerLeaving, msg)
	var ae *quic.ApplicationError
	if err != nil && !(errors.As(err, &ae) && ae.Remote && ae.ErrorCode == CodeLeaving) {
		n.log.Debug("mesh: PeerLeaving not acknowledged", "peer", pc.id.Short(), "err", err)
	}
}

// drainExchanges waits, within ctx, for the gossip exchanges this node
// started before it stopped being a member (exchange starts none after).
// An exchange's reply means the peer has attached the connection it went
// on, so a PeerLeaving sent after it evicts that connection with the rest.
// Cut short, an exchange on a connection the peer had yet to attach (one
// of two dialled at once, say) could still deliver our frame after the
// PeerLeaving and admit us again there as a new peer.
func (n *Node) drainExchanges(ctx context.Context) {
	// Every exchange that saw member live has been counted once Node.mu
	// is free, and none is counted after: Wait does not race an Add.
	n.mu.Lock()
	//lint:ignore SA2001 the empty critical section orders those Adds before Wait
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		n.exchanges.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// admittedConns returns the preferred connection of every admitted peer
// but except.
func (n *Node) admittedConns(except identity.EndpointID) []*peerConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*peerConn
	for id, p := range n.peers {
		if id == except || !p.admitted || p.evicted {
			continue
		}
		if pc := p.preferred(); pc != nil {
			out = append(out, pc)
		}
	}
	return out
}

// admittedConn is the connection to open a stream to an admitted peer on.
func (n *Node) admittedConn(id identity.EndpointID) (*peerConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.peers[id]
	if p == nil || !p.admitted || p.evicted {
		return nil, fmt.Errorf("%w: %s", ErrUnknownPeer, id.Short())
	}
	pc := p.preferred()
	if pc == nil {
		return nil, fmt.Errorf("mesh: no live connection to %s", id.Short())
	}
	return pc, nil
}

// closeRedundant closes connections we dialled to p that are not the
// preferred one, once they have been idle a while: after simultaneous
// dials both ends hold two connections and agree which one stays.
func (n *Node) closeRedundant(p *peer) {
	n.mu.Lock()
	best := p.preferred()
	var extra []*peerConn
	for _, pc := range p.conns {
		if pc != best && pc.outbound && pc.alive() && pc.active.Load() == 0 && time.Since(pc.since) > n.cfg.Timeouts.Redundant {
			extra = append(extra, pc)
		}
	}
	n.mu.Unlock()
	for _, pc := range extra {
		pc.conn.CloseWithError(CodeDuplicate, "redundant connection")
	}
}
