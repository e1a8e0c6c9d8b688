package control_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/mesh"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
)

func TestEndpointToken(t *testing.T) {
	a := mesh.EndpointAddr{ID: key(t, controltest.SeedNode).ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort("192.168.1.5:9338")}}
	tok, err := control.EncodeEndpoint(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, control.EndpointPrefix) {
		t.Fatalf("token %q", tok)
	}
	back, err := control.ParseEndpoint("  " + tok + "\n")
	if err != nil || back.ID != a.ID || len(back.Addrs) != 1 || back.Addrs[0] != a.Addrs[0] {
		t.Fatalf("ParseEndpoint: %v, %v", back, err)
	}
	invite, _ := token.Encode(a)
	_, err = control.ParseEndpoint(invite)
	wantCode(t, err, control.ErrEndpointRequired)
	if !strings.Contains(err.Error(), "invite token") {
		t.Fatalf("an invite token is not named as such: %v", err)
	}
	for _, bad := range []string{"", "ctl1.", "ctl1.!!!", "hello", control.EndpointPrefix + "eyJpZCI6IjEyIn0"} {
		if _, err := control.ParseEndpoint(bad); !errors.Is(err, control.ErrEndpointRequired) {
			t.Fatalf("ParseEndpoint(%q) = %v", bad, err)
		}
	}
	if _, err := control.EncodeEndpoint(mesh.EndpointAddr{ID: a.ID}); err == nil {
		t.Fatal("a token without addresses encoded")
	}
}

func TestWriteEndpointFile(t *testing.T) {
	a := mesh.EndpointAddr{ID: key(t, controltest.SeedNode).ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9338")}}
	dir := t.TempDir()
	tok, err := control.WriteEndpointFile(dir, a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, control.EndpointFile))
	if err != nil || string(b) != tok+"\n" {
		t.Fatalf("file holds %q, %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, control.EndpointFile)); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if back, err := control.ParseEndpoint(string(b)); err != nil || back.ID != a.ID {
		t.Fatalf("the file does not parse back: %v", err)
	}
}

func FuzzParseEndpoint(f *testing.F) {
	a := mesh.EndpointAddr{ID: key(f, controltest.SeedNode).ID(), Addrs: []netip.AddrPort{netip.MustParseAddrPort("[fe80::1]:9338")}}
	tok, _ := control.EncodeEndpoint(a)
	f.Add(tok)
	f.Add(control.EndpointPrefix)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := control.ParseEndpoint(s)
		if err != nil {
			if !errors.Is(err, control.ErrEndpointRequired) {
				t.Fatalf("error %v is not CONTROL_ENDPOINT_REQUIRED", err)
			}
			return
		}
		again, err := control.EncodeEndpoint(a)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := control.ParseEndpoint(again); err != nil || b.ID != a.ID {
			t.Fatalf("round trip: %v", err)
		}
	})
}
