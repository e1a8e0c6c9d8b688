package mdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

const (
	up = net.FlagUp | net.FlagMulticast | net.FlagBroadcast
)

// hostInterfaces is a Docker and Kubernetes host with Wi-Fi, a VPN and
// the usual virtual clutter.
var hostInterfaces = []Interface{
	{Name: "lo", Index: 1, Flags: net.FlagUp | net.FlagLoopback, Addrs: addrs("127.0.0.1", "::1")},
	{Name: "eth0", Index: 2, Flags: up, Addrs: addrs("192.168.1.20", "fe80::1", "fd00::20", "2001:db8::20")},
	{Name: "wlan0", Index: 3, Flags: up, Addrs: addrs("10.0.0.7", "fe80::2")},
	{Name: "docker0", Index: 4, Flags: up, Addrs: addrs("172.17.0.1", "fe80::42")},
	{Name: "br-5f2c1a", Index: 5, Flags: up, Addrs: addrs("172.18.0.1")},
	{Name: "veth12ab", Index: 6, Flags: up, Addrs: addrs("fe80::99")},
	{Name: "cni0", Index: 7, Flags: up, Addrs: addrs("10.244.0.1")},
	{Name: "flannel.1", Index: 8, Flags: up, Addrs: addrs("10.244.0.0")},
	{Name: "virbr0", Index: 9, Flags: up, Addrs: addrs("192.168.122.1")},
	{Name: "tailscale0", Index: 10, Flags: net.FlagUp | net.FlagPointToPoint | net.FlagMulticast, Addrs: addrs("100.101.1.2")},
	{Name: "wg0", Index: 11, Flags: net.FlagUp | net.FlagPointToPoint, Addrs: addrs("10.8.0.2")},
	{Name: "eth1", Index: 12, Flags: net.FlagBroadcast | net.FlagMulticast, Addrs: addrs("192.168.50.2")}, // down
	{Name: "ib0", Index: 13, Flags: net.FlagUp | net.FlagBroadcast, Addrs: addrs("192.168.60.2")},         // no multicast
	{Name: "eth2", Index: 14, Flags: up, Addrs: addrs("fe80::7", "169.254.3.3")},                          // link-local only
}

func describe(links []Link) string {
	var parts []string
	for _, l := range links {
		parts = append(parts, fmt.Sprintf("%s%v v4=%v v6=%v", l.Name, l.Addrs, l.IPv4, l.IPv6))
	}
	return strings.Join(parts, "; ")
}

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name string
		bind string
		want string
	}{
		{"dual-stack", "::", "eth0[192.168.1.20 fd00::20 2001:db8::20] v4=true v6=true; wlan0[10.0.0.7] v4=true v6=true"},
		{"not bound", "", "eth0[192.168.1.20 fd00::20 2001:db8::20] v4=true v6=true; wlan0[10.0.0.7] v4=true v6=true"},
		{"IPv4 only", "0.0.0.0", "eth0[192.168.1.20] v4=true v6=true; wlan0[10.0.0.7] v4=true v6=true"},
		{"pinned", "10.0.0.7", "wlan0[10.0.0.7] v4=true v6=true"},
		{"pinned v6", "fd00::20", "eth0[fd00::20] v4=true v6=true"},
		{"pinned mapped", "::ffff:192.168.1.20", "eth0[192.168.1.20] v4=true v6=true"},
		// Pinning is the operator's word: even a bridge is used then.
		{"pinned to docker0", "172.17.0.1", "docker0[172.17.0.1] v4=true v6=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bind netip.Addr
			if tc.bind != "" {
				bind = netip.MustParseAddr(tc.bind)
			}
			links, err := Choose(hostInterfaces, bind)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(links); got != tc.want {
				t.Fatalf("chose\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestChooseNeverBridges: unpinned, no container, VM or VPN address is
// ever announced, whatever else the host has.
func TestChooseNeverBridges(t *testing.T) {
	links, err := Choose(hostInterfaces, netip.IPv6Unspecified())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		for _, a := range l.Addrs {
			for _, bad := range []string{"172.17.", "172.18.", "10.244.", "192.168.122.", "100.101.", "10.8.", "127.", "fe80:", "169.254."} {
				if strings.HasPrefix(a.String(), bad) {
					t.Errorf("link %s announces %s", l.Name, a)
				}
			}
		}
	}
	// A host with nothing but bridges chooses nothing.
	only := []Interface{hostInterfaces[0], hostInterfaces[3], hostInterfaces[4], hostInterfaces[5]}
	if links, err := Choose(only, netip.Addr{}); err != nil || len(links) != 0 {
		t.Fatalf("bridges only: chose %s, %v", describe(links), err)
	}
}

func TestChooseErrors(t *testing.T) {
	for _, tc := range []struct {
		bind string
		says string
	}{
		{"192.168.99.1", "no interface holds"},
		{"192.168.50.2", "down"},
		{"192.168.60.2", "cannot multicast"},
	} {
		_, err := Choose(hostInterfaces, netip.MustParseAddr(tc.bind))
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("bind %s: %v, want an error saying %q", tc.bind, err, tc.says)
		}
	}
	if _, err := Choose(hostInterfaces, netip.MustParseAddr("192.168.99.1")); !errors.Is(err, ErrNoInterface) {
		t.Errorf("missing address: %v, want ErrNoInterface", err)
	}
}
