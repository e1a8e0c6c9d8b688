package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// handleStream reads the type byte of a stream the peer opened and hands
// the stream to its handler, if the peer may open it: admitted says
// whether it was admitted when the stream was accepted. untyped ends the
// stream's count as a possible tunnel; it is called once the type is
// known, or, for a tunnel, once the tunnel ends.
func (n *Node) handleStream(pc *peerConn, s *quic.Stream, admitted bool, untyped func()) {
	pc.active.Add(1)
	defer pc.active.Add(-1)
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.StreamHeader)
	t, err := wire.ReadStreamType(ctx, s)
	cancel()
	if err == nil && t == wire.StreamTunnelHTTP {
		defer untyped()
	} else {
		untyped()
	}
	if err != nil {
		if errors.Is(err, wire.ErrWrongStreamType) {
			reset(s, StreamCodeUnsupported)
			n.strike(pc, err.Error())
		} else {
			reset(s, StreamCodeTimeout)
		}
		return
	}
	if !t.AllowedBeforeAdmission() && !admitted && !n.awaitAdmission(pc.peer) {
		n.log.Debug("mesh: stream before admission refused", "peer", pc.id.Short(), "stream", t)
		reset(s, StreamCodeNotAdmitted)
		n.strike(pc, t.String()+" before admission")
		return
	}
	switch t {
	case wire.StreamGossip:
		n.serveGossip(pc, s)
	case wire.StreamRouteRequest:
		n.serveRouteTable(pc, s)
	case wire.StreamTunnelHTTP:
		n.serveTunnel(pc, s)
	case wire.StreamTunnelMap:
		n.serveTunnelMap(pc, s)
	case wire.StreamPeerDown:
		n.servePeerDown(pc, s)
	case wire.StreamPeerLeaving:
		n.servePeerLeaving(pc, s)
	case wire.StreamSubprotocol:
		n.serveSubprotocol(pc, s)
	default:
		// TUNNEL (llama.cpp RPC), the plugin streams and
		// DIRECT_PATH_REQUEST: this node serves none of them.
		reset(s, StreamCodeUnsupported)
	}
}

// awaitAdmission reports whether p is admitted. While our own gossip to
// p awaits its reply, p has admitted us and may race a stream ahead of that
// reply, so the stream waits for the reply (a gossip timeout at most).
func (n *Node) awaitAdmission(p *peer) bool {
	n.mu.Lock()
	ok, pending, ch := p.admitted && !p.evicted, p.awaiting > 0, p.admittedCh
	n.mu.Unlock()
	if ok || !pending {
		return ok
	}
	t := time.NewTimer(n.cfg.Timeouts.Gossip)
	defer t.Stop()
	select {
	case <-ch:
		return n.isAdmitted(p)
	case <-t.C:
	case <-n.ctx.Done():
	}
	return false
}

// readFrame reads and decodes the one frame a handler expects, within the
// node's frame memory (see readBody), which it holds until decoding ends.
func readFrame[M proto.Message](ctx context.Context, n *Node, pc *peerConn, s *quic.Stream, decode func([]byte) (M, error)) (M, error) {
	var zero M
	body, mem, err := n.readBody(ctx, pc, s)
	if err != nil {
		if err == io.EOF {
			err = &wire.FrameError{Kind: wire.ErrTruncated, Field: "length prefix", Reason: "stream ended before a frame"}
		}
		return zero, err
	}
	defer mem.release()
	if err := n.decodeWithin(ctx, mem); err != nil {
		return zero, err
	}
	return decode(body)
}

// frameFailed deals with a frame that could not be read or decoded: bytes
// that break the protocol disconnect the peer; a frame too large for its
// memory budget is refused; a stream that stalled or was abandoned, or
// waited too long for memory, is only reset.
func (n *Node) frameFailed(pc *peerConn, s *quic.Stream, what string, err error) {
	var fe *wire.FrameError
	if errors.As(err, &fe) {
		reset(s, StreamCodeRejected)
		n.disconnect(pc, CodeProtocol, fmt.Sprintf("bad %s: %v", what, err))
		return
	}
	if errors.Is(err, errNoFrameMemory) {
		n.log.Warn("mesh: frame refused", "peer", pc.id.Short(), "stream", what, "err", err)
		reset(s, StreamCodeRejected)
		return
	}
	reset(s, StreamCodeTimeout)
	n.log.Debug("mesh: stream abandoned", "peer", pc.id.Short(), "stream", what, "err", err)
}

// finish ends a handled stream: our side closes (the sender's
// acknowledgement) and the rest of theirs is discarded.
func finish(s *quic.Stream) {
	s.Close()
	s.CancelRead(StreamCodeDone)
}

