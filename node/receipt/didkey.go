package receipt

import (
	"crypto/ed25519"
	"fmt"
	"strings"
)

// did:key for an Ed25519 key (DESIGN.md: the steward's kid): "did:key:z"
// followed by base58btc of the multicodec prefix 0xed 0x01 and the 32-byte
// public key.
//
// TODO(identity): node/identity carries the same encoder and parser; switch
// to identity.EndpointID.DIDKey and identity.ParseDIDKey once that package
// is committed.
const didKeyPrefix = "did:key:z"

const base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// didKey returns the did:key of pub.
func didKey(pub ed25519.PublicKey) string {
	b := make([]byte, 0, 2+ed25519.PublicKeySize)
	b = append(b, 0xed, 0x01)
	b = append(b, pub...)
	return didKeyPrefix + base58Encode(b)
}

// parseDIDKey returns the Ed25519 public key a did:key names.
func parseDIDKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(s, didKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: steward %q is not a did:key", ErrMalformed, truncate(s))
	}
	if len(rest) > 64 { // 34 bytes never need more than 47 digits
		return nil, fmt.Errorf("%w: did:key of %d characters is too long for an Ed25519 key", ErrMalformed, len(s))
	}
	b, err := base58Decode(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: did:key: %v", ErrMalformed, err)
	}
	if len(b) != 2+ed25519.PublicKeySize || b[0] != 0xed || b[1] != 0x01 {
		return nil, fmt.Errorf("%w: did:key does not hold an Ed25519 key (0xed01 + 32 bytes)", ErrMalformed)
	}
	pub := ed25519.PublicKey(b[2:])
	// One key, one spelling: refuse digit strings that decode to the same
	// bytes but are not what didKey writes.
	if didKey(pub) != s {
		return nil, fmt.Errorf("%w: did:key is not in canonical form", ErrMalformed)
	}
	return pub, nil
}

// base58Encode is the textbook quadratic conversion; inputs are 34 bytes.
func base58Encode(b []byte) string {
	zeros := 0
	for zeros < len(b) && b[zeros] == 0 {
		zeros++
	}
	digits := make([]byte, 0, len(b)*138/100+1)
	for _, c := range b[zeros:] {
		carry := int(c)
		for i := range digits {
			carry += int(digits[i]) << 8
			digits[i] = byte(carry % 58)
			carry /= 58
		}
		for carry > 0 {
			digits = append(digits, byte(carry%58))
			carry /= 58
		}
	}
	out := make([]byte, zeros+len(digits))
	for i := range zeros {
		out[i] = base58Alphabet[0]
	}
	for i, d := range digits {
		out[len(out)-1-i] = base58Alphabet[d]
	}
	return string(out)
}

func base58Decode(s string) ([]byte, error) {
	zeros := 0
	for zeros < len(s) && s[zeros] == base58Alphabet[0] {
		zeros++
	}
	out := make([]byte, 0, len(s)*74/100+1) // little-endian while building
	for i := zeros; i < len(s); i++ {
		v := strings.IndexByte(base58Alphabet, s[i])
		if v < 0 {
			return nil, fmt.Errorf("character %d (%q) is not base58", i, s[i])
		}
		carry := v
		for j := range out {
			carry += int(out[j]) * 58
			out[j] = byte(carry)
			carry >>= 8
		}
		for carry > 0 {
			out = append(out, byte(carry))
			carry >>= 8
		}
	}
	res := make([]byte, zeros+len(out))
	for i, c := range out {
		res[len(res)-1-i] = c
	}
	return res, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
