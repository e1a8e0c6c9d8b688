package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/veraison/go-cose"
)

// TestEnvelopeProfile pins the envelope's framing byte by byte: tag 18, a
// four-element array, the protected header exactly {1: -8, 4: kid} with
// kid the did:key's bytes, an empty unprotected map, the attached core.
func TestEnvelopeProfile(t *testing.T) {
	s := testSealer(t, 1)
	sealed, err := s.Seal(generation(t, s))
	if err != nil {
		t.Fatal(err)
	}
	kid := []byte(s.DID())
	if len(kid) != 56 {
		t.Fatalf("did:key is %d bytes, want 56 for an Ed25519 key", len(kid))
	}
	var want []byte
	want = append(want, 0xd2, 0x84)       // tag 18, array(4)
	want = append(want, 0x58, 6+56)       // bstr(62): the protected header
	want = append(want, 0xa2, 0x01, 0x27) // map(2), 1: -8
	want = append(want, 0x04, 0x58, 56)   // 4: bstr(56)
	want = append(want, kid...)
	want = append(want, 0xa0) // unprotected: {}
	if !bytes.HasPrefix(sealed.Envelope, want) {
		t.Fatalf("envelope starts %x\nwant %x", sealed.Envelope[:len(want)], want)
	}
	// go-cose's own encoding of the header map is the same bytes.
	goCose, err := cose.ProtectedHeader{cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA, cose.HeaderLabelKeyID: kid}.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(goCose, want[2:2+2+62]) {
		t.Fatalf("go-cose protected header %x differs from the profile's", goCose)
	}
	var parts []cbor.RawMessage
	if err := cbor.Unmarshal(sealed.Envelope[1:], &parts); err != nil {
		t.Fatal(err)
	}
	var payload, sig []byte
	if err := cbor.Unmarshal(parts[2], &payload); err != nil {
		t.Fatal(err)
	}
	if err := cbor.Unmarshal(parts[3], &sig); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, sealed.Core) {
		t.Fatal("payload is not the signed core")
	}
	// The signature is Ed25519 over RFC 9052's Sig_structure1, built here
	// independently of go-cose.
	var protected []byte
	if err := cbor.Unmarshal(parts[0], &protected); err != nil {
		t.Fatal(err)
	}
	tbs := canonicalOf(t, []any{"Signature1", protected, []byte{}, payload})
	if !ed25519.Verify(s.Public(), tbs, sig) {
		t.Fatal("signature does not verify over Sig_structure1")
	}
	if sealed.ID != Sum(sealed.Envelope) {
		t.Fatal("envelope id is not BLAKE3 of the envelope")
	}
	again, err := s.Seal(generation(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Envelope, sealed.Envelope) {
		t.Fatal("sealing is not deterministic")
	}
}

