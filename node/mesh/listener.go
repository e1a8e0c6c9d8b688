package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
)

// ListenHTTP returns the listener on which the HTTP tunnels peers open to
// this node (TUNNEL_HTTP, 0x04) arrive, for the local HTTP API to serve:
// each Accept returns one tunnel, a net.Conn over its QUIC stream whose
// Peer method names the peer that opened it, as its connection's TLS
// handshake proved it. No socket is involved, so nothing on this machine
// reaches what the listener serves except through the mesh.
//
// Tunnels are refused (ErrTunnelRefused at the peer) while no listener is
// open, once it is closed, and when none is accepted within
// Timeouts.TunnelAccept. One listener is open at a time.
func (n *Node) ListenHTTP() (net.Listener, error) {
	l := &tunnelListener{
		n:      n,
		conns:  make(chan *servedTunnel),
		closed: make(chan struct{}),
	}
	if !n.httpLn.CompareAndSwap(nil, l) {
		return nil, errors.New("mesh: an HTTP tunnel listener is open already")
	}
	return l, nil
}

// tunnelListener is what ListenHTTP returns.
type tunnelListener struct {
	n      *Node
	conns  chan *servedTunnel // unbuffered: a tunnel is handed to an Accept in progress, or not at all
	closed chan struct{}
	once   sync.Once
}

func (l *tunnelListener) Accept() (net.Conn, error) {
	select {
	case <-l.closed: // before a tunnel that is ready too
		return nil, fmt.Errorf("mesh: HTTP tunnel listener: %w", net.ErrClosed)
	default:
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("mesh: HTTP tunnel listener: %w", net.ErrClosed)
	}
}

// Close stops the listener; tunnels that arrive afterwards are refused.
// Those accepted already carry on.
func (l *tunnelListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.n.httpLn.CompareAndSwap(l, nil)
	})
	return nil
}

func (l *tunnelListener) Addr() net.Addr { return PeerAddr{ID: l.n.id, UDP: l.n.local} }

// hand gives c to an Accept within timeout, or says why not and with
// which stream code to refuse it.
func (l *tunnelListener) hand(ctx context.Context, c *servedTunnel, timeout time.Duration) (quic.StreamErrorCode, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l.conns <- c:
		return 0, nil
	case <-l.closed:
		return StreamCodeTunnelUnavailable, errors.New("the local API stopped taking tunnels")
	case <-t.C:
		return StreamCodeTunnelUnavailable, fmt.Errorf("the local API took no tunnel within %v", timeout)
	case <-ctx.Done():
		return StreamCodeShutdown, errors.New("node shutting down")
	}
}

// PeerAddr is the address of either end of a served HTTP tunnel: a node's
// endpoint id and the UDP address it was reached at. It is deliberately
// not a host:port, so that nothing mistakes a peer for a local client.
type PeerAddr struct {
	ID  identity.EndpointID
	UDP netip.AddrPort
}

func (a PeerAddr) Network() string { return "mesh" }
func (a PeerAddr) String() string  { return a.ID.String() + "@" + a.UDP.String() }

// servedTunnel is this node's end of a tunnel a peer opened: the
// connection the local HTTP API serves. Closing it ends what this node
// sends (a FIN after everything written); the tunnel then lasts until the
// peer has ended its side too, so that a shutdown waiting for tunnels
// does not cut off an answer before the peer has read it (see
// flushTunnels).
type servedTunnel struct {
	s      *quic.Stream
	peer   identity.EndpointID
	local  PeerAddr
	remote PeerAddr
	last   atomic.Int64 // unix ns of the last byte either way
	bytes  *tunnelBytes // the node's count of tunnel bytes

	readMu  sync.Mutex // held by each Read, and by drain, which must follow the server's last
	writeMu sync.Mutex // held by each Write and CloseWrite

	mu      sync.Mutex // orders Close, abort and read deadlines
	closed  atomic.Bool
	aborted bool
	ended   chan struct{} // closed at Close or abort
}

func newServedTunnel(s *quic.Stream, peer identity.EndpointID, from netip.AddrPort, local PeerAddr, bytes *tunnelBytes) *servedTunnel {
	c := &servedTunnel{s: s, peer: peer, local: local, remote: PeerAddr{ID: peer, UDP: from}, bytes: bytes, ended: make(chan struct{})}
	c.touch()
	return c
}

