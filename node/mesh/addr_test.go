package mesh

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/identity"
)

func fixedID(t testing.TB) identity.EndpointID {
	k, err := identity.KeyFromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

// TestEndpointAddrJSON pins the upstream wire shape with a golden file.
func TestEndpointAddrJSON(t *testing.T) {
	a := EndpointAddr{
		ID: fixedID(t),
		Addrs: []netip.AddrPort{
			netip.MustParseAddrPort("192.168.1.5:9338"),
			netip.MustParseAddrPort("[fd00::5]:9338"),
		},
		Relays: []string{"https://relay.example/"},
	}
	got, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/endpoint-addr.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("encoded\n%s\nwant\n%s", got, want)
	}
	back, err := ParseEndpointAddr(got)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != a.ID || !slices.Equal(back.Addrs, a.Addrs) || !slices.Equal(back.Relays, a.Relays) {
		t.Fatalf("round trip: %+v, want %+v", back, a)
	}
}

func TestParseEndpointAddrErrors(t *testing.T) {
	id := fixedID(t).String()
	for _, tc := range []struct {
		name, in string
	}{
		{"not json", `{"id":`},
		{"no id", `{"addrs":[]}`},
		{"short id", `{"id":"abcd","addrs":[]}`},
		{"bad address", `{"id":"` + id + `","addrs":[{"Ip":"example.com:9338"}]}`},
		{"port zero", `{"id":"` + id + `","addrs":[{"Ip":"10.0.0.1:0"}]}`},
		{"unspecified", `{"id":"` + id + `","addrs":[{"Ip":"0.0.0.0:9338"}]}`},
		{"too many", `{"id":"` + id + `","addrs":[` + strings.Repeat(`{"Ip":"10.0.0.1:1"},`, MaxEndpointAddrAddrs) + `{"Ip":"10.0.0.1:1"}]}`},
		{"too long", `{"id":"` + id + `","x":"` + strings.Repeat("a", MaxEndpointAddrJSON) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseEndpointAddr([]byte(tc.in)); !errors.Is(err, ErrBadEndpointAddr) {
				t.Fatalf("error %v, want ErrBadEndpointAddr", err)
			}
		})
	}
	// Kinds of address we do not know are skipped, not fatal.
	a, err := ParseEndpointAddr([]byte(`{"id":"` + id + `","addrs":[{"Ip":"10.0.0.1:9338"},{"Custom":{"x":1}}]}`))
	if err != nil || len(a.Addrs) != 1 {
		t.Fatalf("unknown address kind: %+v, %v", a, err)
	}
}

// FuzzParseEndpointAddr: any bytes either fail cleanly or parse to an
// address that re-encodes and parses back to itself.
func FuzzParseEndpointAddr(f *testing.F) {
	seed := EndpointAddr{ID: fixedID(f), Addrs: []netip.AddrPort{netip.MustParseAddrPort("10.1.2.3:9338")}, Relays: []string{"https://r/"}}
	b, _ := json.Marshal(seed)
	f.Add(b)
	f.Add([]byte(`{"id":"","addrs":null}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := ParseEndpointAddr(in)
		if err != nil {
			if !errors.Is(err, ErrBadEndpointAddr) {
				t.Fatalf("error not wrapping ErrBadEndpointAddr: %v", err)
			}
			return
		}
		if len(a.Addrs)+len(a.Relays) > MaxEndpointAddrAddrs {
			t.Fatalf("%d addresses past the limit", len(a.Addrs)+len(a.Relays))
		}
		out, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseEndpointAddr(out)
		if err != nil {
			t.Fatalf("re-encoded %s does not parse: %v", out, err)
		}
		if b.ID != a.ID || !slices.Equal(b.Addrs, a.Addrs) || !slices.Equal(b.Relays, a.Relays) {
			t.Fatalf("round trip changed %+v to %+v", a, b)
		}
	})
}

func TestAdvertiseAddrs(t *testing.T) {
	ifaces := []iface{
		{Name: "lo", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}},
		{Name: "eth0", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.5"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("2001:db8::5")}},
		{Name: "wlan0", Up: false, Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.9")}},
		{Name: "docker0", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("172.17.0.1")}},
		{Name: "br-3f2a", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("172.18.0.1")}},
		{Name: "veth12", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("169.254.3.3")}},
		{Name: "cni0", Up: true, Addrs: []netip.Addr{netip.MustParseAddr("10.244.0.1")}},
	}
	aps := func(ss ...string) []netip.AddrPort {
		var out []netip.AddrPort
		for _, s := range ss {
			out = append(out, netip.MustParseAddrPort(s))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		bind   string
		ifaces []iface
		want   []netip.AddrPort
	}{
		{"dual-stack wildcard", "[::]:9338", ifaces, aps("192.168.1.5:9338", "[2001:db8::5]:9338")},
		{"IPv4 wildcard", "0.0.0.0:9338", ifaces, aps("192.168.1.5:9338")},
		{"pinned", "192.168.1.5:9338", ifaces, aps("192.168.1.5:9338")},
		{"pinned to a bridge on purpose", "172.17.0.1:9338", ifaces, aps("172.17.0.1:9338")},
		{"loopback only", "0.0.0.0:7", ifaces[:1], aps("127.0.0.1:7")},
		{"bridges only", "0.0.0.0:7", ifaces[3:], aps()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := advertiseAddrs(netip.MustParseAddrPort(tc.bind), tc.ifaces)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("advertise %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsVirtual(t *testing.T) {
	for name, want := range map[string]bool{
		"docker0": true, "br-0a1b2c": true, "veth9f": true, "cni0": true, "virbr0": true,
		"eth0": false, "en0": false, "wlan0": false, "br0": false, "bond0": false, "enp3s0": false,
	} {
		if IsVirtual(name) != want {
			t.Errorf("IsVirtual(%q) = %v, want %v", name, !want, want)
		}
	}
}
