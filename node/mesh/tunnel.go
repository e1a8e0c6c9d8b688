package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
)

// DialHTTP opens an HTTP tunnel (TUNNEL_HTTP, 0x04) to peer: a connection
// whose bytes reach the peer's local HTTP API and come back. Speak HTTP/1.1
// over it, e.g. from an http.Transport's DialContext. A peer that refuses
// the tunnel makes the first Read fail with ErrTunnelRefused. A node that
// has left (Leave) opens no new tunnel.
func (n *Node) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	if !n.serving() {
		return nil, fmt.Errorf("mesh: tunnel to %s: %w", peer.Short(), ErrNotServing)
	}
	pc, err := n.admittedConn(peer)
	if err != nil {
		return nil, err
	}
	s, err := pc.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("mesh: tunnel to %s: %w", peer.Short(), err)
	}
	if dl, ok := ctx.Deadline(); ok {
		s.SetWriteDeadline(dl)
	}
	if _, err := s.Write([]byte{byte(wire.StreamTunnelHTTP)}); err != nil {
		reset(s, StreamCodeDone)
		return nil, fmt.Errorf("mesh: tunnel to %s: %w", peer.Short(), err)
	}
	s.SetWriteDeadline(time.Time{})
	pc.active.Add(1)
	closed := pc.tunnelOpened()
	return &tunnelConn{Stream: s, conn: pc.conn, bytes: &n.tunnelBytes, release: func() { closed(); pc.active.Add(-1) }}, nil
}

// tunnelBytes counts the bytes HTTP tunnels carry, both ends of them: a
// tunnel this node opened and one a peer opened here.
type tunnelBytes struct {
	in, out atomic.Uint64
}

// TunnelBytes is how many bytes this node's HTTP tunnels, in either
// direction of opening, have received (in) and sent (out) since it
// started: the tunnel's payload, not QUIC's framing.
func (n *Node) TunnelBytes() (in, out uint64) {
	return n.tunnelBytes.in.Load(), n.tunnelBytes.out.Load()
}

// tunnelConn is the caller's end of an HTTP tunnel.
type tunnelConn struct {
	*quic.Stream
	conn    *quic.Conn
	bytes   *tunnelBytes
	once    sync.Once
	release func()
}

func (c *tunnelConn) Read(b []byte) (int, error) {
	n, err := c.Stream.Read(b)
	c.bytes.in.Add(uint64(n))
	return n, tunnelError(err)
}

func (c *tunnelConn) Write(b []byte) (int, error) {
	n, err := c.Stream.Write(b)
	c.bytes.out.Add(uint64(n))
	return n, tunnelError(err)
}

// CloseWrite ends what we send; the response can still be read.
func (c *tunnelConn) CloseWrite() error { return c.Stream.Close() }

// Close ends both directions.
func (c *tunnelConn) Close() error {
	c.once.Do(func() {
		c.Stream.CancelRead(StreamCodeDone)
		c.Stream.Close()
		c.release()
	})
	return nil
}

func (c *tunnelConn) LocalAddr() net.Addr  { return c.conn.LocalAddr() }
func (c *tunnelConn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// tunnelError marks a peer's refusal so callers can tell it from a broken
// connection.
func tunnelError(err error) error {
	var se *quic.StreamError
	if errors.As(err, &se) && se.Remote {
		switch se.ErrorCode {
		case StreamCodeTunnelUnavailable, StreamCodeNotAdmitted, StreamCodeUnsupported:
			return fmt.Errorf("%w: %w", ErrTunnelRefused, err)
		}
	}
	return err
}

// serveTunnel hands a peer's TUNNEL_HTTP stream to the local HTTP API,
// in-process, through the listener ListenHTTP returned, and holds the
// tunnel's slots until it has ended at both ends.
func (n *Node) serveTunnel(pc *peerConn, s *quic.Stream) {
	l := n.httpLn.Load()
	if l == nil || !n.serving() {
		// No API taking tunnels, or leaving: refused, so the peer may ask
		// another host.
		reset(s, StreamCodeTunnelUnavailable)
		return
	}
	// Each tunnel holds a stream, a server connection and its goroutines
	// here, and every admitted peer may open them: all peers together get
	// MaxTunnels, and one peer MaxTunnelsPerPeer of them, so that it
	// cannot take them all.
	if !n.takeTunnel(pc.id) {
		n.log.Debug("mesh: tunnel refused: the peer's share in use", "peer", pc.id.Short(), "limit", n.cfg.Limits.MaxTunnelsPerPeer)
		reset(s, StreamCodeTunnelUnavailable)
		return
	}
	defer n.releaseTunnel(pc.id)
	select {
	case n.tunnels <- struct{}{}:
		defer func() { <-n.tunnels }()
	default:
		n.log.Debug("mesh: tunnel refused: too many at once", "peer", pc.id.Short(), "limit", n.cfg.Limits.MaxTunnels)
		reset(s, StreamCodeTunnelUnavailable)
		return
	}
	c := newServedTunnel(s, pc.id, pc.remote, PeerAddr{ID: n.id, UDP: n.local}, &n.tunnelBytes)
	if code, err := l.hand(n.ctx, c, n.cfg.Timeouts.TunnelAccept); err != nil {
		n.log.Warn("mesh: tunnel refused", "peer", pc.id.Short(), "err", err)
		reset(s, code)
		return
	}
	n.watchTunnel(c)
}

// takeTunnel counts a tunnel against peer's share, unless the share is in
// use.
func (n *Node) takeTunnel(peer identity.EndpointID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tunnelsOf[peer] >= n.cfg.Limits.MaxTunnelsPerPeer {
		return false
	}
	n.tunnelsOf[peer]++
	return true
}

func (n *Node) releaseTunnel(peer identity.EndpointID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tunnelsOf[peer]--; n.tunnelsOf[peer] <= 0 {
		delete(n.tunnelsOf, peer)
	}
	if len(n.tunnelsOf) == 0 && n.tunnelsIdle != nil {
		close(n.tunnelsIdle)
		n.tunnelsIdle = nil
	}
}

// flushTunnels gives the tunnels being served, once no new one is taken,
// Timeouts.TunnelFlush to end by themselves. A response the local API has
// finished may still be on its way to the peer: its last bytes are
// unacknowledged on the stream, and closing the connection now would lose
// them. The peer ends such a tunnel as soon as it has read the
// response to its end (the API closes idle connections as it stops).
func (n *Node) flushTunnels() {
	n.mu.Lock()
	var idle chan struct{}
	if len(n.tunnelsOf) > 0 {
		idle = make(chan struct{})
		n.tunnelsIdle = idle
	}
	n.mu.Unlock()
	if idle == nil {
		return
	}
	t := time.NewTimer(n.cfg.Timeouts.TunnelFlush)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		n.log.Info("mesh: closing tunnels still open at shutdown", "tunnels", len(n.tunnels), "after", n.cfg.Timeouts.TunnelFlush)
	}
}
