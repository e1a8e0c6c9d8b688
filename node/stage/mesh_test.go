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
func meshNode(t testing.TB, boot ...mesh.EndpointAddr) *mesh.Node {
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
		{Peer: head.ID(), Range: model.LayerRange{Lo: 0, Hi: 1}}, {Peer: b.ID(), Range: model.LayerRange{Lo: 1, Hi: 3}}, {Peer: c.ID(), Range: model.LayerRange{Lo: 3, Hi: 4}},
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

// BenchmarkPipelineDecode: greedy decode steps of one request through the
// built-in model whole, and in 2 and 3 stages on as many mesh nodes on
// loopback QUIC (tok/s). The model is tiny, so the split runs measure
// the per-boundary cost, t ≈ C + (S−1)(2·RTT + P), with a loopback RTT.
// The request is trimmed back to its prompt before it fills its context.
func BenchmarkPipelineDecode(b *testing.B) {
	prompt := []uint32{1, 319, 767, 17042, 2039, 964, 263, 2594}
	const ctxLen = 256
	b.Run("stages=1", func(b *testing.B) {
		f := fortunes(b)
		be := cpu.New(cpu.Options{Threads: 2})
		defer be.Close()
		m, err := model.Load(f, be)
		if err != nil {
			b.Fatal(err)
		}
		s, err := m.NewSession(model.SessionOptions{Context: ctxLen})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		_, tok, err := s.PrefillArgMax(ctx, prompt)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if s.Len() >= ctxLen-1 {
				s.Truncate(len(prompt))
			}
			if tok, err = s.EvalArgMax(ctx, []uint32{tok}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	for _, ranges := range [][]model.LayerRange{{{Lo: 0, Hi: 2}, {Lo: 2, Hi: 4}}, {{Lo: 0, Hi: 1}, {Lo: 1, Hi: 3}, {Lo: 3, Hi: 4}}} {
		b.Run("stages="+string(rune('0'+len(ranges))), func(b *testing.B) {
			f := fortunes(b)
			be := cpu.New(cpu.Options{Threads: 2})
			defer be.Close()
			nodes := []*mesh.Node{meshNode(b)}
			for range ranges[1:] {
				n := meshNode(b, nodes[0].EndpointAddr())
				srv := &Server{Models: models{fortunesDigest: f}, Backend: be, Dial: MeshDialer{n}}
				if err := Register(n, srv); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(srv.Stop)
				if err := n.UpdateSelf(); err != nil {
					b.Fatal(err)
				}
				nodes = append(nodes, n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !meshed(nodes) {
				if time.Now().After(deadline) {
					b.Fatal("nodes did not mesh")
				}
				time.Sleep(20 * time.Millisecond)
			}
			var places []Placement
			for i, r := range ranges {
				places = append(places, Placement{Peer: nodes[i].ID(), Range: r})
			}
			ctx := context.Background()
			p, err := Start(ctx, PipelineConfig{File: f, Digest: fortunesDigest, Self: nodes[0].ID(), Stages: places,
				Context: ctxLen, Batch: 32, Seqs: 1, Backend: be, Dial: MeshDialer{nodes[0]}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			res, err := p.Step(ctx, []Seq{{1, prompt, stagewire.OutToken, 0}})
			if err != nil {
				b.Fatal(err)
			}
			tok, held := res[0].Token, len(prompt)
			b.ResetTimer()
			for range b.N {
				if held >= ctxLen-1 {
					if err := p.Trim(ctx, 1, len(prompt)); err != nil {
						b.Fatal(err)
					}
					held = len(prompt)
				}
				if res, err = p.Step(ctx, []Seq{{1, []uint32{tok}, stagewire.OutToken, 0}}); err != nil {
					b.Fatal(err)
				}
				tok, held = res[0].Token, held+1
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
