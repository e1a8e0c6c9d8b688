package receipt

import (
	"crypto/ed25519"
	"fmt"

	"github.com/meshnode/meshnode/node/identity"
)

// The steward's kid is its node key's did:key (DESIGN.md): "did:key:z"
// followed by base58btc of 0xed 0x01 ‖ the 32-byte Ed25519 public key.
// node/identity owns the encoding; these wrappers put its errors under
// ErrMalformed.

// didKey returns the did:key of pub, which must be an Ed25519 public key.
func didKey(pub ed25519.PublicKey) string {
	id, err := identity.IDFromPublicKey(pub)
	if err != nil {
		return fmt.Sprintf("invalid key (%d bytes)", len(pub))
	}
	return id.DIDKey()
}

// parseDIDKey returns the Ed25519 public key a did:key names. A did:key
// has one spelling per key: base58 without leading zero digits is unique,
// and the 0xed multicodec byte rules those out.
func parseDIDKey(s string) (ed25519.PublicKey, error) {
	id, err := identity.ParseDIDKey(s)
	if err != nil {
		return nil, fmt.Errorf("%w: steward %q: %v", ErrMalformed, truncate(s), err)
	}
	return id.PublicKey(), nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
