package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/fxamacker/cbor/v2"
)

// The canonical form is RFC 8949 §4.2.1 core deterministic encoding:
// shortest-form heads, definite lengths, map keys sorted bytewise by their
// encodings. Struct fields are encoded as text-keyed maps and sorted the
// same way. Signed cores never hold floats, booleans or nulls: the wire
// structs below have no float or bool fields, and absent options are
// dropped (omitempty on pointers and strings), never encoded as null.
var encMode = func() cbor.EncMode {
	opts := cbor.CoreDetEncOptions()
	opts.IndefLength = cbor.IndefLengthForbidden
	m, err := opts.EncMode()
	if err != nil {
		panic(err) // static options; cannot fail
	}
	return m
}()

// decMode accepts only what a canonical mesh/1 value can contain, and
// bounds what outside bytes can make it allocate: no tags, no indefinite
// lengths, no duplicate or unknown keys, case-sensitive key matching, valid
// UTF-8, shallow nesting, small maps and arrays.
var decMode = func() cbor.DecMode {
	m, err := cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		MaxNestedLevels:   4,
		MaxArrayElements:  maxArray,
		MaxMapPairs:       64,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		UTF8:              cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(err) // static options; cannot fail
	}
	return m
}()

// decodeCanonical decodes b into v, then re-encodes v and requires the very
// same bytes. The round trip is what makes the decoder strict without a
// hand-written validator for every encoding rule: non-shortest heads,
// unsorted keys, nulls or empty maps standing in for absent options, and
// floats or booleans in integer fields all fail it (or fail typed decoding
// first).
func decodeCanonical(b []byte, limit int, v any) error {
	if len(b) > limit {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), limit)
	}
	if err := decMode.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return checkCanonical(b, v)
}

// checkCanonical requires b to be exactly the encoding of v, the value
// decoded from it. A required key that was missing shows up here too: it
// decoded to its zero value, which the encoder writes.
func checkCanonical(b []byte, v any) error {
	again, err := encMode.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: re-encode: %v", ErrMalformed, err)
	}
	if !bytes.Equal(again, b) {
		return fmt.Errorf("%w (a non-canonical encoding, a required key missing, or an absent option written out)", ErrNonCanonical)
	}
	return nil
}

// strictJSON decodes one JSON value into v, refusing unknown keys and
// trailing data.
func strictJSON(b []byte, v any) error {
	if len(b) > maxCoreSize*4 {
		return fmt.Errorf("%d bytes, limit %d", len(b), maxCoreSize*4)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
