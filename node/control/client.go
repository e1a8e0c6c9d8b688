package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// ClientTimeouts bound the client's waits. Zero fields take the protocol's
// values, shown.
type ClientTimeouts struct {
	Connect      time.Duration // QUIC connect (8s)
	OpenStream   time.Duration // to open a stream (2s)
	Handshake    time.Duration // to write the handshake (2s)
	RequestWrite time.Duration // to write a request (2s)
	Unary        time.Duration // get/apply_config response (5s)
	Inventory    time.Duration // refresh_inventory response: the node's 30s scan and a margin (35s)
	WatchAccept  time.Duration // the first watch_config response (5s)
	Lifecycle    time.Duration // load/unload/ensure/drain_model response (5s)
}

func (t *ClientTimeouts) defaults() {
	defaultDurations(
		durationDefault{&t.Connect, 8 * time.Second},
		durationDefault{&t.OpenStream, 2 * time.Second},
		durationDefault{&t.Handshake, 2 * time.Second},
		durationDefault{&t.RequestWrite, 2 * time.Second},
		durationDefault{&t.Unary, 5 * time.Second},
		durationDefault{&t.Inventory, 35 * time.Second},
		durationDefault{&t.WatchAccept, 5 * time.Second},
		durationDefault{&t.Lifecycle, 5 * time.Second},
	)
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Key is the client's QUIC identity.
	Key *identity.Key
	// Ownership is the owner's certificate for Key, presented in every
	// handshake.
	Ownership *nodev1.SignedNodeOwnership
	Timeouts  ClientTimeouts
}

// Client is an owner-control connection to one node. It is safe for
// concurrent use; each command runs on a stream of its own.
type Client struct {
	commands
	cfg    ClientConfig
	target identity.EndpointID
	udp    *net.UDPConn
	tr     *quic.Transport
	conn   *quic.Conn
}

// Dial connects to the node at addr, which must prove addr.ID, from a UDP
// socket of the client's own.
func Dial(ctx context.Context, addr mesh.EndpointAddr, cfg ClientConfig) (*Client, error) {
	if cfg.Key == nil || cfg.Ownership == nil {
		return nil, errors.New("control: a client needs a key and the owner's certificate for it")
	}
	if got := owner.EndpointOf(cfg.Ownership); got != cfg.Key.ID() {
		return nil, fmt.Errorf("control: the certificate is for %s, the client key is %s", got.Short(), cfg.Key.ID().Short())
	}
	if len(addr.Addrs) == 0 {
		return nil, fmt.Errorf("control: dial %s: %w", addr.ID.Short(), mesh.ErrNoAddress)
	}
	cfg.Timeouts.defaults()
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	tr := &quic.Transport{Conn: udp}
	qc := &quic.Config{
		HandshakeIdleTimeout:  cfg.Timeouts.Connect,
		MaxIdleTimeout:        30 * time.Second,
		KeepAlivePeriod:       10 * time.Second, // a watch may be quiet for hours
		MaxIncomingStreams:    -1,               // the node never opens streams to us
		MaxIncomingUniStreams: -1,
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.Timeouts.Connect)
	defer cancel()
	conn, err := mesh.DialQUIC(dctx, tr, cfg.Key, qc, addr.ID, identity.ALPNControl, addr.Addrs)
	if err != nil {
		tr.Close()
		udp.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	c := &Client{cfg: cfg, target: addr.ID, udp: udp, tr: tr, conn: conn}
	c.t = c
	return c, nil
}

// Target is the node the client is connected to.
func (c *Client) Target() identity.EndpointID { return c.target }

// Close hangs up.
func (c *Client) Close() error {
	c.conn.CloseWithError(mesh.CodeOK, "")
	c.tr.Close()
	return c.udp.Close()
}

func (c *Client) address() ([]byte, []byte) {
	from, to := c.cfg.Key.ID(), c.target
	return from[:], to[:]
}

// timeout is how long the node has to answer req.
func (c *Client) timeout(req *nodev1.OwnerControlRequest) time.Duration {
	t := &c.cfg.Timeouts
	switch wire.RequestCommand(req) {
	case wire.CommandGetConfig, wire.CommandApplyConfig:
		return t.Unary
	case wire.CommandRefreshInventory:
		return t.Inventory
	case wire.CommandWatchConfig:
		return t.WatchAccept
	}
	return t.Lifecycle
}

// open opens a stream and sends the handshake and req on it.
func (c *Client) open(ctx context.Context, req *nodev1.OwnerControlRequest) (*quic.Stream, error) {
	st, err := c.send(ctx, req)
	if st == nil || err == nil {
		return st, err
	}
	// A node that refuses the handshake answers with its reason and stops
	// reading, which can fail the request's write: the answer says more.
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeouts.Handshake)
	_, rerr := c.read(rctx, st, req)
	cancel()
	st.CancelRead(mesh.StreamCodeDone)
	st.CancelWrite(mesh.StreamCodeDone)
	var e *Error
	if errors.As(rerr, &e) {
		return nil, e
	}
	return nil, err
}

