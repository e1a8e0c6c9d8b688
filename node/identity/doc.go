// Package identity is a node's cryptographic identity: its Ed25519 key, the
// EndpointID peers know it by, the did:key form the steward signs receipts
// under, and the mutual-TLS configuration that binds a QUIC connection to an
// EndpointID.
//
// A node key never leaves the state dir; an EndpointID is just the 32-byte
// public key, so a peer's identity is whatever key completed the TLS 1.3
// handshake, and nothing else.
package identity
