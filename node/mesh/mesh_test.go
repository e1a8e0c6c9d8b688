package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
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
