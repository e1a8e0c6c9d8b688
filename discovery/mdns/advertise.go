package mdns

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	hmdns "github.com/hashicorp/mdns"
	"github.com/miekg/dns"
)

// The advertise side is hashicorp/mdns's responder: one Server per chosen
// interface, each joined to the mDNS group on that interface only, all
// answering from one zone that Serve replaces when the announcement
// changes.

// zone is an hmdns.Zone whose records can be swapped while servers use it.
type zone struct {
	svc atomic.Pointer[hmdns.MDNSService]
}

// Records answers q from the current service, or not at all before one is
// set.
func (z *zone) Records(q dns.Question) []dns.RR {
	if s := z.svc.Load(); s != nil {
		return s.Records(q)
	}
	return nil
}

// set announces txt (raw strings) for instance on port, with addrs as the
// host's A and AAAA records; no addresses withdraws the announcement.
func (z *zone) set(instance string, port uint16, addrs []netip.Addr, txt []string) error {
	if len(addrs) == 0 {
		z.svc.Store(nil)
		return nil
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		ips[i] = a.AsSlice()
	}
	present := make([]string, len(txt))
	for i, s := range txt {
		present[i] = txtPresent(s)
	}
	svc, err := hmdns.NewMDNSService(instance, Service, "local.", instance+".local.", int(port), ips, present)
	if err != nil {
		return fmt.Errorf("mdns: service record: %w", err)
	}
	z.svc.Store(svc)
	return nil
}

// responder is the Server on one link.
type responder struct {
	srv *hmdns.Server
}

func startResponder(l Link, z *zone, logger *slog.Logger) (*responder, error) {
	srv, err := hmdns.NewServer(&hmdns.Config{
		Zone:   z,
		Iface:  &net.Interface{Index: l.Index, Name: l.Name, Flags: net.FlagUp | net.FlagMulticast},
		Logger: log.New(slogWriter{logger.With("link", l.Name)}, "", 0),
	})
	if err != nil {
		return nil, fmt.Errorf("mdns: responder on %s: %w", l.Name, err)
	}
	return &responder{srv: srv}, nil
}

func (r *responder) stop() { r.srv.Shutdown() }

// slogWriter carries hashicorp/mdns's log lines (malformed packets from
// the LAN, mostly) to the node's logger at debug level.
type slogWriter struct{ l *slog.Logger }

var _ io.Writer = slogWriter{}

func (w slogWriter) Write(b []byte) (int, error) {
	w.l.Debug("mdns: responder", "msg", strings.TrimSpace(string(b)))
	return len(b), nil
}