func (n *Node) serveRouteTable(pc *peerConn, s *quic.Stream) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
	defer cancel()
	if _, err := readFrame(ctx, n, pc, s, wire.DecodeRouteTableRequest); err != nil {
		n.frameFailed(pc, s, "RouteTableRequest", err)
		return
	}
	// The requester is answered, never admitted.
	frame, err := n.routeTableFrame()
	if err != nil {
		reset(s, StreamCodeDone)
		n.log.Error("mesh: cannot encode the route table", "err", err)
		return
	}
	if dl, ok := ctx.Deadline(); ok {
		s.SetWriteDeadline(dl)
	}
	if _, err := s.Write(frame); err != nil {
		reset(s, StreamCodeTimeout)
		n.log.Debug("mesh: route table not sent", "peer", pc.id.Short(), "err", err)
		return
	}
	finish(s)
}

func (n *Node) serveTunnelMap(pc *peerConn, s *quic.Stream) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
	defer cancel()
	m, err := readFrame(ctx, n, pc, s, wire.DecodeTunnelMap)
	if err != nil {
		n.frameFailed(pc, s, "TunnelMap", err)
		return
	}
	if err := wire.CheckSender(m, pc.id[:]); err != nil {
		n.refuse(pc, s, err)
		return
	}
	n.mu.Lock()
	if !pc.peer.evicted {
		pc.peer.tunnelMap = m
	}
	n.mu.Unlock()
	finish(s)
}

func (n *Node) servePeerDown(pc *peerConn, s *quic.Stream) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
	defer cancel()
	m, err := readFrame(ctx, n, pc, s, wire.DecodePeerDown)
	if err != nil {
		n.frameFailed(pc, s, "PeerDown", err)
		return
	}
	finish(s)
	n.peerDownReported(pc, identity.EndpointID(m.GetPeerId()))
}

func (n *Node) servePeerLeaving(pc *peerConn, s *quic.Stream) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
	defer cancel()
	m, err := readFrame(ctx, n, pc, s, wire.DecodePeerLeaving)
	if err != nil {
		n.frameFailed(pc, s, "PeerLeaving", err)
		return
	}
	if err := wire.CheckSender(m, pc.id[:]); err != nil {
		// A node may only say that it is leaving itself.
		n.refuse(pc, s, err)
		return
	}
	finish(s)
	n.evict(pc.peer, PeerLeft, "peer leaving")
}

// refuse rejects a well-formed frame that the sender had no right to send,
// changing nothing.
func (n *Node) refuse(pc *peerConn, s *quic.Stream, err error) {
	n.log.Warn("mesh: frame refused", "peer", pc.id.Short(), "err", err)
	reset(s, StreamCodeRejected)
	n.strike(pc, err.Error())
}

// sendOneWay opens a stream of type t carrying m and waits until the peer
// has handled it (its side of the stream closes) or ctx ends.
func sendOneWay(ctx context.Context, pc *peerConn, t wire.StreamType, m proto.Message) error {
	pc.active.Add(1)
	defer pc.active.Add(-1)
	s, err := pc.conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("mesh: open %v stream: %w", t, err)
	}
	if err := wire.WriteStreamOpen(ctx, s, t, m); err != nil {
		reset(s, StreamCodeDone)
		return fmt.Errorf("mesh: send %v: %w", t, err)
	}
	s.Close()
	// The acknowledgement is the end of the peer's side; ctx bounds the
	// wait for it, deadline or not.
	stop := context.AfterFunc(ctx, func() { s.CancelRead(StreamCodeDone) })
	var b [1]byte
	_, err = s.Read(b[:])
	stop()
	s.CancelRead(StreamCodeDone)
	if err == io.EOF {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("mesh: %v to %s not acknowledged: %w", t, pc.id.Short(), cerr)
	}
	var se *quic.StreamError
	if errors.As(err, &se) && se.Remote {
		return fmt.Errorf("mesh: %v refused by %s: %w", t, pc.id.Short(), err)
	}
	if err == nil {
		err = errors.New("unexpected bytes in reply")
	}
	return fmt.Errorf("mesh: %v to %s not acknowledged: %w", t, pc.id.Short(), err)
}

// SendTunnelMap tells peer which local tunnel ports this node maps to which
// targets (TUNNEL_MAP, 0x03).
func (n *Node) SendTunnelMap(ctx context.Context, peer identity.EndpointID, entries []*nodev1.TunnelEntry) error {
	pc, err := n.admittedConn(peer)
	if err != nil {
		return err
	}
	m := &nodev1.TunnelMap{OwnerPeerId: n.id[:], Entries: entries}
	if err := wire.ValidateTunnelMap(m); err != nil {
		return err
	}
	return sendOneWay(ctx, pc, wire.StreamTunnelMap, m)
}
