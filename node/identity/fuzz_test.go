package identity

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

// FuzzParseEndpointID: the hex form (also what UnmarshalText reads from
// configs and invite tokens) never panics, fails only with
// ErrBadEndpointID, and what it accepts is the id whose String, lowercased,
// is the input.
func FuzzParseEndpointID(f *testing.F) {
	k := rfc8032Key(f)
	f.Add(k.ID().String())
	f.Add(strings.ToUpper(k.ID().String()))
	f.Add(k.ID().String()[:63])
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseEndpointID(s)
		if err != nil {
			if !errors.Is(err, ErrBadEndpointID) {
				t.Fatalf("error %v does not wrap ErrBadEndpointID", err)
			}
			return
		}
		if id.String() != strings.ToLower(s) {
			t.Fatalf("parsed %q as %s", s, id)
		}
		var back EndpointID
		if err := back.UnmarshalText([]byte(id.String())); err != nil || back != id {
			t.Fatalf("UnmarshalText(%s) = %v, %v", id, back, err)
		}
	})
}

// FuzzVerifyPeerCertificates: a hostile peer's certificate bytes never
// panic the verifier; every failure wraps one of its sentinels, and an
// accepted certificate yields the Ed25519 key its self-signature verifies
// under.
func FuzzVerifyPeerCertificates(f *testing.F) {
	k := rfc8032Key(f)
	c, err := k.Certificate()
	if err != nil {
		f.Fatal(err)
	}
	der := c.Certificate[0]
	f.Add(der)
	f.Add(der[:len(der)/2])
	tampered := bytes.Clone(der)
	tampered[len(tampered)-1] ^= 1
	f.Add(tampered)
	f.Add([]byte{0x30, 0x00})
	f.Fuzz(func(t *testing.T, der []byte) {
		id, err := VerifyPeerCertificates([][]byte{der})
		if err != nil {
			for _, want := range []error{ErrBadCertificate, ErrNotEd25519, ErrBadSelfSignature, ErrBadEndpointID} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("error %v wraps none of the verifier's sentinels", err)
		}
		if len(id.PublicKey()) != ed25519.PublicKeySize || bytes.Count(der, id[:]) == 0 {
			t.Fatalf("accepted a certificate whose bytes do not hold the id %s", id)
		}
	})
}

// FuzzParseKeyPEM: a damaged node.key never panics the loader, fails with
// ErrBadKeyFile, and what it accepts writes back as the same key.
func FuzzParseKeyPEM(f *testing.F) {
	b, err := rfc8032Key(f).MarshalPEM()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add(append(bytes.Clone(b), "junk"...))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKeyPEM(b)
		if err != nil {
			if !errors.Is(err, ErrBadKeyFile) {
				t.Fatalf("error %v does not wrap ErrBadKeyFile", err)
			}
			return
		}
		again, err := k.MarshalPEM()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseKeyPEM(again)
		if err != nil || back.ID() != k.ID() {
			t.Fatalf("re-parse: %v, %v", back, err)
		}
	})
}
