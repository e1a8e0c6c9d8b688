package receipt

import (
	"bytes"
	"errors"
	"testing"
)

// TestSealPayload: the envelope profile carries any canonical payload, and
// OpenPayload returns it with its signer; Open still accepts only receipts.
func TestSealPayload(t *testing.T) {
	s := testSealer(t, 1)
	payload, err := MarshalCanonical(map[string]string{"mesh_change": "mesh/1"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := s.SealPayload(payload)
	if err != nil {
		t.Fatal(err)
	}
	got, kid, err := OpenPayload(env, s.Public())
	if err != nil || !bytes.Equal(got, payload) || kid != s.DID() {
		t.Fatalf("OpenPayload: %x %s %v", got, kid, err)
	}
	if _, _, err := OpenPayload(env, testSealer(t, 2).Public()); !errors.Is(err, ErrSignature) {
		t.Fatalf("another steward's key: %v", err)
	}
	if _, err := Open(env, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Open took a non-receipt payload: %v", err)
	}
	sealed, err := s.Seal(generation(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := OpenPayload(sealed.Envelope, nil); err != nil || !bytes.Equal(got, sealed.Core) {
		t.Fatalf("a receipt's payload is its core: %v", err)
	}
}

// TestUnmarshalCanonical: the shared decoder refuses what is not the
// canonical encoding of the value.
func TestUnmarshalCanonical(t *testing.T) {
	type v struct {
		A uint64 `cbor:"a"`
		B string `cbor:"b,omitempty"`
	}
	good, _ := MarshalCanonical(v{A: 1, B: "x"})
	var out v
	if err := UnmarshalCanonical(good, 64, &out); err != nil || out != (v{1, "x"}) {
		t.Fatalf("%v %+v", err, out)
	}
	for name, b := range map[string][]byte{
		"long head":   {0xa1, 0x61, 'a', 0x18, 0x01},
		"unknown key": {0xa1, 0x61, 'c', 0x01},
		"over limit":  good,
	} {
		limit := 64
		if name == "over limit" {
			limit = len(good) - 1
		}
		if err := UnmarshalCanonical(b, limit, &out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
