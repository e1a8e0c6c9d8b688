package token

import (
	"encoding/base64"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

func testID(t testing.TB) identity.EndpointID {
	k, err := identity.KeyFromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

func testAddr(t testing.TB) mesh.EndpointAddr {
	return mesh.EndpointAddr{
		ID: testID(t),
		Addrs: []netip.AddrPort{
			netip.MustParseAddrPort("192.168.1.5:9338"),
			netip.MustParseAddrPort("[fd00::5]:9338"),
		},
	}
}

// TestGolden pins the token form: a token printed by one version must
// be accepted by every later one, and by upstream's decoder.
func TestGolden(t *testing.T) {
	tok, err := Encode(testAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/token.txt")
	if err != nil {
		t.Fatal(err)
	}
	if tok != strings.TrimSpace(string(want)) {
		t.Fatalf("token\n%s\nwant\n%s", tok, want)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"id":"3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29",` +
		`"addrs":[{"Ip":"192.168.1.5:9338"},{"Ip":"[fd00::5]:9338"}]}`
	if string(raw) != wantJSON {
		t.Fatalf("token JSON\n%s\nwant\n%s", raw, wantJSON)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, a := range []mesh.EndpointAddr{
		testAddr(t),
		{ID: testID(t), Addrs: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:1")}},
		{ID: testID(t), Addrs: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:65535")}, Relays: []string{"https://r.example/"}},
	} {
		tok, err := Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(tok, "+/=") {
			t.Errorf("token %q is not unpadded base64url", tok)
		}
		for _, variant := range []string{tok, " " + tok + "\n", tok + "=="} {
			back, err := Decode(variant)
			if err != nil {
				t.Fatalf("Decode(%q): %v", variant, err)
			}
			if back.ID != a.ID || !slices.Equal(back.Addrs, a.Addrs) || !slices.Equal(back.Relays, a.Relays) {
				t.Fatalf("round trip of %v gave %v", a, back)
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	if _, err := Encode(mesh.EndpointAddr{ID: testID(t)}); !errors.Is(err, ErrNoAddress) {
		t.Fatalf("no addresses: %v, want ErrNoAddress", err)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestDecodeErrors(t *testing.T) {
	id := testID(t).String()
	for _, tc := range []struct {
		name string
		tok  string
		want error
		says string // the message must say this, so a user can act on it
	}{
		{"empty", "", ErrEmpty, "empty"},
		{"blank", " \n\t", ErrEmpty, "empty"},
		{"too long", strings.Repeat("A", MaxLen+1), ErrTooLong, "limit"},
		{"standard base64", "ab+/cd", ErrBase64, "standard base64"},
		{"not base64", "not a token!", ErrBase64, "base64url"},
		{"truncated base64", b64(`{"id":"` + id + `"}`)[:5], ErrBase64, "base64url"},
		{"not json", b64("hello"), ErrJSON, "endpoint address"},
		{"json array", b64(`[1,2]`), ErrJSON, "endpoint address"},
		{"truncated json", b64(`{"id":"` + id), ErrJSON, "endpoint address"},
		{"no id", b64(`{"addrs":[{"Ip":"10.0.0.1:9338"}]}`), ErrID, `no "id"`},
		{"short id", b64(`{"id":"abcd","addrs":[{"Ip":"10.0.0.1:9338"}]}`), ErrID, "4 characters, want 64"},
		{"long id", b64(`{"id":"` + id + `00","addrs":[{"Ip":"10.0.0.1:9338"}]}`), ErrID, "66 characters"},
		{"non-hex id", b64(`{"id":"` + strings.Repeat("g", 64) + `","addrs":[{"Ip":"10.0.0.1:9338"}]}`), ErrID, "not hex"},
		{"id not a string", b64(`{"id":7,"addrs":[]}`), ErrJSON, "endpoint address"},
		{"bad ip", b64(`{"id":"` + id + `","addrs":[{"Ip":"10.0.0.300:9338"}]}`), ErrAddress, "addrs[0]"},
		{"no port", b64(`{"id":"` + id + `","addrs":[{"Ip":"10.0.0.1"}]}`), ErrAddress, "addrs[0]"},
		{"port zero", b64(`{"id":"` + id + `","addrs":[{"Ip":"10.0.0.1:0"}]}`), ErrAddress, "cannot be dialled"},
		{"unspecified", b64(`{"id":"` + id + `","addrs":[{"Ip":"0.0.0.0:9338"}]}`), ErrAddress, "cannot be dialled"},
		{"no addrs", b64(`{"id":"` + id + `"}`), ErrNoAddress, "no addresses"},
		{"empty addrs", b64(`{"id":"` + id + `","addrs":[]}`), ErrNoAddress, "no addresses"},
		{"relay only", b64(`{"id":"` + id + `","addrs":[{"Relay":"https://r.example/"}]}`), ErrNoAddress, "relay"},
		{"unknown kind only", b64(`{"id":"` + id + `","addrs":[{"Quic":"x"}]}`), ErrNoAddress, "no addresses"},
		{"too many addrs", b64(`{"id":"` + id + `","addrs":[` +
			strings.Repeat(`{"Ip":"10.0.0.1:1"},`, mesh.MaxEndpointAddrAddrs) + `{"Ip":"10.0.0.1:1"}]}`), ErrAddress, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Decode(tc.tok)
			if err == nil {
				t.Fatalf("Decode accepted it: %v", a)
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %q, want %q (and ErrInvalid)", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	tok, err := Encode(testAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint(tok)
	if len(fp) != 32 || strings.ToLower(fp) != fp || !isHex(fp) {
		t.Fatalf("fingerprint %q: want 32 lowercase hex digits", fp)
	}
	if Fingerprint(" "+tok+"\n") != fp {
		t.Error("white space around the token changed its fingerprint")
	}
	if Fingerprint(tok+"x") == fp {
		t.Error("different tokens share a fingerprint")
	}
	if strings.Contains(tok, fp) {
		t.Error("the fingerprint is part of the token")
	}
	// Pinned to a value computed independently (Python's hashlib) by
	// upstream's rule, so either kind of node recognises the other's tok_fp.
	if got, want := Fingerprint("very-secret-reusable-invite-token"), "19684e3b8888592bd90d43d7906ef2f8"; got != want {
		t.Errorf("Fingerprint = %s, want %s", got, want)
	}
}

// FuzzDecode holds Decode to its contract on any input: no panic, a
// bounded result, and anything accepted re-encodes to a token that decodes
// to the same address.
func FuzzDecode(f *testing.F) {
	tok, err := Encode(testAddr(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok)
	f.Add(b64(`{"id":"` + testID(f).String() + `","addrs":[{"Ip":"10.0.0.1:9338"},{"Relay":"https://r/"}]}`))
	f.Add(b64(`{"id":"abcd","addrs":[]}`))
	f.Add("")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Decode(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if len(a.Addrs) == 0 || len(a.Addrs) > mesh.MaxEndpointAddrAddrs {
			t.Fatalf("accepted %d addresses", len(a.Addrs))
		}
		again, err := Encode(a)
		if err != nil {
			t.Fatalf("re-encode of accepted %v: %v", a, err)
		}
		b, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded token does not decode: %v", err)
		}
		if b.ID != a.ID || !slices.Equal(b.Addrs, a.Addrs) || !slices.Equal(b.Relays, a.Relays) {
			t.Fatalf("re-encode changed %v to %v", a, b)
		}
	})
}
