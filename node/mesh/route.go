package mesh

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// fetchTimeout bounds FetchRouteTable when ctx sets no deadline.
const fetchTimeout = 10 * time.Second

// FetchRouteTable asks the node at addr for its route table without joining
// the mesh, as a passive client or a standby node does: it connects from a
// socket of its own, sends RouteTableRequest on ROUTE_REQUEST (0x05), reads
// the RouteTable and hangs up. key identifies the caller (and fills
// requester_id); nil uses a throwaway key and leaves requester_id empty.
func FetchRouteTable(ctx context.Context, key *identity.Key, addr EndpointAddr) (*nodev1.RouteTable, error) {
	req := &nodev1.RouteTableRequest{Gen: wire.ProtocolGeneration}
	if key == nil {
		k, err := identity.GenerateKey(nil)
		if err != nil {
			return nil, err
		}
		key = k
	} else {
		id := key.ID()
		req.RequesterId = id[:]
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
	}
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, fmt.Errorf("mesh: route table: %w", err)
	}
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	qc := &quic.Config{MaxIncomingStreams: -1, MaxIncomingUniStreams: -1}
	c, err := DialQUIC(ctx, tr, key, qc, addr.ID, identity.ALPNMesh, addr.Addrs)
	if err != nil {
		return nil, fmt.Errorf("mesh: route table: %w", err)
	}
	defer c.CloseWithError(CodeOK, "done")
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("mesh: route table from %s: %w", addr.ID.Short(), err)
	}
	defer s.CancelRead(StreamCodeDone)
	if err := wire.WriteStreamOpen(ctx, s, wire.StreamRouteRequest, req); err != nil {
		return nil, fmt.Errorf("mesh: route table from %s: %w", addr.ID.Short(), err)
	}
	s.Close()
	body, err := wire.ReadFrame(ctx, s, nil)
	if err != nil {
		return nil, fmt.Errorf("mesh: route table from %s: %w", addr.ID.Short(), err)
	}
	rt, err := wire.DecodeRouteTable(body)
	if err != nil {
		return nil, fmt.Errorf("mesh: route table from %s: %w", addr.ID.Short(), err)
	}
	return rt, nil
}

// routeCacheTTL bounds how long an encoded route table is served. Changes
// the node sees (peers joining, leaving, announcing anew, UpdateSelf)
// invalidate it at once. What Config.Self reports without UpdateSelf is
// read at most every half gossip interval (selfAnnouncement), so it shows
// up to that plus the TTL late.
const routeCacheTTL = time.Second

// routeCache holds the encoded route table served on ROUTE_REQUEST, so that
// a flood of requests, which anyone may send unadmitted, costs a write each
// rather than a table built over every peer.
type routeCache struct {
	mu     sync.Mutex // held while building, so that concurrent requests share one build
	gen    uint64     // Node.routeGen when built
	at     time.Time
	frame  []byte // the length-prefixed RouteTable
	builds int
}

// routeTableFrame returns RouteTable as a frame, from the cache while
// nothing has changed and it is younger than routeCacheTTL. The bytes are
// shared: callers must not modify them.
func (n *Node) routeTableFrame() ([]byte, error) {
	n.mu.Lock()
	gen := n.routeGen
	n.mu.Unlock()
	c := &n.routes
	c.mu.Lock()
	defer c.mu.Unlock()
	now := n.cfg.Now()
	if age := now.Sub(c.at); c.frame != nil && c.gen == gen && age >= 0 && age < routeCacheTTL {
		return c.frame, nil
	}
	// A change from here on moves routeGen past gen, so it is not missed.
	frame, err := wire.AppendFrame(nil, n.RouteTable())
	if err != nil {
		return nil, err
	}
	c.gen, c.at, c.frame = gen, now, frame
	c.builds++
	return frame, nil
}
