package identity

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// EndpointID is a node's identity on the mesh: its 32-byte Ed25519 public
// key.
type EndpointID [32]byte

// ErrBadEndpointID is wrapped by every EndpointID parse failure.
var ErrBadEndpointID = errors.New("identity: bad endpoint id")

// IDFromPublicKey returns the EndpointID of an Ed25519 public key.
func IDFromPublicKey(pub ed25519.PublicKey) (EndpointID, error) {
	var id EndpointID
	if len(pub) != ed25519.PublicKeySize {
		return id, fmt.Errorf("%w: public key is %d bytes, want %d", ErrBadEndpointID, len(pub), ed25519.PublicKeySize)
	}
	copy(id[:], pub)
	return id, nil
}

// IDFromBytes returns the EndpointID held in b, which must be exactly 32
// bytes (as in the wire's sender_id, endpoint_id and peer_id fields).
func IDFromBytes(b []byte) (EndpointID, error) {
	var id EndpointID
	if len(b) != len(id) {
		return id, fmt.Errorf("%w: %d bytes, want 32", ErrBadEndpointID, len(b))
	}
	copy(id[:], b)
	return id, nil
}

// ParseEndpointID parses the 64-character hex form written by
// [EndpointID.String]. Upper-case hex is accepted.
func ParseEndpointID(s string) (EndpointID, error) {
	var id EndpointID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("%w: %q is %d characters, want 64 hex characters", ErrBadEndpointID, truncate(s), len(s))
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return id, fmt.Errorf("%w: character %d of %q is %q, not a hex digit", ErrBadEndpointID, i, truncate(s), s[i])
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: %v", ErrBadEndpointID, err)
	}
	return id, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func truncate(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// String is the lowercase hex form.
func (id EndpointID) String() string { return hex.EncodeToString(id[:]) }

// Short is a 12-character prefix for logs and tables, as git abbreviates
// commits; it is not unique and never used to look a peer up.
func (id EndpointID) Short() string { return hex.EncodeToString(id[:6]) }

// IsZero reports whether id is the zero value (no identity).
func (id EndpointID) IsZero() bool { return id == EndpointID{} }

// PublicKey returns id as an Ed25519 public key.
func (id EndpointID) PublicKey() ed25519.PublicKey { return ed25519.PublicKey(id[:]) }

// MarshalText implements encoding.TextMarshaler (the hex form), so ids read
// naturally in JSON and TOML.
func (id EndpointID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *EndpointID) UnmarshalText(b []byte) error {
	v, err := ParseEndpointID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// didKeyPrefix is the multibase 'z' (base58btc) form of did:key; the
// multicodec prefix 0xed 0x01 marks an Ed25519 public key.
const didKeyPrefix = "did:key:z"

var ed25519Multicodec = [2]byte{0xed, 0x01}

// DIDKey is the did:key form of id: "did:key:z" + base58btc(0xed 0x01 ‖ pub).
// The steward signs receipts under it (COSE kid), and grants name it.
func (id EndpointID) DIDKey() string {
	b := make([]byte, 0, 34)
	b = append(b, ed25519Multicodec[:]...)
	b = append(b, id[:]...)
	return didKeyPrefix + base58Encode(b)
}

// ParseDIDKey parses an Ed25519 did:key back to its EndpointID.
func ParseDIDKey(s string) (EndpointID, error) {
	var id EndpointID
	rest, ok := strings.CutPrefix(s, didKeyPrefix)
	if !ok {
		return id, fmt.Errorf("%w: %q does not start with %q", ErrBadEndpointID, truncate(s), didKeyPrefix)
	}
	if len(rest) > 64 { // 34 bytes never need more than 47 base58 digits
		return id, fmt.Errorf("%w: did:key is %d characters, too long for an Ed25519 key", ErrBadEndpointID, len(s))
	}
	b, err := base58Decode(rest)
	if err != nil {
		return id, fmt.Errorf("%w: did:key: %v", ErrBadEndpointID, err)
	}
	if len(b) != 34 || b[0] != ed25519Multicodec[0] || b[1] != ed25519Multicodec[1] {
		return id, fmt.Errorf("%w: did:key does not hold an Ed25519 public key (multicodec 0xed01 + 32 bytes)", ErrBadEndpointID)
	}
	copy(id[:], b[2:])
	return id, nil
}
