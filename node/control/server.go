package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// DefaultMaxStreams is how many owner-control streams of one connection
// are served at once.
const DefaultMaxStreams = 32

// ServerTimeouts bound the server's waits. Zero fields take the values
// shown, which are the protocol's where it names one.
type ServerTimeouts struct {
	// Authenticate is how long a connection has to present its first
	// accepted handshake before it is closed (10s): anyone can connect on
	// this ALPN, and only owners are worth holding a connection for.
	Authenticate time.Duration
	Handshake    time.Duration // to read a stream's handshake (2s)
	Request      time.Duration // to read each request (5s)
	Write        time.Duration // to write each response (5s)
	Command      time.Duration // for a config or lifecycle command to run (5s)
	Scan         time.Duration // for an inventory scan (30s)
}

// Config configures a Server.
type Config struct {
	// Self is this node's id: every request must target it.
	Self identity.EndpointID
	// Hostname, when set, is reported in config snapshots.
	Hostname string
	// Trust holds the owners whose certificates are accepted: normally
	// the owner of this node's own certificate and any owner_keys
	// configured. With none, every handshake is refused UNAUTHORIZED.
	// SetTrust replaces it while the server runs.
	Trust *owner.Trust
	// Recheck, when set, is called before a handshake is refused for want
	// of a trusted owner, and the trust asked again: the node looks at
	// its ownership certificate then, so one written a moment ago is
	// taken on its owner's first try.
	Recheck func()
	// Store holds the configuration (required).
	Store ConfigStore
	// LocalSecret is the local control credential (see SecretFile) the
	// REST facade requires of every request. With none the facade refuses
	// everything: on loopback any local user can connect, so reaching the
	// port proves nothing.
	LocalSecret string
	// Scanner and Lifecycle serve refresh_inventory and the model
	// lifecycle commands; without them those commands are refused
	// CONTROL_UNAVAILABLE.
	Scanner   Scanner
	Lifecycle Lifecycle
	// Splits, when set, pins the ranges of split models (the REST
	// facade's /split/pins); without it that route is refused
	// CONTROL_UNAVAILABLE.
	Splits SplitPinner
	// Pulls, when set, fetches model files into the models dir (the REST
	// facade's /models/pull); without it that route is refused
	// CONTROL_UNAVAILABLE.
	Pulls Puller
	// MaxStreams is the most streams served at once per connection
	// (DefaultMaxStreams).
	MaxStreams int
	Timeouts   ServerTimeouts
	// Now is the clock certificates are checked against (time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Server serves owner control. Build it with NewServer, register
// ServeConn with the mesh, and Close it when the node stops.
type Server struct {
	cfg  Config
	log  *slog.Logger
	base context.Context
	stop context.CancelFunc

	hub hub
	inv *coalescer // nil without a Scanner
	// trust is cfg.Trust, or what SetTrust put in its place.
	trust atomic.Pointer[owner.Trust]
	// localIDs number the requests of the REST facade.
	localIDs wire.RequestIDs
}

// SetTrust replaces the owners the server accepts, for handshakes from
// now on (a node that was given, or lost, its ownership certificate while
// it runs). Streams already authorised are not affected.
func (s *Server) SetTrust(t *owner.Trust) {
	if t == nil {
		t = owner.NewTrust()
	}
	s.trust.Store(t)
}

// NewServer checks cfg and builds a server.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Self.IsZero() {
		return nil, errors.New("control: server needs the node's id")
	}
	if cfg.Store == nil {
		return nil, errors.New("control: server needs a config store")
	}
	if cfg.Trust == nil {
		cfg.Trust = owner.NewTrust()
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	t := &cfg.Timeouts
	defaultDurations(
		durationDefault{&t.Authenticate, 10 * time.Second},
		durationDefault{&t.Handshake, 2 * time.Second},
		durationDefault{&t.Request, 5 * time.Second},
		durationDefault{&t.Write, 5 * time.Second},
		durationDefault{&t.Command, 5 * time.Second},
		durationDefault{&t.Scan, 30 * time.Second},
	)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "control")}
	s.trust.Store(cfg.Trust)
	s.base, s.stop = context.WithCancel(context.Background())
	if cfg.Scanner != nil {
		s.inv = &coalescer{scanner: cfg.Scanner, deadline: t.Scan, base: s.base}
	}
	st, err := s.state()
	if err != nil {
		return nil, err
	}
	s.hub.last = st
	return s, nil
}

// Close ends watches and in-flight scans. Connections end with the
// context ServeConn was given.
func (s *Server) Close() { s.stop() }

// NotifyConfigChanged tells watchers about a configuration the node
// changed other than through apply_config.
func (s *Server) NotifyConfigChanged() error {
	st, err := s.state()
	if err != nil {
		return err
	}
	s.hub.publish(st)
	return nil
}

// state reads the store.
func (s *Server) state() (configState, error) {
	rev, cfg := s.cfg.Store.Snapshot()
	h, err := ConfigHash(cfg)
	return configState{revision: rev, hash: h, config: cfg}, err
}

