package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Node is this process's membership in a mesh. Build it with New, run it
// with Serve; every other method is safe for concurrent use.
type Node struct {
	cfg Config
	key *identity.Key
	id  identity.EndpointID
	log *slog.Logger

	udp        *net.UDPConn
	tr         *quic.Transport
	ln         *quic.Listener
	quicConf   *quic.Config
	local      netip.AddrPort
	advertised []netip.AddrPort

	control atomic.Pointer[ControlHandler]
	subs    subprotocols
	httpLn  atomic.Pointer[tunnelListener] // where HTTP tunnels go (ListenHTTP)
	events  events
	// tunnelBytes counts what the HTTP tunnels carry (TunnelBytes).
	tunnelBytes tunnelBytes

	// ctx ends when the node begins to stop; all its work derives from it.
	// member ends earlier, at Leave: the work of staying in the mesh
	// (gossip, dials, redials) derives from it.
	ctx       context.Context
	cancel    context.CancelFunc
	member    context.Context
	endMember context.CancelFunc
	state     atomic.Int32
	failed    chan error    // a fatal listener error, for Serve
	started   chan struct{} // closed once Serve takes part in the mesh, or fails to
	startOnce sync.Once

	// goMu orders goroutine starts against shutdown's Wait.
	goMu     sync.Mutex
	stopping bool
	wg       sync.WaitGroup

	// exchanges counts the gossip exchanges this node has started; one
	// starts only while member is live (Node.mu orders the two), and
	// sendLeaving waits for them (drainExchanges).
	exchanges sync.WaitGroup

	dialKick chan struct{}
	tunnels  chan struct{} // a slot per tunnel being served
	mem      frameMemory
	routes   routeCache

	mu          sync.Mutex
	peers       map[identity.EndpointID]*peer // peers with a connection, and admitted ones
	nAdmitted   int
	nConns      int
	strangers   int // incoming connections not yet admitted (Limits.MaxStrangerConns)
	connSeq     uint64
	heard       map[identity.EndpointID]*heardPeer
	heardFrom   map[identity.EndpointID]int // heard-of peers whose addresses each peer chose
	routeGen    uint64                      // counts changes to what the route table lists
	tunnelsOf   map[identity.EndpointID]int // tunnels being served for each peer
	tunnelsIdle chan struct{}               // closed when tunnelsOf empties, while shutdown waits for that
	dialing     int
	controls    map[*quic.Conn]struct{}
	self        *nodev1.PeerAnnouncement
	selfAt      time.Time
}

// initialStreamWindow is where a stream's receive window starts (quic-go's
// default); it grows to Limits.StreamWindow as the stream is read.
const initialStreamWindow = 512 << 10

// Node states.
const (
	stateNew int32 = iota
	stateServing
	stateLeaving // PeerLeaving sent; what is in flight finishes
	stateStopping
	stateClosed
)

