package receipt

import (
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"
)

// ContentID is a BLAKE3-256 content address. For a structured value it is
// taken over the value's canonical det-CBOR encoding (DESIGN.md); for
// opaque bytes (a prompt, an envelope) over the bytes themselves. Its text
// form is 64 lowercase hex digits, the form every mesh/1 signed core uses.
type ContentID [32]byte

// Sum returns the content id of b: BLAKE3-256(b).
func Sum(b []byte) ContentID { return ContentID(blake3.Sum256(b)) }

// String returns the lowercase hex form.
func (c ContentID) String() string { return hex.EncodeToString(c[:]) }

// IsZero reports whether c is all zeros, which no real content hashes to.
func (c ContentID) IsZero() bool { return c == ContentID{} }

// ParseContentID parses the 64-digit lowercase hex form. Upper case is
// refused: the hex form sits inside signed canonical cores, where a second
// spelling of one id would be a second encoding of one receipt.
func ParseContentID(s string) (ContentID, error) {
	var c ContentID
	if err := parseLowerHex(c[:], s); err != nil {
		return c, fmt.Errorf("%w: content id: %v", ErrMalformed, err)
	}
	return c, nil
}

// MarshalText implements encoding.TextMarshaler (the hex form).
func (c ContentID) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *ContentID) UnmarshalText(b []byte) error {
	v, err := ParseContentID(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// parseLowerHex decodes s, which must be exactly 2*len(dst) lowercase hex
// digits, into dst.
func parseLowerHex(dst []byte, s string) error {
	if len(s) != 2*len(dst) {
		return fmt.Errorf("%d hex digits, want %d", len(s), 2*len(dst))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("character %d is %q, not a lowercase hex digit", i, c)
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err
}

// MarshalCBOR encodes c as a CBOR text string of its hex form: mesh/1
// writes every content id in a signed core as hex (§6.1), and meshnode
// does the same inside ServeRequest so that one id has one encoding
// everywhere (an assumption where §3.1 only says "ContentId").
func (c ContentID) MarshalCBOR() ([]byte, error) { return encMode.Marshal(c.String()) }

// UnmarshalCBOR decodes the text-string hex form.
func (c *ContentID) UnmarshalCBOR(b []byte) error {
	var s string
	if err := decMode.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: content id: %v", ErrMalformed, err)
	}
	return c.UnmarshalText([]byte(s))
}
