package mesh

import (
	"net"
	"net/netip"
	"slices"
	"strings"
)

// iface is what address selection needs to know of a network interface.
type iface struct {
	Name  string
	Up    bool
	Addrs []netip.Addr
}

// systemInterfaces lists the host's interfaces.
func systemInterfaces() ([]iface, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]iface, 0, len(list))
	for _, ni := range list {
		addrs, err := ni.Addrs()
		if err != nil {
			continue // an interface that vanished meanwhile
		}
		it := iface{Name: ni.Name, Up: ni.Flags&net.FlagUp != 0}
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				it.Addrs = append(it.Addrs, pfx.Addr())
			}
		}
		out = append(out, it)
	}
	return out, nil
}

// virtualPrefixes name interfaces that exist only inside this host:
// container and VM bridges and their veth ends. Their addresses (Docker's
// 172.17.0.1, ...) are the same on every host, so advertising one sends
// peers to themselves or to nothing.
var virtualPrefixes = []string{
	"docker", "br-", "veth", "cni", "flannel", "cali", "weave", "kube-",
	"virbr", "vnet", "vmnet", "vboxnet", "lxcbr", "lxdbr", "podman", "cilium",
}

// IsVirtual reports whether an interface name is a container or VM bridge
// or a veth end, whose addresses are never announced (here or by mDNS).
func IsVirtual(name string) bool {
	return slices.ContainsFunc(virtualPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// advertiseAddrs chooses the addresses a node bound to bind announces. A
// bind pinned to one IP announces exactly that. An unspecified bind
// announces the addresses of up, physical interfaces, IPv4 first, skipping
// link-local ones; loopback only when nothing else exists (a lone test box).
// An IPv4-only socket (bound to 0.0.0.0) announces no IPv6.
func advertiseAddrs(bind netip.AddrPort, ifaces []iface) []netip.AddrPort {
	if !bind.Addr().IsUnspecified() {
		return []netip.AddrPort{bind}
	}
	v4only := bind.Addr().Is4()
	var v4, v6, loop []netip.AddrPort
	for _, it := range ifaces {
		if !it.Up || IsVirtual(it.Name) {
			continue
		}
		for _, a := range it.Addrs {
			a = a.Unmap()
			ap := netip.AddrPortFrom(a.WithZone(""), bind.Port())
			switch {
			case a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified():
			case a.IsLoopback():
				if a.Is4() || !v4only {
					loop = append(loop, ap)
				}
			case a.Is4():
				v4 = append(v4, ap)
			case !v4only:
				v6 = append(v6, ap)
			}
		}
	}
	out := append(v4, v6...)
	if len(out) == 0 {
		out = loop
	}
	return mergeAddrs(out)
}