// send opens a stream and writes the handshake and req. A failed write
// returns the stream too, for open to read the node's answer from.
func (c *Client) send(ctx context.Context, req *nodev1.OwnerControlRequest) (*quic.Stream, error) {
	octx, cancel := context.WithTimeout(ctx, c.cfg.Timeouts.OpenStream)
	st, err := c.conn.OpenStreamSync(octx)
	cancel()
	if err != nil {
		return nil, c.failure("open stream", err)
	}
	for _, step := range []struct {
		name    string
		env     *nodev1.OwnerControlEnvelope
		timeout time.Duration
	}{
		{"write handshake", wire.HandshakeEnvelope(c.cfg.Ownership), c.cfg.Timeouts.Handshake},
		{"write request", wire.RequestEnvelope(req), c.cfg.Timeouts.RequestWrite},
	} {
		wctx, cancel := context.WithTimeout(ctx, step.timeout)
		err := wire.WriteFrame(wctx, st, step.env)
		cancel()
		if err != nil {
			return st, c.failure(step.name, err)
		}
	}
	return st, nil
}

// read reads and checks the next response to req.
func (c *Client) read(ctx context.Context, st *quic.Stream, req *nodev1.OwnerControlRequest) (*nodev1.OwnerControlResponse, error) {
	body, err := wire.ReadFrame(ctx, st, nil)
	if err != nil {
		return nil, c.failure("read response", err)
	}
	env, err := wire.DecodeOwnerControlEnvelope(body)
	if err != nil {
		return nil, fmt.Errorf("control: %s answered with a bad envelope: %w", c.target.Short(), err)
	}
	return checkAnswer(env, req)
}

func (c *Client) call(ctx context.Context, req *nodev1.OwnerControlRequest) (*nodev1.OwnerControlResponse, error) {
	st, err := c.open(ctx, req)
	if err != nil {
		return nil, err
	}
	defer st.CancelRead(mesh.StreamCodeDone)
	st.Close() // one command per stream: that was all
	rctx, cancel := context.WithTimeout(ctx, c.timeout(req))
	defer cancel()
	return c.read(rctx, st, req)
}

func (c *Client) watch(ctx context.Context, req *nodev1.OwnerControlRequest) (ConfigWatch, error) {
	st, err := c.open(ctx, req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout(req))
	first, err := c.read(rctx, st, req)
	cancel()
	if err != nil {
		st.CancelRead(mesh.StreamCodeDone)
		st.CancelWrite(mesh.StreamCodeDone)
		return nil, err
	}
	return &quicWatch{c: c, st: st, req: req, pending: first.GetWatchConfig()}, nil
}

// quicWatch is a watch on its own stream; closing the stream ends it.
type quicWatch struct {
	c       *Client
	st      *quic.Stream
	req     *nodev1.OwnerControlRequest
	pending *nodev1.OwnerControlWatchConfigResponse
}

func (w *quicWatch) Next(ctx context.Context) (*nodev1.OwnerControlWatchConfigResponse, error) {
	if p := w.pending; p != nil {
		w.pending = nil
		return p, nil
	}
	resp, err := w.c.read(ctx, w.st, w.req)
	if err != nil {
		return nil, err
	}
	return resp.GetWatchConfig(), nil
}

func (w *quicWatch) Close() error {
	w.st.CancelRead(mesh.StreamCodeDone)
	return w.st.Close()
}

// failure describes a transport failure; a node without owner control
// closes the connection with CodeControlUnavailable, which becomes
// CONTROL_UNAVAILABLE.
func (c *Client) failure(step string, err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == mesh.CodeControlUnavailable {
		return &Error{Code: ErrUnavailable.Code, Message: fmt.Sprintf("%s does not serve owner control: %s", c.target.Short(), ae.ErrorMessage)}
	}
	return fmt.Errorf("control: %s to %s: %w", step, c.target.Short(), err)
}