// ServeConn serves one mesh-llm-control/1 connection from peer, the
// identity it proved in the TLS handshake, until the connection or ctx
// ends. A connection that has not presented an accepted handshake within
// ServerTimeouts.Authenticate is closed. It has the signature of
// mesh.ControlHandler.
func (s *Server) ServeConn(ctx context.Context, conn *quic.Conn, peer identity.EndpointID) {
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(conn.Context(), cancel)
	stopOnServer := context.AfterFunc(s.base, cancel)
	a := &connAuth{}
	a.timer = time.AfterFunc(s.cfg.Timeouts.Authenticate, func() {
		if !a.done.Load() {
			conn.CloseWithError(mesh.CodeNotAdmitted, "no accepted owner-control handshake in time")
		}
	})
	permits := make(chan struct{}, s.cfg.MaxStreams)
	var wg sync.WaitGroup
	defer func() {
		a.timer.Stop()
		cancel()
		stopOnClose()
		stopOnServer()
		wg.Wait()
	}()
	for {
		// The permit comes first, so a peer can never have more than
		// MaxStreams workers, however many streams it opens.
		select {
		case permits <- struct{}{}:
		case <-ctx.Done():
			return
		}
		st, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-permits }()
			s.serveStream(ctx, st, peer, a)
		}()
	}
}

// connAuth is whether a connection has presented an accepted handshake.
type connAuth struct {
	done  atomic.Bool
	timer *time.Timer // closes the connection unless done first
}

func (a *connAuth) accepted() {
	a.done.Store(true)
	a.timer.Stop()
}

// serveStream runs one stream: the handshake, then requests until the
// client closes its side, a watch takes the stream over, or a read fails.
func (s *Server) serveStream(ctx context.Context, st *quic.Stream, peer identity.EndpointID, auth *connAuth) {
	defer st.Close()
	defer st.CancelRead(mesh.StreamCodeDone)
	log := s.log.With("peer", peer.Short())

	hctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Handshake)
	body, err := wire.ReadFrame(hctx, st, nil)
	cancel()
	if err != nil {
		if err != io.EOF {
			s.writeError(ctx, st, errorf(ErrInvalidHandshake.Code, "reading the handshake: %v", err))
		}
		return
	}
	if e := s.authorize(body, peer); e != nil {
		log.Debug("control: handshake refused", "code", CodeName(e.Code))
		s.writeError(ctx, st, e)
		return
	}
	auth.accepted()
	for {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Request)
		body, err = wire.ReadFrame(rctx, st, body[:0])
		cancel()
		if err == io.EOF {
			return
		}
		if err != nil {
			// The framing is lost (or the client is gone): answer if
			// we can, then give up the stream.
			s.writeError(ctx, st, errorf(ErrBadRequest.Code, "reading the request: %v", err))
			return
		}
		req, e := decodeRequest(body)
		if e == nil {
			e = s.checkAddress(req, peer)
		}
		if e != nil {
			log.Debug("control: request refused", "request_id", e.RequestID, "code", CodeName(e.Code))
			if !s.writeError(ctx, st, e) {
				return
			}
			continue
		}
		cmd := wire.RequestCommand(req)
		log.Debug("control: request", "command", cmd.String(), "request_id", req.GetRequestId())
		if cmd == wire.CommandWatchConfig {
			s.serveWatch(ctx, st, req)
			return
		}
		resp, e := s.execute(ctx, req)
		if e != nil {
			log.Debug("control: command failed", "command", cmd.String(), "request_id", req.GetRequestId(), "code", CodeName(e.Code))
			if !s.writeError(ctx, st, e) {
				return
			}
			continue
		}
		if !s.writeResponse(ctx, st, resp) {
			return
		}
	}
}

// authorize decodes the handshake and decides whether peer acts for a
// trusted owner.
func (s *Server) authorize(body []byte, peer identity.EndpointID) *Error {
	env, err := wire.DecodeOwnerControlEnvelope(body)
	if err != nil {
		return errorf(ErrInvalidHandshake.Code, "%v", err)
	}
	if env.GetHandshake() == nil {
		return errorf(ErrInvalidHandshake.Code, "the first envelope on a stream must be a handshake")
	}
	e := s.decide(env.GetHandshake().GetOwnership(), peer)
	if e != nil && e.Code == ErrUnauthorized.Code && s.cfg.Recheck != nil {
		s.cfg.Recheck()
		e = s.decide(env.GetHandshake().GetOwnership(), peer)
	}
	return e
}