func TestOpen(t *testing.T) {
	s := testSealer(t, 1)
	other := testSealer(t, 2)
	sealed, err := s.Seal(generation(t, s))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []ed25519.PublicKey{nil, s.Public()} {
		got, err := Open(sealed.Envelope, want)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if got.ID != sealed.ID || !bytes.Equal(got.Core, sealed.Core) || got.Receipt.Steward != s.DID() {
			t.Fatalf("Open returned %+v", got)
		}
	}

	// signWith builds a COSE_Sign1 with the given headers and payload,
	// properly signed by key: each is a valid envelope outside the profile.
	signWith := func(key ed25519.PrivateKey, protected cose.ProtectedHeader, unprotected cose.UnprotectedHeader, payload []byte) []byte {
		signer, err := cose.NewSigner(cose.AlgorithmEdDSA, key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := cose.Sign1(nil, signer, cose.Headers{Protected: protected, Unprotected: unprotected}, payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kid := []byte(s.DID())
	profile := func() cose.ProtectedHeader {
		return cose.ProtectedHeader{cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA, cose.HeaderLabelKeyID: kid}
	}
	otherCore := func() []byte {
		r := generation(t, other)
		b, err := r.Core()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	flip := func(i int) []byte {
		b := slices.Clone(sealed.Envelope)
		b[i] ^= 1
		return b
	}
	tests := []struct {
		name string
		env  []byte
		want ed25519.PublicKey
		err  error
	}{
		{"other steward required", sealed.Envelope, other.Public(), ErrSignature},
		{"payload byte flipped", flip(len(sealed.Envelope) - 64 - 10), nil, ErrSignature},
		{"signature byte flipped", flip(len(sealed.Envelope) - 1), nil, ErrSignature},
		{"untagged", sealed.Envelope[1:], nil, ErrEnvelope},
		{"empty", nil, nil, ErrEnvelope},
		{"truncated", sealed.Envelope[:len(sealed.Envelope)-1], nil, ErrEnvelope},
		{"trailing byte", append(slices.Clone(sealed.Envelope), 0), nil, ErrEnvelope},
		{"too large", make([]byte, maxEnvelopeSize+1), nil, ErrTooLarge},
		{"unprotected header", signWith(testKey(1), profile(), cose.UnprotectedHeader{cose.HeaderLabelContentType: "text/plain"}, sealed.Core), nil, ErrEnvelope},
		{"extra protected parameter", func() []byte {
			p := profile()
			p[cose.HeaderLabelContentType] = "application/cbor"
			return signWith(testKey(1), p, nil, sealed.Core)
		}(), nil, ErrEnvelope},
		{"no kid", signWith(testKey(1), cose.ProtectedHeader{cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA}, nil, sealed.Core), nil, ErrEnvelope},
		{"kid not a did:key", signWith(testKey(1), cose.ProtectedHeader{cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA, cose.HeaderLabelKeyID: []byte("did:web:x")}, nil, sealed.Core), nil, ErrMalformed},
		{"kid names another key", signWith(testKey(2), profile(), nil, sealed.Core), nil, ErrSignature},
		{"core names another steward", signWith(testKey(1), profile(), nil, otherCore()), nil, ErrEnvelope},
		{"payload not a core", signWith(testKey(1), profile(), nil, []byte{0xa0}), nil, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(tt.env, tt.want); !errors.Is(err, tt.err) {
				t.Fatalf("Open error = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestSealRefusesForeignSteward(t *testing.T) {
	s, other := testSealer(t, 1), testSealer(t, 2)
	if _, err := s.Seal(generation(t, other)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Seal of another steward's receipt: %v, want ErrInvalid", err)
	}
	r := generation(t, s)
	r.Steward = ""
	sealed, err := s.Seal(r)
	if err != nil || sealed.Receipt.Steward != s.DID() {
		t.Fatalf("Seal with no steward set: %v, steward %q", err, sealed.Receipt.Steward)
	}
}

func TestDIDKey(t *testing.T) {
	// The did:key spec's Ed25519 test vector.
	pub, _ := hex.DecodeString("2e6fcce36701dc791488e0d0b1745cc1e33a4c1c9fcc41c63bd343dbbe0970e6")
	const want = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
	got := didKey(pub)
	if got != want {
		t.Fatalf("didKey = %s, want %s", got, want)
	}
	back, err := parseDIDKey(got)
	if err != nil || !back.Equal(ed25519.PublicKey(pub)) {
		t.Fatalf("parseDIDKey(%s) = %x, %v", got, back, err)
	}
	for _, bad := range []string{"", "did:key:", "did:key:z0OIl", "did:key:z6Mk", got + "1", "did:web:" + got[8:]} {
		if _, err := parseDIDKey(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("parseDIDKey(%q) error = %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzOpen(f *testing.F) {
	s := testSealer(f, 1)
	for _, r := range []Receipt{generation(f, s), decision(f, s)} {
		sealed, err := s.Seal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(sealed.Envelope)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sealed, err := Open(b, nil)
		if err != nil {
			return
		}
		if sealed.ID != Sum(b) || !bytes.Equal(sealed.Envelope, b) {
			t.Fatal("opened envelope does not identify as its bytes")
		}
		again, err := sealed.Receipt.Core()
		if err != nil || !bytes.Equal(again, sealed.Core) {
			t.Fatalf("opened core does not re-encode: %v", err)
		}
	})
}

// TestUsageJSON: usage.energy carries the receipt under its §6.1 keys and
// an envelope that opens to the same receipt.
func TestUsageJSON(t *testing.T) {
	s := testSealer(t, 1)
	sealed, err := s.Seal(generation(t, s))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(sealed.Usage())
	if err != nil {
		t.Fatal(err)
	}
	var u struct {
		Receipt     map[string]any `json:"receipt"`
		EnvelopeHex string         `json:"envelope_hex"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	if u.Receipt["mesh_receipt"] != "mesh/1" || u.Receipt["uj_per_accepted_token"] != 333.0 {
		t.Fatalf("usage receipt %v", u.Receipt)
	}
	env, err := hex.DecodeString(u.EnvelopeHex)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := Open(env, s.Public())
	if err != nil || opened.ID != sealed.ID {
		t.Fatalf("usage envelope: %v", err)
	}
	var back Usage
	if err := json.Unmarshal(b, &back); err != nil || back.Receipt.RequestID != sealed.Receipt.RequestID {
		t.Fatalf("usage round trip: %v", err)
	}
}
