package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshnode/meshnode/node/identity"
)

// EndpointAddr is how to reach a node: its identity and the UDP addresses
// it listens on. Its JSON form is upstream's (iroh's EndpointAddr), used in
// PeerAnnouncement.serialized_addr and invite tokens:
//
//	{"id":"<64 hex>","addrs":[{"Ip":"192.168.1.5:9338"},{"Relay":"https://..."}]}
type EndpointAddr struct {
	ID    identity.EndpointID
	Addrs []netip.AddrPort
	// Relays are relay URLs an upstream peer may list. meshnode dials only
	// direct addresses; relays are kept so that re-encoding loses nothing.
	Relays []string
}

// Bounds on a decoded EndpointAddr, which arrives from peers in gossip:
// a real one lists a handful of addresses in well under a kilobyte.
const (
	MaxEndpointAddrJSON  = 16 << 10
	MaxEndpointAddrAddrs = 64
)

// ErrBadEndpointAddr is wrapped by every EndpointAddr decoding failure.
var ErrBadEndpointAddr = errors.New("mesh: bad endpoint address")

// transportAddr is one element of "addrs": an externally tagged enum, as
// serde writes Rust enums.
type transportAddr struct {
	IP    string `json:"Ip,omitempty"`
	Relay string `json:"Relay,omitempty"`
}

type endpointAddrJSON struct {
	ID    string          `json:"id"`
	Addrs []transportAddr `json:"addrs"`
}

// MarshalJSON writes the upstream form, direct addresses first.
func (a EndpointAddr) MarshalJSON() ([]byte, error) {
	out := endpointAddrJSON{ID: a.ID.String(), Addrs: make([]transportAddr, 0, len(a.Addrs)+len(a.Relays))}
	for _, ap := range a.Addrs {
		out.Addrs = append(out.Addrs, transportAddr{IP: ap.String()})
	}
	for _, r := range a.Relays {
		out.Addrs = append(out.Addrs, transportAddr{Relay: r})
	}
	return json.Marshal(out)
}

// UnmarshalJSON parses the upstream form under the bounds above. Address
// kinds it does not know are skipped, so a newer peer's additions do not
// make its address unreadable.
func (a *EndpointAddr) UnmarshalJSON(b []byte) error {
	if len(b) > MaxEndpointAddrJSON {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrBadEndpointAddr, len(b), MaxEndpointAddrJSON)
	}
	var in endpointAddrJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("%w: %v", ErrBadEndpointAddr, err)
	}
	id, err := identity.ParseEndpointID(in.ID)
	if err != nil {
		return fmt.Errorf("%w: id: %w", ErrBadEndpointAddr, err)
	}
	if len(in.Addrs) > MaxEndpointAddrAddrs {
		return fmt.Errorf("%w: %d addresses, limit %d", ErrBadEndpointAddr, len(in.Addrs), MaxEndpointAddrAddrs)
	}
	out := EndpointAddr{ID: id}
	for i, t := range in.Addrs {
		switch {
		case t.IP != "":
			ap, err := netip.ParseAddrPort(t.IP)
			if err != nil {
				return fmt.Errorf("%w: addrs[%d]: %v", ErrBadEndpointAddr, i, err)
			}
			if !dialable(ap) {
				return fmt.Errorf("%w: addrs[%d]: %s cannot be dialled", ErrBadEndpointAddr, i, ap)
			}
			out.Addrs = append(out.Addrs, ap)
		case t.Relay != "":
			out.Relays = append(out.Relays, t.Relay)
		}
	}
	*a = out
	return nil
}

// ParseEndpointAddr decodes the JSON form.
func ParseEndpointAddr(b []byte) (EndpointAddr, error) {
	var a EndpointAddr
	err := a.UnmarshalJSON(b)
	return a, err
}

// String is a short form for logs: the id's prefix and the addresses.
func (a EndpointAddr) String() string {
	return fmt.Sprintf("%s@%v", a.ID.Short(), a.Addrs)
}

// dialable reports whether ap can be a destination: a specified address
// and a non-zero port.
func dialable(ap netip.AddrPort) bool {
	return ap.IsValid() && ap.Port() != 0 && !ap.Addr().IsUnspecified() && !ap.Addr().IsMulticast()
}

// mergeAddrs returns the dialable addresses of lists in order, without
// duplicates, at most MaxEndpointAddrAddrs of them.
func mergeAddrs(lists ...[]netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range lists {
		for _, ap := range l {
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if dialable(ap) && !slices.Contains(out, ap) && len(out) < MaxEndpointAddrAddrs {
				out = append(out, ap)
			}
		}
	}
	return out
}
