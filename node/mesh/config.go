package mesh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// DefaultPort is the UDP port of the mesh listener.
const DefaultPort = 9338

// SelfFunc returns what this node announces about itself: role, http_port,
// hardware, models on disk, served and hosted (with CompactModelMetadata
// and sizes), admission state. The mesh fills endpoint_id, version, mesh_id,
// serialized_addr and the latency fields itself, overwriting any the
// function sets. It is called from several goroutines and must not block;
// the Node never modifies what it returns.
type SelfFunc func() *nodev1.PeerAnnouncement

// Config configures a Node. The zero value, with a Self function, is a
// working node on UDP 9338 on every interface.
type Config struct {
	// ListenAddr is the UDP address to bind: "host:port", ":9338" by
	// default. A specific IP pins the node to that interface, and only that
	// address is advertised (--bind-ip): on a multi-NIC or Docker host
	// this keeps a bridge address such as 172.17.0.1 out of gossip.
	ListenAddr string
	// AdvertiseAddrs, when set, are the addresses announced in
	// serialized_addr instead of those found on the interfaces.
	AdvertiseAddrs []netip.AddrPort

	// MeshID is announced in the self entry and in route tables.
	MeshID string
	// Version is the software version announced in gossip.
	Version string
	// Self supplies the self announcement; see SelfFunc. Nil announces a
	// bare node with no role.
	Self SelfFunc
	// Bootstrap peers are dialled at start and redialled, with backoff,
	// until each has been joined once.
	Bootstrap []EndpointAddr
	// AllowAddr, when set, says which addresses the node talks to: it
	// dials no other, whoever named it (Dial's caller, a bootstrap entry,
	// a peer's gossip), and refuses connections from others. LAN-only mode
	// allows LAN addresses alone. Nil allows every address.
	AllowAddr func(netip.AddrPort) bool

	// GossipInterval is the period of re-gossip with each peer; each wait
	// is varied by up to ±GossipJitter of it so that peers do not
	// synchronise.
	GossipInterval time.Duration
	GossipJitter   float64

	Timeouts Timeouts
	Limits   Limits

	// Now is the clock for timestamps (admission times, latency ages).
	// Nil means time.Now.
	Now func() time.Time
}

// Timeouts bound every wait on a peer. Zero fields take the defaults shown.
type Timeouts struct {
	Handshake    time.Duration // QUIC+TLS handshake idle timeout (5s)
	Idle         time.Duration // a connection with no packets for this long is dead (20s)
	KeepAlive    time.Duration // keep-alive period, well inside Idle (5s)
	Admission    time.Duration // a peer with no valid gossip by then is dropped (30s)
	StreamHeader time.Duration // to read a stream's type byte (5s)
	Gossip       time.Duration // one gossip or route-table exchange (5s)
	Confirm      time.Duration // reachability check before evicting a peer (3s, the protocol's)
	Leave        time.Duration // to deliver PeerLeaving at shutdown (1s)
	LeaveDrain   time.Duration // a peer that left keeps a connection with HTTP tunnels in flight this long at most (30s)
	TunnelAccept time.Duration // for the local HTTP API to accept a tunnel (ListenHTTP) before it is refused (5s)
	TunnelIdle   time.Duration // a tunnel with no bytes either way for this long is closed (5m)
	TunnelFlush  time.Duration // at shutdown, tunnels being served may finish this long before the connections close (2s)
	Redundant    time.Duration // age after which an idle duplicate connection is closed (5s)
	RedialMin    time.Duration // first backoff when dialling a heard-of peer fails (1s)
	RedialMax    time.Duration // backoff ceiling (1m)
}