// Peer is the endpoint that opened the tunnel, as its QUIC connection's
// handshake proved it.
func (c *servedTunnel) Peer() identity.EndpointID { return c.peer }

func (c *servedTunnel) touch()               { c.last.Store(time.Now().UnixNano()) }
func (c *servedTunnel) quiet() time.Duration { return time.Since(time.Unix(0, c.last.Load())) }

func (c *servedTunnel) Read(b []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.s.Read(b)
	if n > 0 {
		c.touch()
		c.bytes.in.Add(uint64(n))
	}
	if err != nil && c.closed.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		err = net.ErrClosed // Close set the deadline to wake this read
	}
	return n, err
}

func (c *servedTunnel) Write(b []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.s.Write(b)
	if n > 0 {
		c.touch()
		c.bytes.out.Add(uint64(n))
	}
	return n, err
}

// CloseWrite ends what this node sends; the peer's bytes can still be
// read. net/http calls it before closing a connection it gave up on.
func (c *servedTunnel) CloseWrite() error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return net.ErrClosed
	}
	return c.s.Close()
}

// Close ends the server's use of the tunnel: a read in progress returns,
// and the send side ends with a FIN after what was written, or, if a
// write is in progress on another goroutine, is reset (the server gave up
// on it). It does not wait for the peer.
func (c *servedTunnel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	c.closed.Store(true)
	c.s.SetReadDeadline(time.Unix(1, 0))
	if c.writeMu.TryLock() {
		c.s.Close()
		c.writeMu.Unlock()
	} else {
		c.s.CancelWrite(StreamCodeDone)
	}
	close(c.ended)
	return nil
}

// abort resets both directions with code: the tunnel went idle, or the
// node is stopping. Whatever the server does with the connection next
// fails.
func (c *servedTunnel) abort(code quic.StreamErrorCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		return
	}
	c.aborted = true
	reset(c.s, code)
	if !c.closed.Swap(true) {
		close(c.ended)
	}
}

// drain reads what the peer still sends, discarding it, until it ends its
// side: its FIN is the sign that it has read the answer to its end. A
// tunnel quiet for idle, counted from its last byte either way, is reset.
func (c *servedTunnel) drain(idle time.Duration) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	var buf [512]byte
	for {
		c.s.SetReadDeadline(time.Unix(0, c.last.Load()).Add(idle))
		n, err := c.s.Read(buf[:])
		if n > 0 {
			c.touch()
		}
		switch {
		case err == nil:
			continue
		case err == io.EOF:
			c.s.CancelRead(StreamCodeDone) // both ends finished; release the stream
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.abort(StreamCodeTimeout)
		}
		return // else reset by the peer, or aborted
	}
}

func (c *servedTunnel) LocalAddr() net.Addr  { return c.local }
func (c *servedTunnel) RemoteAddr() net.Addr { return c.remote }

func (c *servedTunnel) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.s.SetWriteDeadline(t)
}

// SetReadDeadline is the server's; once the tunnel is closed it is
// ignored, so that it cannot undo the deadline Close set.
func (c *servedTunnel) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	return c.s.SetReadDeadline(t)
}

func (c *servedTunnel) SetWriteDeadline(t time.Time) error { return c.s.SetWriteDeadline(t) }

// watchTunnel holds a handed-over tunnel until it has ended at both ends:
// the server closed it and the peer ended its side. A tunnel with no
// bytes either way for Timeouts.TunnelIdle is reset with
// StreamCodeTimeout, and one still open when the node stops, with
// StreamCodeShutdown.
func (n *Node) watchTunnel(c *servedTunnel) {
	stop := context.AfterFunc(n.ctx, func() { c.abort(StreamCodeShutdown) })
	defer stop()
	idle := n.cfg.Timeouts.TunnelIdle
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-c.ended:
			c.drain(idle)
			return
		case <-timer.C:
			if quiet := c.quiet(); quiet < idle {
				timer.Reset(idle - quiet)
				continue
			}
			c.abort(StreamCodeTimeout)
			return
		}
	}
}
