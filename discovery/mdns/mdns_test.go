package mdns

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/mesh"
)

func TestNewErrors(t *testing.T) {
	found := func(mesh.EndpointAddr) {}
	listen := netip.MustParseAddrPort("[::]:9338")
	for _, tc := range []struct {
		name string
		cfg  Config
		says string
	}{
		{"no id", Config{Listen: listen, Found: found}, "no node id"},
		{"no listen", Config{ID: testID(t, 1), Found: found}, "listen address"},
		{"port zero", Config{ID: testID(t, 1), Listen: netip.MustParseAddrPort("[::]:0"), Found: found}, "listen address"},
		{"no found", Config{ID: testID(t, 1), Listen: listen}, "no Found"},
		{"long mesh id", Config{ID: testID(t, 1), Listen: listen, Found: found, MeshID: strings.Repeat("m", MaxValue+1)}, "mesh_id"},
		{"control in mesh id", Config{ID: testID(t, 1), Listen: listen, Found: found, MeshID: "a\nb"}, "mesh_id"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// TestServePinnedNowhere: a mesh pinned to an address no interface holds
// fails Serve at once, rather than announcing nothing forever.
func TestServePinnedNowhere(t *testing.T) {
	m, err := New(Config{
		ID: testID(t, 1), Listen: netip.MustParseAddrPort("192.168.99.1:9338"), Found: func(mesh.EndpointAddr) {},
		Interfaces: func() ([]Interface, error) { return hostInterfaces, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Serve(context.Background()); !errors.Is(err, ErrNoInterface) {
		t.Fatalf("Serve: %v, want ErrNoInterface", err)
	}
}

// TestAdvert: the announcement names the node's LAN addresses on the
// mesh's port, IPv4 first, with its hints and a token fingerprint only.
func TestAdvert(t *testing.T) {
	id := testID(t, 1)
	m, err := New(Config{ID: id, Listen: netip.MustParseAddrPort("[::]:9338"), Found: func(mesh.EndpointAddr) {},
		MeshID: "lab", Version: "v1", Token: "secret-token",
		Hints: func() Hints { return Hints{VRAM: 8 << 30, Serving: []string{"fortunes"}} }})
	if err != nil {
		t.Fatal(err)
	}
	links, err := Choose(hostInterfaces, netip.IPv6Unspecified())
	if err != nil {
		t.Fatal(err)
	}
	txt, err := m.advert(links).TXT()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(txt, " ")
	want := `svc=mesh-llm schema=1 version=v1 mesh_id=lab ep_addr={"id":"` + id.String() + `","addrs":[` +
		`{"Ip":"192.168.1.20:9338"},{"Ip":"10.0.0.7:9338"},{"Ip":"[fd00::20]:9338"},{"Ip":"[2001:db8::20]:9338"}]} ` +
		`tok_fp=` + m.tokenFP + ` vram=8589934592 serving=fortunes`
	if got != want {
		t.Fatalf("announcement\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(got, "secret-token") {
		t.Fatal("the token itself is announced")
	}
}