// Limits bound what one peer, or all of them, can make this node hold.
// Zero fields take the defaults shown.
type Limits struct {
	MaxIncomingStreams int64   // concurrent streams a peer may open on one connection (128)
	StreamRate         float64 // streams a connection may open per second, sustained (100)
	StreamBurst        int     // ... and in a burst (200)
	MaxStrikes         int     // rejected streams before a connection is closed (16)
	MaxPeers           int     // admitted peers (256)
	MaxConns           int     // live connections in all (1024)
	MaxConnsPerPeer    int     // live connections to one peer (4)
	MaxStrangerConns   int     // incoming connections not yet admitted, from accept to admission or close; beyond it: CodeBusy (16; see ConnWindow)
	MaxHeard           int     // peers heard of in gossip and waiting to be dialled (1024)
	MaxHeardPerPeer    int     // ... of them whose addresses one peer's gossip chose (MaxPeers: one member can name a full mesh)
	MaxDialsInFlight   int     // concurrent dials of heard-of peers (4)
	MaxControlConns    int     // mesh-llm-control/1 connections at once, apart from MaxConns (32)
	MaxTunnels         int     // TUNNEL_HTTP streams served at once, from all peers (256)
	MaxTunnelsPerPeer  int     // ... of them from one peer (half of MaxTunnels, at most 3/4 of MaxIncomingStreams: the rest stay free for its gossip)

	// MaxSubprotocolStreamsPerPeer bounds the SUBPROTOCOL streams one peer
	// may hold open at once (16).
	MaxSubprotocolStreamsPerPeer int

	// FrameMemory bounds, node-wide, the memory of the frames peers send:
	// a body is charged its declared length before it is allocated or read,
	// and a frame being decoded the most node/wire lets one take decoded
	// (64 MiB, kept apart for decoding). Both wait for memory within the
	// stream's deadline; a frame that could never fit is refused at once.
	// A connection not yet admitted may hold StrangerFrameMemory of bodies,
	// and all of them together half of what bodies may hold, so strangers
	// cannot starve admitted peers; an admitted peer, over all its
	// connections, PeerFrameMemory, so that one cannot starve the others.
	FrameMemory         int64 // (256 MiB; at least 72 MiB: one frame decoding, one being read)
	StrangerFrameMemory int64 // (32 MiB)
	PeerFrameMemory     int64 // (32 MiB)
	// Flow-control windows: one stalled stream can hold at most
	// StreamWindow, so ConnWindow/StreamWindow stalled tunnels are needed to
	// block a connection's gossip. A connection is granted ConnWindow at
	// the handshake, before admission, and a stranger's streams can fill
	// it with data left unread while their frames wait for memory: what
	// quic-go buffers for strangers is bounded by MaxStrangerConns ×
	// ConnWindow (512 MiB by default), and, for a moment each, connections
	// between their handshake and that count. Our own dials are not counted.
	StreamWindow uint64 // (4 MiB)
	ConnWindow   uint64 // (32 MiB)
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.ListenAddr == "" {
		out.ListenAddr = ":" + strconv.Itoa(DefaultPort)
	}
	if out.GossipInterval == 0 {
		out.GossipInterval = 15 * time.Second
	}
	if out.GossipJitter == 0 {
		out.GossipJitter = 0.2
	}
	if out.GossipInterval < 0 || out.GossipJitter < 0 || out.GossipJitter >= 1 {
		return out, fmt.Errorf("mesh: gossip interval %v with jitter %v: want a positive interval and jitter in [0,1)",
			out.GossipInterval, out.GossipJitter)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	t := &out.Timeouts
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&t.Handshake, 5 * time.Second},
		{&t.Idle, 20 * time.Second},
		{&t.KeepAlive, 5 * time.Second},
		{&t.Admission, 30 * time.Second},
		{&t.StreamHeader, 5 * time.Second},
		{&t.Gossip, 5 * time.Second},
		{&t.Confirm, 3 * time.Second},
		{&t.Leave, time.Second},
		{&t.LeaveDrain, 30 * time.Second},
		{&t.TunnelAccept, 5 * time.Second},
		{&t.TunnelIdle, 5 * time.Minute},
		{&t.TunnelFlush, 2 * time.Second},
		{&t.Redundant, 5 * time.Second},
		{&t.RedialMin, time.Second},
		{&t.RedialMax, time.Minute},
	} {
		if *d.v < 0 {
			return out, errors.New("mesh: negative timeout")
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if t.KeepAlive >= t.Idle {
		t.KeepAlive = t.Idle / 2
	}
	l := &out.Limits
	defInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	if l.MaxIncomingStreams <= 0 {
		l.MaxIncomingStreams = 128
	}
	if l.StreamRate <= 0 {
		l.StreamRate = 100
	}
	defInt(&l.StreamBurst, 200)
	defInt(&l.MaxStrikes, 16)
	defInt(&l.MaxPeers, 256)
	defInt(&l.MaxConns, 1024)
	defInt(&l.MaxConnsPerPeer, 4)
	defInt(&l.MaxStrangerConns, 16)
	defInt(&l.MaxHeard, 1024)
	defInt(&l.MaxHeardPerPeer, l.MaxPeers)
	defInt(&l.MaxDialsInFlight, 4)
	defInt(&l.MaxControlConns, 32)
	defInt(&l.MaxTunnels, 256)
	// A peer's tunnels share its connection's MaxIncomingStreams with its
	// gossip; holding them all would leave its gossip no stream to open.
	defInt(&l.MaxTunnelsPerPeer, max(1, min(l.MaxTunnels/2, int(l.MaxIncomingStreams*3/4))))
	defInt(&l.MaxSubprotocolStreamsPerPeer, 16)
	if l.FrameMemory <= 0 {
		l.FrameMemory = 256 << 20
	}
	if l.StrangerFrameMemory <= 0 {
		l.StrangerFrameMemory = 32 << 20
	}
	if l.PeerFrameMemory <= 0 {
		l.PeerFrameMemory = 32 << 20
	}
	if least := int64(decodeCharge + wire.MaxControlFrameBytes); l.FrameMemory < least {
		return out, fmt.Errorf("mesh: frame memory %d is below %d, one frame decoding and one being read", l.FrameMemory, least)
	}
	if l.StreamWindow == 0 {
		l.StreamWindow = 4 << 20
	}
	if l.ConnWindow == 0 {
		l.ConnWindow = 32 << 20
	}
	if l.ConnWindow < l.StreamWindow {
		return out, fmt.Errorf("mesh: connection window %d is smaller than the stream window %d", l.ConnWindow, l.StreamWindow)
	}
	return out, nil
}

// resolveListen parses ListenAddr into a UDP address; an empty host is
// every interface.
func resolveListen(s string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("mesh: listen address %q: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("mesh: listen address %q: bad port: %w", s, err)
	}
	ua := &net.UDPAddr{Port: int(p)}
	if host != "" {
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("mesh: listen address %q: the host must be an IP address: %w", s, err)
		}
		ua.IP = ip.AsSlice()
		ua.Zone = ip.Zone()
	}
	return ua, nil
}