// New binds the node's UDP socket and QUIC listener; Serve runs it. A Node
// that is never served must be closed with Close.
func New(cfg Config, key *identity.Key, logger *slog.Logger) (*Node, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if key == nil {
		return nil, errors.New("mesh: no node key")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ua, err := resolveListen(c.ListenAddr)
	if err != nil {
		return nil, err
	}
	network := "udp" // dual-stack on an unspecified host
	if ua.IP != nil {
		network = "udp6"
		if ua.IP.To4() != nil {
			network = "udp4"
		}
	}
	udp, err := net.ListenUDP(network, ua)
	if err != nil {
		return nil, fmt.Errorf("mesh: listen: %w", err)
	}
	n := &Node{
		cfg:       c,
		key:       key,
		id:        key.ID(),
		log:       logger.With("node", key.ID().Short()),
		udp:       udp,
		failed:    make(chan error, 1),
		started:   make(chan struct{}),
		dialKick:  make(chan struct{}, 1),
		tunnels:   make(chan struct{}, c.Limits.MaxTunnels),
		mem:       newFrameMemory(c.Limits),
		peers:     make(map[identity.EndpointID]*peer),
		heard:     make(map[identity.EndpointID]*heardPeer),
		heardFrom: make(map[identity.EndpointID]int),
		tunnelsOf: make(map[identity.EndpointID]int),
		controls:  make(map[*quic.Conn]struct{}),
	}
	la := udp.LocalAddr().(*net.UDPAddr).AddrPort()
	n.local = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	if len(c.AdvertiseAddrs) > 0 {
		n.advertised = mergeAddrs(c.AdvertiseAddrs)
	} else {
		ifaces, err := systemInterfaces()
		if err != nil {
			n.log.Warn("mesh: cannot list network interfaces; advertising none", "err", err)
		}
		n.advertised = advertiseAddrs(n.local, ifaces)
	}
	n.quicConf = &quic.Config{
		HandshakeIdleTimeout:       c.Timeouts.Handshake,
		MaxIdleTimeout:             c.Timeouts.Idle,
		KeepAlivePeriod:            c.Timeouts.KeepAlive,
		MaxIncomingStreams:         c.Limits.MaxIncomingStreams,
		MaxIncomingUniStreams:      -1, // every mesh-llm/1 stream is bidirectional
		MaxStreamReceiveWindow:     c.Limits.StreamWindow,
		MaxConnectionReceiveWindow: c.Limits.ConnWindow,
		// The connection's window is whole from the start: quic-go would
		// begin it at 1.5 stream windows and widen it only as data is read,
		// so two stalled tunnels on a fresh connection would stop its
		// gossip. Stream windows still start small and grow with use.
		InitialStreamReceiveWindow:     min(initialStreamWindow, c.Limits.StreamWindow),
		InitialConnectionReceiveWindow: c.Limits.ConnWindow,
	}
	serverConf := n.quicConf.Clone()
	serverConf.GetConfigForClient = func(ci *quic.ClientInfo) (*quic.Config, error) {
		if ua, ok := ci.RemoteAddr.(*net.UDPAddr); ok && !n.allowed(ua.AddrPort()) {
			return nil, fmt.Errorf("mesh: connection from %v refused: address not allowed", ua)
		}
		n.mu.Lock()
		full := n.nConns >= c.Limits.MaxConns
		n.mu.Unlock()
		if full {
			return nil, fmt.Errorf("mesh: %d connections, the limit", c.Limits.MaxConns)
		}
		return n.quicConf, nil // nil would mean quic-go's defaults
	}
	serverTLS, err := identity.ServerConfig(key, identity.ALPNMesh, identity.ALPNControl)
	if err != nil {
		udp.Close()
		return nil, err
	}
	n.tr = &quic.Transport{Conn: udp}
	n.ln, err = n.tr.Listen(serverTLS, serverConf)
	if err != nil {
		n.tr.Close()
		udp.Close()
		return nil, fmt.Errorf("mesh: quic listen: %w", err)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.member, n.endMember = context.WithCancel(n.ctx)
	return n, nil
}

// ID is this node's EndpointID.
func (n *Node) ID() identity.EndpointID { return n.id }

// LocalAddr is the bound UDP address.
func (n *Node) LocalAddr() netip.AddrPort { return n.local }

// EndpointAddr is how peers reach this node: its id and advertised
// addresses (what serialized_addr and invite tokens carry).
func (n *Node) EndpointAddr() EndpointAddr {
	return EndpointAddr{ID: n.id, Addrs: slices.Clone(n.advertised)}
}

// HandleControl registers the handler for mesh-llm-control/1 connections.
// It runs in its own goroutine per connection with the peer's proven
// identity, and must return when ctx ends; the connection is closed when it
// returns. Until one is registered such connections are refused with
// CodeControlUnavailable. Nil unregisters.
func (n *Node) HandleControl(h ControlHandler) {
	if h == nil {
		n.control.Store(nil)
		return
	}
	n.control.Store(&h)
}

// ControlHandler serves one owner-control connection.
type ControlHandler func(ctx context.Context, conn *quic.Conn, peer identity.EndpointID)

// Subscribe returns peer events until ctx ends or the node stops, when the
// channel is closed. A subscriber that falls buffer events behind misses
// events rather than slowing the mesh.
func (n *Node) Subscribe(ctx context.Context, buffer int) <-chan Event {
	return n.events.subscribe(ctx, buffer)
}

// Serve runs the node until ctx ends, then sends PeerLeaving to every peer
// (unless Leave did), closes every connection and returns nil once all of
// its goroutines have. It returns early with an error only if the listener
// fails.
func (n *Node) Serve(ctx context.Context) error {
	defer n.markStarted() // on every return too, so no one waits on a Serve that failed
	if !n.state.CompareAndSwap(stateNew, stateServing) {
		return fmt.Errorf("mesh: Serve called twice or after Close: %w", ErrClosed)
	}
	if _, err := n.refreshSelf(); err != nil {
		n.shutdown(false)
		return err
	}
	n.log.Info("mesh: serving", "listen", n.local, "advertise", n.advertised)
	n.spawn(n.acceptLoop)
	n.spawn(n.dialLoop)
	for _, b := range n.cfg.Bootstrap {
		n.hear(b)
	}
	n.markStarted()
	var err error
	select {
	case <-ctx.Done():
	case err = <-n.failed:
	}
	n.shutdown(err == nil)
	return err
}

// Started is closed once Serve has begun: from then on the node dials,
// accepts and gossips, unless Serve has already returned its error. A
// caller that announces the node ready waits for it, so that a join asked
// at once does not find the mesh not yet serving.
func (n *Node) Started() <-chan struct{} { return n.started }

func (n *Node) markStarted() { n.startOnce.Do(func() { close(n.started) }) }

// Close releases a node that was never served. On a serving node it does
// nothing: cancel Serve's context instead.
func (n *Node) Close() error {
	if n.state.CompareAndSwap(stateNew, stateStopping) {
		n.shutdown(false)
	}
	return nil
}

// spawn runs f in a goroutine that shutdown waits for, unless shutdown has
// begun, when it reports false and f does not run.
func (n *Node) spawn(f func()) bool {
	n.goMu.Lock()
	defer n.goMu.Unlock()
	if n.stopping {
		return false
	}
	n.wg.Go(f)
	return true
}

func (n *Node) serving() bool { return n.state.Load() == stateServing }

// Leave tells every admitted peer that this node is leaving (PeerLeaving,
// each acknowledged within Timeouts.Leave or ctx) and stops taking part in
// the mesh: no more gossip, dials or redials; new connections and new HTTP
// tunnels from peers are refused (ErrTunnelRefused at their end, so they
// try another host), and so are new tunnels of ours. The connections there
// are, and the tunnels in flight on them, keep working until Serve's
// context ends, which then closes them without a second PeerLeaving. The
// peers forget this node at once but keep its connections for the tunnels
// in flight. Leave is for a clean shutdown: there is no rejoining short of
// a new Node. It reports ErrNotServing unless the node is serving, and
// returns nil at once if it has left already.
func (n *Node) Leave(ctx context.Context) error {
	if !n.state.CompareAndSwap(stateServing, stateLeaving) {
		if n.state.Load() == stateLeaving {
			return nil
		}
		return ErrNotServing
	}
	n.endMember()
	n.log.Info("mesh: leaving; connections stay for what is in flight")
	n.sendLeaving(ctx)
	return nil
}

// shutdown stops the node: PeerLeaving to admitted peers (when leave, and
// Leave has not sent it), then every goroutine ends and every connection
// closes.
func (n *Node) shutdown(leave bool) {
	if n.state.Swap(stateStopping) == stateLeaving {
		leave = false // said already
	}
	n.endMember()
	if leave {
		n.sendLeaving(context.Background())
	}
	n.goMu.Lock()
	n.stopping = true
	n.goMu.Unlock()
	n.flushTunnels()
	n.cancel()

	n.mu.Lock()
	var conns []*quic.Conn
	for _, p := range n.peers {
		for _, pc := range p.conns {
			conns = append(conns, pc.conn)
		}
	}
	for c := range n.controls {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.CloseWithError(CodeLeaving, "node shutting down") })
	}
	wg.Wait()
	n.ln.Close()
	n.tr.Close()
	n.udp.Close()
	n.wg.Wait()
	n.events.close()
	n.state.Store(stateClosed)
	n.log.Info("mesh: stopped")
}

