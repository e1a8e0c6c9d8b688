// Package control is owner control: the private mesh-llm-control/1 lane on
// which an owner manages the nodes it owns.
//
// Server serves the lane on connections a mesh.Node hands it
// (Server.ServeConn is a mesh.ControlHandler). Each bidirectional stream
// opens with a handshake carrying the requester's SignedNodeOwnership
// (package owner), which must be bound to the requester's live QUIC
// identity, verify, be valid now and name an owner this node trusts; only
// then are requests decoded. A connection with no accepted handshake
// within ServerTimeouts.Authenticate is closed. Every request must name the requester's own
// id and this node as target, carry a non-zero request id and exactly one
// command. Commands run against small interfaces the node implements:
// ConfigStore (get/watch/apply_config), Scanner (refresh_inventory) and
// Lifecycle (load/unload/ensure/drain_model, implemented by Reconciler
// over a Runtime).
//
// Client is the other end, dialled from an endpoint token given out of
// band (EncodeEndpoint, ParseEndpoint): it holds its own QUIC identity and
// a certificate binding it to the owner. HTTPHandler is the loopback-only
// REST facade under /api/runtime/control/, and HTTPClient its client; both
// clients satisfy Controller. The facade also serves meshnode commands
// the lane's schema has no message for: split/pins (SplitPinner,
// HTTPClient.SplitPins), a split model's layer pins, set live; and
// models/pull (Puller, HTTPClient.Pull), which fetches a model file into
// the models dir and streams its progress.
//
// Every failure a peer reports is an *Error carrying an
// OwnerControlErrorCode; test for codes with errors.Is against ErrBadRequest,
// ErrUnauthorized and the others. An old node's UNKNOWN_COMMAND reaches
// callers as CONTROL_UNSUPPORTED. Nothing these commands carry is logged
// beyond command names, request ids and node ids, and nothing is gossiped.
package control
