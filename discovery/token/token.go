// Package token encodes and decodes invite tokens: how a node tells another,
// out of band, where to find it.
//
// A token is base64url, without padding, of the node's endpoint address in
// upstream mesh-llm's JSON shape:
//
//	{"id":"<64 lowercase hex>","addrs":[{"Ip":"192.168.1.5:9338"}]}
//
// It carries no secret: the QUIC handshake proves the id, so a token only
// says which node to dial and where. Possessing one does not admit anyone.
package token

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/node/mesh"
)

// MaxLen bounds an encoded token. A node's own address list (at most
// mesh.MaxEndpointAddrAddrs entries) encodes well inside it; a real token,
// a few addresses, is a few hundred characters.
const MaxLen = 8 << 10

// Errors of Decode, one per way a token can be wrong; each is also
// ErrInvalid.
var (
	ErrInvalid   = errors.New("invalid invite token")
	ErrEmpty     = fmt.Errorf("%w: empty", ErrInvalid)
	ErrTooLong   = fmt.Errorf("%w: too long", ErrInvalid)
	ErrBase64    = fmt.Errorf("%w: not base64url", ErrInvalid)
	ErrJSON      = fmt.Errorf("%w: not an endpoint address", ErrInvalid)
	ErrID        = fmt.Errorf("%w: bad node id", ErrInvalid)
	ErrAddress   = fmt.Errorf("%w: bad address", ErrInvalid)
	ErrNoAddress = fmt.Errorf("%w: no address to dial", ErrInvalid)
)

// Encode returns the token for addr. It fails when addr has no direct
// address, since such a token could not be joined.
func Encode(addr mesh.EndpointAddr) (string, error) {
	if len(addr.Addrs) == 0 {
		return "", fmt.Errorf("encode token for %s: %w", addr.ID.Short(), ErrNoAddress)
	}
	b, err := json.Marshal(addr)
	if err != nil {
		return "", fmt.Errorf("encode token: %w", err)
	}
	if n := base64.RawURLEncoding.EncodedLen(len(b)); n > MaxLen {
		return "", fmt.Errorf("encode token: %w: %d characters, limit %d", ErrTooLong, n, MaxLen)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Decode parses a token. Surrounding white space and trailing '=' padding,
// which copying and pasting tends to add, are tolerated. The result has
// at least one dialable address.
func Decode(s string) (mesh.EndpointAddr, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	switch {
	case s == "":
		return mesh.EndpointAddr{}, ErrEmpty
	case len(s) > MaxLen:
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %d characters, limit %d", ErrTooLong, len(s), MaxLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		hint := ""
		if strings.ContainsAny(s, "+/") {
			hint = " ('+' or '/' means standard base64; a token uses '-' and '_')"
		}
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %v%s", ErrBase64, err, hint)
	}
	// Check the shape first so that each fault gets its own error; the
	// mesh's parser then reads the addresses under its own bounds.
	var shape struct {
		ID    *string           `json:"id"`
		Addrs []json.RawMessage `json:"addrs"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %v", ErrJSON, err)
	}
	switch {
	case shape.ID == nil:
		return mesh.EndpointAddr{}, fmt.Errorf("%w: no \"id\"", ErrID)
	case len(*shape.ID) != 64:
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %d characters, want 64 hex", ErrID, len(*shape.ID))
	case !isHex(*shape.ID):
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %q is not hex", ErrID, *shape.ID)
	}
	addr, err := mesh.ParseEndpointAddr(raw)
	if err != nil {
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %w", ErrAddress, err)
	}
	if len(addr.Addrs) == 0 {
		what := "no addresses"
		if len(addr.Relays) > 0 {
			what = "only relay addresses, which meshnode does not dial"
		}
		return mesh.EndpointAddr{}, fmt.Errorf("%w: the token lists %s", ErrNoAddress, what)
	}
	return addr, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// fingerprintDomain separates token fingerprints from every other use of
// SHA-256 over a token; it is upstream mesh-llm's, so fingerprints match.
const fingerprintDomain = "mesh-llm-lan-invite-token-v1\x00"

// Fingerprint is what a node may publish instead of a token (the mDNS
// tok_fp key): the first 16 bytes of SHA-256 over a domain tag and the
// token, in lowercase hex. Nodes holding the same token compute the same
// fingerprint; the token cannot be recovered from it.
func Fingerprint(tok string) string {
	h := sha256.New()
	h.Write([]byte(fingerprintDomain))
	h.Write([]byte(strings.TrimSpace(tok)))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