// fail reports a fatal error to Serve.
func (n *Node) fail(err error) {
	select {
	case n.failed <- err:
	default:
	}
}

// refreshSelf rebuilds the self announcement from Config.Self, reporting
// whether it changed. An announcement that fails validation is refused and
// the previous one kept.
func (n *Node) refreshSelf() (changed bool, err error) {
	var a *nodev1.PeerAnnouncement
	if n.cfg.Self != nil {
		if s := n.cfg.Self(); s != nil {
			a = proto.Clone(s).(*nodev1.PeerAnnouncement)
		}
	}
	if a == nil {
		a = &nodev1.PeerAnnouncement{}
	}
	a.EndpointId = bytes.Clone(n.id[:])
	if n.cfg.Version != "" {
		a.Version = proto.String(n.cfg.Version)
	}
	a.MeshId = nil
	if n.cfg.MeshID != "" {
		a.MeshId = proto.String(n.cfg.MeshID)
	}
	a.SerializedAddr, err = json.Marshal(n.EndpointAddr())
	if err != nil {
		return false, fmt.Errorf("mesh: encode own address: %w", err)
	}
	clearLatency(a)
	a.Subprotocols = n.subs.advertise(a.Subprotocols)
	if err := wire.ValidatePeerAnnouncement(a); err != nil {
		return false, fmt.Errorf("mesh: own announcement is invalid: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	changed = !proto.Equal(a, n.self)
	n.self, n.selfAt = a, time.Now()
	if changed {
		n.routeGen++
	}
	return changed, nil
}

// UpdateSelf re-reads Config.Self now and, if the announcement changed,
// gossips it to every peer at once rather than at the next interval. Call it
// when served models or admission state change.
func (n *Node) UpdateSelf() error {
	changed, err := n.refreshSelf()
	if err != nil {
		return err
	}
	if changed {
		n.kickAll(identity.EndpointID{})
	}
	return nil
}

// selfAnnouncement returns a copy of the current self announcement,
// refreshed when older than half a gossip interval.
func (n *Node) selfAnnouncement() *nodev1.PeerAnnouncement {
	n.mu.Lock()
	stale := time.Since(n.selfAt) > n.cfg.GossipInterval/2
	n.mu.Unlock()
	if stale {
		if _, err := n.refreshSelf(); err != nil {
			n.log.Error("mesh: keeping the previous self announcement", "err", err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return proto.Clone(n.self).(*nodev1.PeerAnnouncement)
}

func clearLatency(a *nodev1.PeerAnnouncement) {
	a.RttMs, a.LatencyMs, a.LatencySource, a.LatencyAgeMs, a.LatencyObserverId = nil, nil, nil, nil, nil
}

// jittered is one gossip wait: the interval varied by up to ±jitter.
func (n *Node) jittered() time.Duration {
	f := 1 + n.cfg.GossipJitter*(2*rand.Float64()-1)
	return time.Duration(float64(n.cfg.GossipInterval) * f)
}

// Peers returns a snapshot of the admitted peers, sorted by id.
func (n *Node) Peers() []Peer {
	n.mu.Lock()
	out := make([]Peer, 0, n.nAdmitted)
	for _, p := range n.peers {
		if p.admitted {
			out = append(out, p.snapshot())
		}
	}
	n.mu.Unlock()
	slices.SortFunc(out, func(a, b Peer) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return out
}

// Peer returns the admitted peer id.
func (n *Node) Peer(id identity.EndpointID) (Peer, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.peers[id]
	if p == nil || !p.admitted {
		return Peer{}, false
	}
	return p.snapshot(), true
}

// PeersHosting returns the admitted peers that serve model and take remote
// work, best first: ACCEPTING, then legacy peers that do not say, then
// ACCEPTING_DEPRIORITIZED; within each, lowest RTT first. Paused peers are
// left out.
func (n *Node) PeersHosting(model string) []Peer {
	return rankHosts(n.Peers(), model)
}

// RouteTable is what this node answers on ROUTE_REQUEST: an entry per
// (node, served model) over itself and its admitted peers, and the mesh
// id. Entries past what one frame holds are left out, so that peers
// announcing more models than fit cost the table its tail, not its
// delivery.
func (n *Node) RouteTable() *nodev1.RouteTable {
	anns := []*nodev1.PeerAnnouncement{n.selfAnnouncement()}
	n.mu.Lock()
	for _, p := range n.peers {
		if !p.admitted {
			continue
		}
		if p.ann != nil {
			anns = append(anns, p.ann)
		} else {
			anns = append(anns, &nodev1.PeerAnnouncement{EndpointId: p.id[:]})
		}
	}
	entries := routeEntries(anns) // copies what it keeps
	n.mu.Unlock()
	rt := &nodev1.RouteTable{Entries: entries, Gen: wire.ProtocolGeneration}
	if n.cfg.MeshID != "" {
		rt.MeshId = proto.String(n.cfg.MeshID)
	}
	rt.Entries = trimToFit(rt.Entries, entriesField, proto.Size(rt), wire.MaxControlFrameBytes, 0)
	return rt
}