// decide is authorize's verdict on a certificate under the trust now.
func (s *Server) decide(cert *nodev1.SignedNodeOwnership, peer identity.EndpointID) *Error {
	trust := s.trust.Load()
	if trust.Len() == 0 {
		return errorf(ErrUnauthorized.Code, "this node has no owner: on its machine, put its ownership certificate "+
			"(meshcli auth sign-node NODE_ID -o node.ownership) in its state dir, where it is taken at once, "+
			"or list your owner key in its control.owner_keys")
	}
	_, err := trust.Authorize(cert, peer, s.cfg.Now())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, owner.ErrUntrusted), errors.Is(err, owner.ErrExpired), errors.Is(err, owner.ErrNotYetValid):
		// A sound certificate that does not (or no longer) grants
		// control here.
		return errorf(ErrUnauthorized.Code, "%v", err)
	default:
		// Not a proof at all: malformed, forged, or bound to another
		// QUIC identity (a replay).
		return errorf(ErrInvalidHandshake.Code, "%v", err)
	}
}

// addressed is every command request: each names its requester and
// target.
type addressed interface {
	GetRequesterNodeId() []byte
	GetTargetNodeId() []byte
}

// checkAddress holds a request's requester to the connection's identity
// and its target to this node.
func (s *Server) checkAddress(req *nodev1.OwnerControlRequest, peer identity.EndpointID) *Error {
	a := commandOf(req).(addressed)
	var e *Error
	switch {
	case string(a.GetRequesterNodeId()) != string(peer[:]):
		e = errorf(ErrUnauthorized.Code, "requester_node_id is not the connection's identity %s", peer.Short())
	case string(a.GetTargetNodeId()) != string(s.cfg.Self[:]):
		e = errorf(ErrTargetMismatch.Code, "this is node %s", s.cfg.Self.Short())
	default:
		return nil
	}
	e.RequestID = req.GetRequestId()
	return e
}

func (s *Server) writeResponse(ctx context.Context, st *quic.Stream, resp *nodev1.OwnerControlResponse) bool {
	env, replaced := wire.ResponseEnvelope(resp)
	if replaced {
		s.log.Warn("control: response exceeded the frame limit; sent CONTROL_UNAVAILABLE instead",
			"command", wire.ResponseCommand(resp).String(), "request_id", resp.GetRequestId())
	}
	return s.write(ctx, st, env)
}

func (s *Server) writeError(ctx context.Context, st *quic.Stream, e *Error) bool {
	return s.write(ctx, st, e.envelope())
}

func (s *Server) write(ctx context.Context, st *quic.Stream, env *nodev1.OwnerControlEnvelope) bool {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Write)
	defer cancel()
	if err := wire.WriteFrame(wctx, st, env); err != nil {
		s.log.Debug("control: write failed", "err", err)
		return false
	}
	return true
}

// serveWatch streams config changes until the client closes its side of
// the stream or ctx ends.
func (s *Server) serveWatch(ctx context.Context, st *quic.Stream, req *nodev1.OwnerControlRequest) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The client sends nothing more: anything it does send, its FIN
		// included, ends the watch.
		var b [1]byte
		_, _ = st.Read(b[:])
		cancel()
	}()
	_ = s.watch(ctx, req, func(resp *nodev1.OwnerControlResponse) error {
		if !s.writeResponse(ctx, st, resp) {
			return errors.New("control: watch stream write failed")
		}
		return nil
	})
}

// watch sends the watch's first response (accepted, or the snapshot when
// asked), then an update for each newer revision, until send fails or ctx
// ends.
func (s *Server) watch(ctx context.Context, req *nodev1.OwnerControlRequest, send func(*nodev1.OwnerControlResponse) error) error {
	w, cur := s.hub.subscribe()
	defer s.hub.unsubscribe(w)
	first := &nodev1.OwnerControlWatchConfigResponse{}
	if req.GetWatchConfig().GetIncludeSnapshot() {
		first.Snapshot = s.snapshot(cur)
	} else {
		first.Accepted = &nodev1.OwnerControlWatchAccepted{TargetNodeId: s.cfg.Self[:]}
	}
	wrap := func(w *nodev1.OwnerControlWatchConfigResponse) *nodev1.OwnerControlResponse {
		return &nodev1.OwnerControlResponse{RequestId: req.GetRequestId(), WatchConfig: w}
	}
	if err := send(wrap(first)); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case st := <-w.ch:
			if st.revision < cur.revision || st.revision == cur.revision && st.hash == cur.hash {
				continue
			}
			cur = st
			u := &nodev1.OwnerControlConfigUpdate{NodeId: s.cfg.Self[:], Revision: st.revision, ConfigHash: st.hash[:], Config: st.config}
			if err := send(wrap(&nodev1.OwnerControlWatchConfigResponse{Update: u})); err != nil {
				return err
			}
		}
	}
}

// snapshot is st as the protocol reports it.
func (s *Server) snapshot(st configState) *nodev1.OwnerControlConfigSnapshot {
	snap := &nodev1.OwnerControlConfigSnapshot{NodeId: s.cfg.Self[:], Revision: st.revision, ConfigHash: st.hash[:], Config: st.config}
	if s.cfg.Hostname != "" {
		snap.Hostname = &s.cfg.Hostname
	}
	return snap
}

// asError makes any failure of a command an *Error: the node's own typed
// errors pass through, a deadline is CONTROL_UNAVAILABLE like any other
// failure to serve.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return errorf(ErrUnavailable.Code, "%v", err)
}
