package control

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/mesh"
)

func TestEndpointToken(t *testing.T) {
	a := mesh.EndpointAddr{ID: seededKey(t, seedNodeB).ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort("192.168.1.5:9338")}}
	tok, err := EncodeEndpoint(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, EndpointPrefix) {
		t.Fatalf("token %q", tok)
	}
	back, err := ParseEndpoint("  " + tok + "\n")
	if err != nil || back.ID != a.ID || len(back.Addrs) != 1 || back.Addrs[0] != a.Addrs[0] {
		t.Fatalf("ParseEndpoint: %v, %v", back, err)
	}
	invite, _ := token.Encode(a)
	_, err = ParseEndpoint(invite)
	wantCode(t, err, ErrEndpointRequired)
	if !strings.Contains(err.Error(), "invite token") {
		t.Fatalf("an invite token is not named as such: %v", err)
	}
	for _, bad := range []string{"", "ctl1.", "ctl1.!!!", "hello", EndpointPrefix + "eyJpZCI6IjEyIn0"} {
		if _, err := ParseEndpoint(bad); !errors.Is(err, ErrEndpointRequired) {
			t.Fatalf("ParseEndpoint(%q) = %v", bad, err)
		}
	}
	if _, err := EncodeEndpoint(mesh.EndpointAddr{ID: a.ID}); err == nil {
		t.Fatal("a token without addresses encoded")
	}
}

func FuzzParseEndpoint(f *testing.F) {
	a := mesh.EndpointAddr{ID: seededKey(f, seedNodeB).ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort("[fe80::1]:9338")}}
	tok, _ := EncodeEndpoint(a)
	f.Add(tok)
	f.Add(EndpointPrefix)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseEndpoint(s)
		if err != nil {
			if !errors.Is(err, ErrEndpointRequired) {
				t.Fatalf("error %v is not CONTROL_ENDPOINT_REQUIRED", err)
			}
			return
		}
		again, err := EncodeEndpoint(a)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := ParseEndpoint(again); err != nil || b.ID != a.ID {
			t.Fatalf("round trip: %v", err)
		}
	})
}
