// Package owner is node ownership for owner control (mesh-llm-control/1):
// the owner's Ed25519 key, the SignedNodeOwnership certificates it issues,
// and the trust a node places in owner keys.
//
// An owner key is separate from every node key and never touches the
// network: it only signs certificates. A certificate binds one endpoint
// (a node, or a meshcli client identity) to the owner, for a bounded time.
// A node holds its own certificate (advertised as owner_attestation) and
// the owner keys it trusts; a requester presents its certificate in the
// owner-control handshake, and the node accepts it only when the
// certificate is bound to the requester's live QUIC identity, verifies, is
// within its validity window and names a trusted owner.
//
// The signature covers SigningBytes: the domain tag
// "meshnode/node-ownership/v1\n" followed by the deterministic protobuf
// encoding of the certificate with its signature field empty. owner_id is
// the did:key of owner_sign_public_key, so a certificate cannot claim one
// owner under another's key.
package owner
