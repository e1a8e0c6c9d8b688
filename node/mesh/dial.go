package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
)

// dialStagger is how long each address of a peer gets to answer before the
// next is tried alongside it, so that a dead address (a bridge, a stale
// LAN address) costs a fraction of a second, not a handshake timeout.
const dialStagger = 250 * time.Millisecond

// DialQUIC connects over tr, as key and for alpn, to the node id at the
// first of addrs to complete a handshake proving that identity, trying
// them staggered. Every attempt has ended when it returns; a late second
// success is closed. Owner-control clients dial through it too.
func DialQUIC(ctx context.Context, tr *quic.Transport, key *identity.Key, qc *quic.Config,
	id identity.EndpointID, alpn string, addrs []netip.AddrPort) (*quic.Conn, error) {
	addrs = mergeAddrs(addrs)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("mesh: dial %s: %w", id.Short(), ErrNoAddress)
	}
	tlsConf, err := identity.ClientConfig(key, id, alpn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		conn *quic.Conn
		addr netip.AddrPort
		err  error
	}
	results := make(chan result, len(addrs))
	for i, a := range addrs {
		go func() {
			if i > 0 {
				t := time.NewTimer(time.Duration(i) * dialStagger)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					results <- result{addr: a, err: ctx.Err()}
					return
				}
			}
			c, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(a), tlsConf, qc)
			results <- result{c, a, err}
		}()
	}
	var won *quic.Conn
	var errs []error
	for range addrs {
		r := <-results
		switch {
		case r.err != nil:
			if won == nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.addr, r.err))
			}
		case won == nil:
			won = r.conn
			cancel() // the others can stop
		default:
			r.conn.CloseWithError(CodeDuplicate, "another address answered first")
		}
	}
	if won == nil {
		return nil, fmt.Errorf("mesh: dial %s: %w", id.Short(), errors.Join(errs...))
	}
	return won, nil
}
