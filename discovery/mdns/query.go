package mdns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// The browse side is a one-shot multicast DNS querier (RFC 6762 §5.1): it
// sends a PTR question for the service from an ephemeral port on one
// interface and reads the unicast answers responders send back to that
// port (§6.7). It joins no multicast group, so unlike hashicorp/mdns's
// client it needs no multicast route: it works on an isolated LAN with no
// default gateway, and on exactly the interface it is given.

var (
	mdnsGroup4 = netip.AddrPortFrom(netip.MustParseAddr("224.0.0.251"), 5353)
	mdnsGroup6 = netip.AddrPortFrom(netip.MustParseAddr("ff02::fb"), 5353)
)

const (
	// maxPacket is RFC 6762 §17's largest mDNS message.
	maxPacket = 9000
	// maxSightings bounds what one browse collects, so that a LAN host
	// flooding answers costs bounded memory.
	maxSightings = 256
)

// A sighting is one mesh-llm instance in the answers to a query.
type sighting struct {
	Instance string   // the instance's name, lower case
	TXT      []string // raw strings; nil until a TXT record arrives
	Port     uint16   // from the SRV record; 0 until one arrives
	From     netip.AddrPort
}

// serviceFQDN is the name browsed for.
const serviceFQDN = Service + ".local."

// query asks for the service on link over one family and returns the
// instances answered within window.
func query(ctx context.Context, link Link, v6 bool, window time.Duration) ([]sighting, error) {
	network, laddr, group := "udp4", &net.UDPAddr{IP: net.IPv4zero}, mdnsGroup4
	if v6 {
		network, laddr, group = "udp6", &net.UDPAddr{IP: net.IPv6unspecified}, mdnsGroup6
	}
	conn, err := net.ListenUDP(network, laddr)
	if err != nil {
		return nil, fmt.Errorf("mdns: query socket: %w", err)
	}
	defer conn.Close()
	ifi := &net.Interface{Index: link.Index, Name: link.Name}
	if v6 {
		p := ipv6.NewPacketConn(conn)
		err = errors.Join(p.SetMulticastInterface(ifi), p.SetMulticastHopLimit(255))
	} else {
		p := ipv4.NewPacketConn(conn)
		err = errors.Join(p.SetMulticastInterface(ifi), p.SetMulticastTTL(255))
	}
	if err != nil {
		return nil, fmt.Errorf("mdns: query on %s: %w", link.Name, err)
	}
	q := new(dns.Msg)
	q.SetQuestion(serviceFQDN, dns.TypePTR)
	q.RecursionDesired = false
	pkt, err := q.Pack()
	if err != nil {
		return nil, fmt.Errorf("mdns: pack query: %w", err)
	}
	dst := net.UDPAddrFromAddrPort(group)
	if v6 {
		dst.Zone = link.Name
	}
	deadline := time.Now().Add(window)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	// The question goes out twice, half a window apart, so that one lost
	// datagram does not hide every peer until the next browse.
	if _, err := conn.WriteTo(pkt, dst); err != nil {
		return nil, fmt.Errorf("mdns: send query on %s: %w", link.Name, err)
	}
	resend := time.AfterFunc(window/2, func() { conn.WriteTo(pkt, dst) })
	defer resend.Stop()

	var c collector
	buf := make([]byte, maxPacket)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return c.sightings(), nil
			}
			return c.sightings(), fmt.Errorf("mdns: read answers on %s: %w", link.Name, err)
		}
		c.add(buf[:n], from)
	}
}

// collector gathers the mesh-llm instances in a stream of answer packets.
type collector struct {
	byName map[string]*sighting
	order  []string
}

// add reads one packet from an untrusted sender. Anything that is not a
// well-formed DNS response is ignored, as RFC 6762 §18 asks.
func (c *collector) add(pkt []byte, from netip.AddrPort) {
	var m dns.Msg
	if m.Unpack(pkt) != nil || !m.Response || m.Opcode != dns.OpcodeQuery || m.Rcode != dns.RcodeSuccess {
		return
	}
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			switch r := rr.(type) {
			case *dns.SRV:
				if s := c.instance(r.Hdr.Name, from); s != nil && s.Port == 0 {
					s.Port = r.Port
				}
			case *dns.TXT:
				if s := c.instance(r.Hdr.Name, from); s != nil && s.TXT == nil {
					raw := make([]string, 0, len(r.Txt))
					for _, p := range r.Txt {
						raw = append(raw, txtRaw(p))
					}
					s.TXT = raw
				}
			}
		}
	}
}

// instance returns the sighting for an instance name under the service,
// creating it while under the bound; nil for other names.
func (c *collector) instance(name string, from netip.AddrPort) *sighting {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, "."+serviceFQDN) {
		return nil
	}
	if s := c.byName[name]; s != nil {
		return s
	}
	if len(c.order) >= maxSightings {
		return nil
	}
	if c.byName == nil {
		c.byName = make(map[string]*sighting)
	}
	s := &sighting{Instance: name, From: from}
	c.byName[name] = s
	c.order = append(c.order, name)
	return s
}

// sightings returns the instances seen with a TXT record, in the order
// first heard.
func (c *collector) sightings() []sighting {
	var out []sighting
	for _, n := range c.order {
		if s := c.byName[n]; s.TXT != nil {
			out = append(out, *s)
		}
	}
	return out
}

// txtRaw undoes miekg/dns's presentation escaping of a TXT string (\" \\
// and \DDD), giving the bytes on the wire.
func txtRaw(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		if i+2 < len(s) && isDigit(s[i]) && isDigit(s[i+1]) && isDigit(s[i+2]) {
			b.WriteByte(byte(int(s[i]-'0')*100 + int(s[i+1]-'0')*10 + int(s[i+2]-'0')))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// txtPresent escapes raw TXT bytes the way miekg/dns packs them back:
// backslash and unprintable bytes are escaped, the rest is as is.
func txtPresent(raw string) string {
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			fmt.Fprintf(&b, `\%03d`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
