package wire

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// meshGossip is a gossip frame from a 64-node mesh, every peer hosting a
// model with metadata.
func meshGossip() *nodev1.GossipFrame {
	f := sampleGossipFrame()
	for i := range 64 {
		p := proto.Clone(f.Peers[0]).(*nodev1.PeerAnnouncement)
		p.EndpointId = id(byte(i))
		f.Peers = append(f.Peers, p)
	}
	return f
}

// BenchmarkDecodeGossipFrame measures DecodeGossipFrame against bare
// proto.Unmarshal of the same bytes, the reference: the ratio is what the
// decode budget and validation cost.
func BenchmarkDecodeGossipFrame(b *testing.B) {
	body := mustMarshal(meshGossip())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeGossipFrame(body); err != nil {
			b.Fatal(err)
		}
	}
	reportRatio(b, "x-unmarshal", func() {
		if err := proto.Unmarshal(body, new(nodev1.GossipFrame)); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkAppendFrame measures AppendFrame against a deterministic
// proto.MarshalOptions.MarshalAppend into the same buffer, the reference.
func BenchmarkAppendFrame(b *testing.B) {
	m := meshGossip()
	buf := make([]byte, 0, 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendFrame(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
	reportRatio(b, "x-marshal", func() {
		if _, err := deterministic.MarshalAppend(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	})
}

// reportRatio runs ref, the reference, as many times as the benchmark ran
// (after its timed loop, so off the clock) and reports the benchmark's time
// as a multiple of the reference's.
func reportRatio(b *testing.B, unit string, ref func()) {
	start := time.Now()
	for range b.N {
		ref()
	}
	b.ReportMetric(float64(b.Elapsed())/float64(time.Since(start)), unit)
}
