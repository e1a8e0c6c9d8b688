// Package mesh is a node's membership in a mesh: the mesh-llm/1 peer
// protocol over QUIC.
//
// One UDP socket carries every connection, dialled and accepted, on two
// ALPNs: mesh-llm/1 (this package) and mesh-llm-control/1 (handed to the
// handler registered with HandleControl). Each connection is mutual TLS 1.3
// over node keys (package identity), so a peer is the EndpointID it proved
// in the handshake and nothing it later claims.
//
// A new peer is quarantined: it may open only GOSSIP (0x01) and
// ROUTE_REQUEST (0x05) streams until a GossipFrame from it decodes and
// validates, sender_id included. Admitted peers gossip periodically and on
// change, each frame listing every admitted peer and the sender itself, so
// a node dials the peers it hears of and the mesh converges to a full mesh.
// A peer that stops answering is confirmed unreachable by a fresh dial
// before it is evicted and a PeerDown (0x06) is broadcast; a node receiving
// PeerDown checks for itself before acting. PeerLeaving (0x07) is sent on
// clean shutdown. ROUTE_REQUEST serves the route table without admitting
// the requester; FetchRouteTable is its passive client. TUNNEL_HTTP (0x04)
// relays raw bytes to the receiving node's local HTTP API (DialHTTP).
// SUBPROTOCOL (0x0d) streams from admitted peers go to the handler
// registered for the name and major their MeshSubprotocolOpen names
// (HandleSubprotocol, which also advertises it in gossip);
// OpenSubprotocol opens one.
//
// A Node is built by New, which binds the socket, and run by Serve until
// its context ends.
package mesh
