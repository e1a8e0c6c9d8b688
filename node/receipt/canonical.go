package receipt

// The canonical det-CBOR mode is shared with the steward's other signed,
// content-addressed records (grants, presentations, change-record
// entries), so that the whole family has one encoder and one strict
// decoder.

// MarshalCanonical returns the canonical det-CBOR encoding of v (RFC 8949
// §4.2.1 core deterministic, definite lengths): the bytes a content id is
// taken over and a signature is made over.
func MarshalCanonical(v any) ([]byte, error) { return encMode.Marshal(v) }

// UnmarshalCanonical decodes b, at most limit bytes, into v and requires b
// to be exactly the canonical encoding of the value it decodes to. The
// decoder refuses tags, indefinite lengths, duplicate and unknown keys,
// invalid UTF-8, nesting deeper than four levels, arrays over 16 elements
// and maps over 64 pairs. Errors wrap ErrTooLarge, ErrMalformed or
// ErrNonCanonical.
func UnmarshalCanonical(b []byte, limit int, v any) error { return decodeCanonical(b, limit, v) }
