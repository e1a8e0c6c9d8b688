package wire

import "fmt"

// Protocol constants of mesh-llm/1. (The ALPNs live with the TLS setup in
// node/identity.)
const (
	// ProtocolGeneration is the only gen value a frame may carry
	// (NODE_PROTOCOL_GENERATION upstream).
	ProtocolGeneration uint32 = 1
	// MaxControlFrameBytes bounds a frame body in both directions and on both
	// ALPNs (MAX_CONTROL_FRAME_BYTES upstream).
	MaxControlFrameBytes = 8 << 20
)

// StreamType is the byte that opens every mesh-llm/1 stream and says what
// the rest of the stream carries.
type StreamType byte

// The stream types of mesh-llm/1.
const (
	StreamGossip             StreamType = 0x01 // GossipFrame, both ways
	StreamTunnel             StreamType = 0x02 // raw TCP relay (llama.cpp RPC)
	StreamTunnelMap          StreamType = 0x03 // TunnelMap
	StreamTunnelHTTP         StreamType = 0x04 // raw HTTP byte relay
	StreamRouteRequest       StreamType = 0x05 // RouteTableRequest, answered by RouteTable
	StreamPeerDown           StreamType = 0x06 // PeerDown
	StreamPeerLeaving        StreamType = 0x07 // PeerLeaving
	StreamPluginChannel      StreamType = 0x08 // plugin protocol
	StreamPluginBulkTransfer StreamType = 0x09 // plugin protocol bulk data
	StreamPluginMeshStream   StreamType = 0x0a // plugin protocol mesh stream
	StreamConfigSubscribe    StreamType = 0x0b // reserved legacy id: never dispatched, never reused
	StreamConfigPush         StreamType = 0x0c // reserved legacy id: never dispatched, never reused
	StreamSubprotocol        StreamType = 0x0d // MeshSubprotocolOpen, then subprotocol-owned bytes
	StreamDirectPathRequest  StreamType = 0x0e // DirectPathRequest
)

var streamNames = [...]string{
	StreamGossip:             "GOSSIP",
	StreamTunnel:             "TUNNEL",
	StreamTunnelMap:          "TUNNEL_MAP",
	StreamTunnelHTTP:         "TUNNEL_HTTP",
	StreamRouteRequest:       "ROUTE_REQUEST",
	StreamPeerDown:           "PEER_DOWN",
	StreamPeerLeaving:        "PEER_LEAVING",
	StreamPluginChannel:      "PLUGIN_CHANNEL",
	StreamPluginBulkTransfer: "PLUGIN_BULK_TRANSFER",
	StreamPluginMeshStream:   "PLUGIN_MESH_STREAM",
	StreamConfigSubscribe:    "CONFIG_SUBSCRIBE",
	StreamConfigPush:         "CONFIG_PUSH",
	StreamSubprotocol:        "SUBPROTOCOL",
	StreamDirectPathRequest:  "DIRECT_PATH_REQUEST",
}

// String returns the protocol's name for t ("GOSSIP"), or
// "StreamType(0x0f)" for a byte the protocol does not define.
func (t StreamType) String() string {
	if t.Known() {
		return streamNames[t]
	}
	return fmt.Sprintf("StreamType(%#02x)", byte(t))
}

// Known reports whether the protocol defines t (0x01 to 0x0e), reserved
// ones included.
func (t StreamType) Known() bool {
	return t >= StreamGossip && t <= StreamDirectPathRequest
}

// Reserved reports whether t is a retired id (0x0b, 0x0c) kept only so it
// is never reused.
func (t StreamType) Reserved() bool {
	return t == StreamConfigSubscribe || t == StreamConfigPush
}

// Dispatchable reports whether an accepted stream of type t may be handed
// to a handler: known and not reserved.
func (t StreamType) Dispatchable() bool {
	return t.Known() && !t.Reserved()
}

// Framed reports whether a stream of type t begins with a length-prefixed
// protobuf frame, so that ReadFrame applies after the type byte. Tunnel and
// plugin streams carry other bytes.
func (t StreamType) Framed() bool {
	switch t {
	case StreamGossip, StreamTunnelMap, StreamRouteRequest, StreamPeerDown,
		StreamPeerLeaving, StreamSubprotocol, StreamDirectPathRequest:
		return true
	}
	return false
}

// AllowedBeforeAdmission reports whether a quarantined peer, one whose
// gossip has not yet been accepted, may open a stream of type t: only
// GOSSIP and ROUTE_REQUEST.
func (t StreamType) AllowedBeforeAdmission() bool {
	return t == StreamGossip || t == StreamRouteRequest
}
