package mdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/meshnode/meshnode/node/mesh"
)

// Interface is what interface selection needs to know of a network
// interface; SystemInterfaces lists the host's, tests write their own.
type Interface struct {
	Name  string
	Index int
	Flags net.Flags
	Addrs []netip.Addr
}

// A Link is an interface chosen for mDNS.
type Link struct {
	Name  string
	Index int
	// Addrs are the addresses that may be announced on it.
	Addrs []netip.Addr
	// IPv4 and IPv6 say which families it can send mDNS queries on.
	IPv4, IPv6 bool
}

// ErrNoInterface: no interface holds the pinned address.
var ErrNoInterface = errors.New("mdns: no interface holds the bind address")

// SystemInterfaces lists the host's network interfaces.
func SystemInterfaces() ([]Interface, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("mdns: list interfaces: %w", err)
	}
	out := make([]Interface, 0, len(list))
	for _, ni := range list {
		addrs, err := ni.Addrs()
		if err != nil {
			continue // it went away meanwhile
		}
		it := Interface{Name: ni.Name, Index: ni.Index, Flags: ni.Flags}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				it.Addrs = append(it.Addrs, p.Addr())
			}
		}
		out = append(out, it)
	}
	return out, nil
}

// Choose picks the interfaces mDNS runs on, given the address the mesh is
// bound to.
//
// A specific bind address (--bind-ip) pins mDNS to the interface holding
// it, whatever its kind, and that address is the only one announced; it is
// an error for no interface to hold it. An unspecified bind address chooses
// every interface that is up and can multicast, except loopback,
// point-to-point links (VPN tunnels) and container or VM bridges; each
// announces its addresses other than link-local ones (IPv4 only when the
// mesh is bound to 0.0.0.0). An interface with nothing to announce is not
// chosen.
func Choose(ifaces []Interface, bind netip.Addr) ([]Link, error) {
	bind = bind.Unmap()
	if bind.IsValid() && !bind.IsUnspecified() {
		for _, it := range ifaces {
			if !slices.ContainsFunc(it.Addrs, func(a netip.Addr) bool { return a.Unmap().WithZone("") == bind.WithZone("") }) {
				continue
			}
			switch {
			case it.Flags&net.FlagUp == 0:
				return nil, fmt.Errorf("mdns: interface %s, which holds %s, is down", it.Name, bind)
			case it.Flags&net.FlagMulticast == 0:
				return nil, fmt.Errorf("mdns: interface %s, which holds %s, cannot multicast", it.Name, bind)
			}
			return []Link{linkOf(it, []netip.Addr{bind.WithZone("")})}, nil
		}
		return nil, fmt.Errorf("%w: %s", ErrNoInterface, bind)
	}
	v4only := bind.IsValid() && bind.Is4()
	var out []Link
	for _, it := range ifaces {
		const want = net.FlagUp | net.FlagMulticast
		if it.Flags&want != want || it.Flags&(net.FlagLoopback|net.FlagPointToPoint) != 0 || mesh.IsVirtual(it.Name) {
			continue
		}
		var v4, v6 []netip.Addr
		for _, a := range it.Addrs {
			a = a.Unmap().WithZone("")
			switch {
			case a.IsLinkLocalUnicast() || a.IsLoopback() || a.IsMulticast() || a.IsUnspecified():
			case a.Is4():
				v4 = append(v4, a)
			case !v4only:
				v6 = append(v6, a)
			}
		}
		if addrs := append(v4, v6...); len(addrs) > 0 {
			out = append(out, linkOf(it, addrs))
		}
	}
	return out, nil
}

func linkOf(it Interface, addrs []netip.Addr) Link {
	l := Link{Name: it.Name, Index: it.Index, Addrs: addrs}
	for _, a := range it.Addrs {
		if a.Unmap().Is4() {
			l.IPv4 = true
		} else {
			l.IPv6 = true
		}
	}
	return l
}
