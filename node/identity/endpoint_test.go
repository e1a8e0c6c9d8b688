package identity

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// RFC 8032 §7.1 TEST 1.
const (
	rfc8032Seed   = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	rfc8032Public = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	rfc8032DIDKey = "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw"
)

func rfc8032Key(t testing.TB) *Key {
	t.Helper()
	seed, _ := hex.DecodeString(rfc8032Seed)
	k, err := KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDIDKeyRFC8032(t *testing.T) {
	k := rfc8032Key(t)
	if got := k.ID().String(); got != rfc8032Public {
		t.Fatalf("public key = %s, want %s", got, rfc8032Public)
	}
	if got := k.DIDKey(); got != rfc8032DIDKey {
		t.Fatalf("DIDKey = %s, want %s", got, rfc8032DIDKey)
	}
	id, err := ParseDIDKey(rfc8032DIDKey)
	if err != nil {
		t.Fatal(err)
	}
	if id != k.ID() {
		t.Fatalf("ParseDIDKey = %s, want %s", id, k.ID())
	}
}

func TestParseEndpointID(t *testing.T) {
	k := rfc8032Key(t)
	tests := []struct {
		in      string
		wantErr string
	}{
		{rfc8032Public, ""},
		{strings.ToUpper(rfc8032Public), ""},
		{"", "0 characters"},
		{rfc8032Public[:63], "63 characters"},
		{rfc8032Public + "00", "66 characters"},
		{"g" + rfc8032Public[1:], "character 0"},
		{rfc8032Public[:40] + " " + rfc8032Public[41:], "character 40"},
	}
	for _, tt := range tests {
		id, err := ParseEndpointID(tt.in)
		if tt.wantErr == "" {
			if err != nil || id != k.ID() {
				t.Errorf("ParseEndpointID(%q) = %v, %v", tt.in, id, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadEndpointID) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseEndpointID(%q) error = %v, want ErrBadEndpointID mentioning %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestParseDIDKeyErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"did:web:example.com",
		"did:key:z",
		"did:key:z0OIl", // not base58
		"did:key:z6LSbysY2xFMRpGMhb7tFTLMpeuPRaqaWM1yECx2AtzE3KCc", // X25519 multicodec
		"did:key:z" + strings.Repeat("1", 70),
	} {
		if _, err := ParseDIDKey(in); !errors.Is(err, ErrBadEndpointID) {
			t.Errorf("ParseDIDKey(%q) error = %v, want ErrBadEndpointID", in, err)
		}
	}
}

func TestEndpointIDForms(t *testing.T) {
	id := rfc8032Key(t).ID()
	if got := id.Short(); got != rfc8032Public[:12] {
		t.Errorf("Short = %s", got)
	}
	b, err := json.Marshal(map[string]EndpointID{"id": id})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"` + rfc8032Public + `"}`; string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
	var back map[string]EndpointID
	if err := json.Unmarshal(b, &back); err != nil || back["id"] != id {
		t.Errorf("JSON round trip = %v, %v", back, err)
	}
	if _, err := IDFromBytes(id[:31]); !errors.Is(err, ErrBadEndpointID) {
		t.Errorf("IDFromBytes(31 bytes) error = %v", err)
	}
	if got, err := IDFromBytes(id[:]); err != nil || got != id {
		t.Errorf("IDFromBytes = %v, %v", got, err)
	}
	if id.IsZero() || !(EndpointID{}).IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestBase58RoundTrip(t *testing.T) {
	for _, in := range [][]byte{{}, {0}, {0, 0, 1}, {0xff}, bytes.Repeat([]byte{0xab}, 34), {0, 0xed, 0x01}} {
		s := base58Encode(in)
		out, err := base58Decode(s)
		if err != nil || !bytes.Equal(out, in) {
			t.Errorf("base58 round trip of %x via %q = %x, %v", in, s, out, err)
		}
	}
	// Bitcoin's well-known vector.
	if got := base58Encode([]byte("Hello World!")); got != "2NEpo7TZRRrLZSi2U" {
		t.Errorf("base58Encode(Hello World!) = %s", got)
	}
}

func FuzzParseDIDKey(f *testing.F) {
	f.Add(rfc8032DIDKey)
	f.Add("did:key:z")
	f.Add("did:key:z111111")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseDIDKey(s)
		if err != nil {
			return
		}
		// Anything accepted must be canonical or decode to the same id.
		again, err := ParseDIDKey(id.DIDKey())
		if err != nil || again != id {
			t.Fatalf("re-parse of %q gave %v, %v", id.DIDKey(), again, err)
		}
	})
}
