package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func hostSelf(port uint32, models ...string) SelfFunc {
	return func() *nodev1.PeerAnnouncement {
		return &nodev1.PeerAnnouncement{
			Role:                    nodev1.NodeRole_HOST,
			HttpPort:                proto.Uint32(port),
			Hostname:                proto.String("box"),
			HostedModels:            models,
			HostedModelsKnown:       proto.Bool(true),
			InferenceAdmissionState: nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING.Enum(),
		}
	}
}

// TestConverge joins five nodes in a chain, each dialling only the one
// before it, and expects every node to end up admitted by every other: the
// ends meet only through gossip.
func TestConverge(t *testing.T) {
	checkLeaks(t)
	const size = 5
	var nodes []*testNode
	for i := range size {
		cfg := fastConfig()
		cfg.Self = hostSelf(uint32(8000+i), "model-"+string(rune('a'+i)))
		if i > 0 {
			cfg.Bootstrap = []EndpointAddr{nodes[i-1].EndpointAddr()}
		}
		nodes = append(nodes, start(t, cfg))
	}
	want := make([]identity.EndpointID, size)
	for i, n := range nodes {
		want[i] = n.ID()
	}
	waitFor(t, 10*time.Second, "every node to admit every other", func() bool {
		for _, n := range nodes {
			got := append(peerIDs(n.Node), n.ID())
			if !sameSet(got, want) {
				return false
			}
		}
		return true
	})
	first, last := nodes[0], nodes[size-1]
	p, ok := first.Peer(last.ID())
	if !ok {
		t.Fatal("first node does not know the last")
	}
	if got := p.Models(); !slices.Equal(got, []string{"model-e"}) {
		t.Errorf("last node's models as the first sees them: %v", got)
	}
	if p.Announcement.GetVersion() != "test" || p.Announcement.GetMeshId() != "test-mesh" {
		t.Errorf("announcement version %q mesh_id %q", p.Announcement.GetVersion(), p.Announcement.GetMeshId())
	}
	waitFor(t, 5*time.Second, "RTTs measured", func() bool {
		for _, n := range nodes {
			for _, p := range n.Peers() {
				if p.RTT <= 0 || p.LatencySource != nodev1.LatencySource_LATENCY_SOURCE_DIRECT {
					return false
				}
			}
		}
		return true
	})
	if hosts := first.PeersHosting("model-c"); len(hosts) != 1 || hosts[0].ID != nodes[2].ID() {
		t.Errorf("PeersHosting(model-c) = %v, want node 2", hosts)
	}
}

func sameSet(a, b []identity.EndpointID) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestBootstrapAddressKept: gossip naming other addresses for a bootstrap
// peer does not make the node forget the configured one. A peer lies about
// where B is while B is down; once B is up, the node still joins it.
func TestBootstrapAddressKept(t *testing.T) {
	checkLeaks(t)
	keyB := newKey(t)
	bootB := EndpointAddr{ID: keyB.ID(), Addrs: []netip.AddrPort{freeUDPAddr(t)}}
	cfg := fastConfig()
	cfg.Bootstrap = []EndpointAddr{bootB}
	a := start(t, cfg)

	liar := dialRaw(t, a.EndpointAddr(), identity.ALPNMesh)
	lie, err := json.Marshal(EndpointAddr{ID: bootB.ID, Addrs: []netip.AddrPort{freeUDPAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := liar.gossip(liar.frame(&nodev1.PeerAnnouncement{EndpointId: bootB.ID[:], SerializedAddr: lie})); err != nil {
		t.Fatal(err)
	}
	// The dial A began before the lie must have failed: B comes up only
	// when every later dial goes by what A now holds.
	waitFor(t, 10*time.Second, "A's first dial of B failed", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		h := a.heard[bootB.ID]
		return h != nil && h.failures > 0 && !h.dialing
	})
	cfgB := fastConfig()
	cfgB.ListenAddr = bootB.Addrs[0].String()
	startKey(t, cfgB, keyB)
	waitFor(t, 10*time.Second, "A joined its bootstrap peer", func() bool { return hasPeer(a.Node, bootB.ID) })
}

func TestDialWrongIdentity(t *testing.T) {
	checkLeaks(t)
	a := start(t, fastConfig())
	b := start(t, fastConfig())
	wrong := b.EndpointAddr()
	wrong.ID = newKey(t).ID()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := a.Dial(ctx, wrong)
	var mismatch *identity.PeerMismatchError
	if !errors.As(err, &mismatch) || mismatch.Got != b.ID() {
		t.Fatalf("dialling B's address as another id: %v, want a PeerMismatchError naming B", err)
	}
	if len(a.Peers()) != 0 || len(b.Peers()) != 0 {
		t.Fatalf("peers after a failed dial: %v / %v", a.Peers(), b.Peers())
	}
	if _, err := a.Dial(ctx, a.EndpointAddr()); !errors.Is(err, ErrSelf) {
		t.Fatalf("dialling itself: %v, want ErrSelf", err)
	}
	p, err := a.Dial(ctx, b.EndpointAddr())
	if err != nil || p.ID != b.ID() {
		t.Fatalf("dialling B: %v, %v", p.ID.Short(), err)
	}
}

// TestAllowAddr: a node talks to allowed addresses only (LAN-only mode):
// it dials no other, whether asked directly or told by gossip, and refuses
// connections from others; the rest of the mesh is unaffected.
func TestAllowAddr(t *testing.T) {
	checkLeaks(t)
	var denied atomic.Uint32 // a port the node must not talk to
	cfg := fastConfig()
	cfg.AllowAddr = func(ap netip.AddrPort) bool { return uint32(ap.Port()) != denied.Load() }
	a := start(t, cfg)
	b, c := start(t, fastConfig()), start(t, fastConfig())
	denied.Store(uint32(b.LocalAddr().Port()))

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := a.Dial(ctx, b.EndpointAddr()); !errors.Is(err, ErrNoAddress) {
		t.Fatalf("dialling a denied address: %v, want ErrNoAddress", err)
	}
	if _, err := c.Dial(ctx, b.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Dial(ctx, c.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	// Each hears of the other through C: A's dial stops at the filter, B's
	// at A's refusal.
	failed := func(n *Node, id identity.EndpointID) func() bool {
		return func() bool {
			n.mu.Lock()
			defer n.mu.Unlock()
			h := n.heard[id]
			return h != nil && h.failures > 0
		}
	}
	waitFor(t, 10*time.Second, "A's dial of B, heard through C, failed", failed(a.Node, b.ID()))
	waitFor(t, 10*time.Second, "B's dial of A, heard through C, failed", failed(b.Node, a.ID()))
	if hasPeer(a.Node, b.ID()) || hasPeer(b.Node, a.ID()) {
		t.Fatal("A and B joined through a denied address")
	}
	if !hasPeer(c.Node, a.ID()) || !hasPeer(c.Node, b.ID()) {
		t.Fatalf("C's peers: %v", peerIDs(c.Node))
	}
}
