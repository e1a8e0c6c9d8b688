package stage

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// meshNode serves a mesh node on loopback until the test ends.
func meshNode(t *testing.T, boot ...mesh.EndpointAddr) *mesh.Node {
	t.Helper()
	key, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := mesh.New(mesh.Config{ListenAddr: "127.0.0.1:0", MeshID: "stage-test", Version: "test",
		GossipInterval: 300 * time.Millisecond, Bootstrap: boot}, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return n
}

// TestPipelineOverQUIC: three mesh nodes on loopback, the built-in model
// in three stages, one per node, over meshnode-stage/1 on real QUIC
// SUBPROTOCOL streams: the same logits, bit for bit, as the single-node
// run, and the stages advertised in gossip.
func TestPipelineOverQUIC(t *testing.T) {
	f := fortunes(t)
	head := meshNode(t)
	b := meshNode(t, head.EndpointAddr())
	c := meshNode(t, head.EndpointAddr())
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, n := range []*mesh.Node{b, c} {
		srv := &Server{Models: models{fortunesDigest: f}, Backend: be, Dial: MeshDialer{n}}
		if err := Register(n, srv); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		if err := n.UpdateSelf(); err != nil {
			t.Fatal(err)
		}
	}
	all := []*mesh.Node{head, b, c}
	deadline := time.Now().Add(10 * time.Second)
	for !meshed(all) {
		if time.Now().After(deadline) {
			t.Fatal("the three nodes did not admit one another, with b and c advertising the stage protocol")
		}
		time.Sleep(20 * time.Millisecond)
	}

	want, err := script(whole(t, f), stagewire.OutLogits)
	if err != nil {
		t.Fatal(err)
	}
	p := startPipeline(t, f, MeshDialer{head}, head.ID(), []Placement{
		{head.ID(), model.LayerRange{Lo: 0, Hi: 1}}, {b.ID(), model.LayerRange{Lo: 1, Hi: 3}}, {c.ID(), model.LayerRange{Lo: 3, Hi: 4}},
	}, stagewire.DTypeF32)
	got, err := script(pipelineStepper(p), stagewire.OutLogits)
	if err != nil {
		t.Fatal(err)
	}
	sameResults(t, got, want)
}

// meshed reports whether every node has admitted every other, and sees
// meshnode-stage/1 advertised by the ones that serve it.
func meshed(nodes []*mesh.Node) bool {
	for _, n := range nodes {
		for _, o := range nodes {
			if n == o {
				continue
			}
			p, ok := n.Peer(o.ID())
			if !ok {
				return false
			}
			if o != nodes[0] && !advertises(p) {
				return false
			}
		}
	}
	return true
}

func advertises(p mesh.Peer) bool {
	for _, sp := range p.Announcement.GetSubprotocols() {
		if stagewire.Matches(sp.GetName(), sp.GetMajor()) {
			return true
		}
	}
	return false
}
