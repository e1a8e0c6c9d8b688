package wire

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// allocatedBy returns the heap bytes f allocates, averaged over runs.
func allocatedBy(runs int, f func()) uint64 {
	f() // warm: lazily built tables are not the call's cost
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// repeatField returns n copies of field num holding value (a length-delimited
// field).
func repeatField(num protowire.Number, value []byte, n int) []byte {
	one := protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), value)
	return bytes.Repeat(one, n)
}

// TestDecodeRefusesAmplification: an 8 MiB gossip body of empty peer
// announcements, two bytes each, would unmarshal into gigabytes. It is
// refused with ErrOversize before any of that is allocated.
func TestDecodeRefusesAmplification(t *testing.T) {
	decodeGossip := func(b []byte) error { _, err := DecodeGossipFrame(b); return err }
	decodeEnvelope := func(b []byte) error { _, err := DecodeOwnerControlEnvelope(b); return err }
	inventory := func(entries []byte) []byte { // envelope.response.refresh_inventory.inventory
		return repeatField(4, repeatField(5, repeatField(2, entries, 1), 1), 1)
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		decode func([]byte) error
	}{
		{"empty peers", repeatField(2, nil, MaxControlFrameBytes/2), decodeGossip},
		{"empty metadata", repeatField(2, repeatField(12, nil, 1<<16), 31), decodeGossip},
		{"empty subprotocols", repeatField(2, repeatField(37, nil, 1<<16), 31), decodeGossip},
		{"hosted model names", repeatField(2, repeatField(23, nil, 1<<20), 2), decodeGossip},
		{"inventory entries", inventory(repeatField(1, nil, 4<<20-16)), decodeEnvelope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.body) > MaxControlFrameBytes {
				t.Fatalf("test body of %d bytes is over the frame limit", len(tc.body))
			}
			var err error
			used := allocatedBy(1, func() { err = tc.decode(tc.body) })
			checkFrameError(t, err, ErrOversize, "")
			if used > 64<<10 {
				t.Fatalf("refusing a %d-byte bomb allocated %d bytes", len(tc.body), used)
			}
		})
	}
}

// TestDecodeAcceptsLargeFrames: real frames near the limit decode.
func TestDecodeAcceptsLargeFrames(t *testing.T) {
	big := sampleGossipFrame()
	big.Peers[1].Version = str(strings.Repeat("v", MaxControlFrameBytes-4096))
	many := sampleGossipFrame()
	for i := range 2000 { // a large mesh, every peer with some models
		p := proto.Clone(many.Peers[0]).(*nodev1.PeerAnnouncement)
		p.EndpointId = id(byte(i))
		many.Peers = append(many.Peers, p)
	}
	for name, f := range map[string]*nodev1.GossipFrame{"one big string": big, "2000 peers": many} {
		b, err := AppendFrame(nil, f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := DecodeGossipFrame(b[4:]); err != nil {
			t.Fatalf("%s (%d bytes): %v", name, len(b), err)
		}
	}
}

// TestDecodedCostIsAnUpperBound measures what proto.Unmarshal really
// allocates for bodies of many shapes and holds the estimate above it.
func TestDecodedCostIsAnUpperBound(t *testing.T) {
	packed := protowire.AppendTag(nil, 6, protowire.BytesType) // ModelMoeInfo.ranking, packed uint32
	packed = protowire.AppendBytes(packed, bytes.Repeat([]byte{1}, 4096))
	var unpacked []byte // the same, one element per field
	for range 2048 {
		unpacked = protowire.AppendVarint(protowire.AppendTag(unpacked, 6, protowire.VarintType), 1)
	}
	var mapEntries []byte // PeerAnnouncement.available_model_sizes, distinct keys
	for i := range 2048 {
		var e []byte
		e = protowire.AppendString(protowire.AppendTag(e, 1, protowire.BytesType), strings.Repeat("k", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
		e = protowire.AppendVarint(protowire.AppendTag(e, 2, protowire.VarintType), uint64(i))
		mapEntries = append(mapEntries, repeatField(21, e, 1)...)
	}
	var optionals []byte // every optional scalar of ServedModelMetadata, repeatedly
	for range 200 {
		for num := protowire.Number(5); num <= 13; num++ {
			optionals = protowire.AppendVarint(protowire.AppendTag(optionals, num, protowire.VarintType), 7)
		}
	}
	unknown := bytes.Repeat(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1<<40), 1000)
	strs := repeatField(23, []byte("m"), 4096) // PeerAnnouncement.hosted_models

	for _, tc := range []struct {
		name string
		msg  proto.Message
		body []byte
	}{
		{"gossip sample", &nodev1.GossipFrame{}, mustMarshal(sampleGossipFrame())},
		{"response sample", &nodev1.OwnerControlEnvelope{}, mustMarshal(sampleResponseEnvelope())},
		{"empty peers", &nodev1.GossipFrame{}, repeatField(2, nil, 4096)},
		{"empty metadata", &nodev1.PeerAnnouncement{}, repeatField(12, nil, 4096)},
		{"empty special tokens", &nodev1.CompactModelMetadata{}, repeatField(12, nil, 4096)},
		{"packed", &nodev1.ModelMoeInfo{}, packed},
		{"unpacked", &nodev1.ModelMoeInfo{}, unpacked},
		{"map entries", &nodev1.PeerAnnouncement{}, mapEntries},
		{"optional scalars", &nodev1.ServedModelMetadata{}, optionals},
		{"unknown fields", &nodev1.PeerDown{}, unknown},
		{"repeated strings", &nodev1.PeerAnnouncement{}, strs},
		{"singular repeated", &nodev1.PeerAnnouncement{}, repeatField(33, nil, 4096)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := tc.msg.ProtoReflect().Descriptor()
			est, err := decodedCost(tc.body, md, MaxDecodedBytes)
			if err != nil {
				t.Fatal(err)
			}
			used := allocatedBy(10, func() {
				m := tc.msg.ProtoReflect().New().Interface()
				if err := proto.Unmarshal(tc.body, m); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%d wire bytes: estimate %d, allocated %d", len(tc.body), est, used)
			if uint64(est) < used {
				t.Fatalf("estimate %d is below the %d bytes allocated", est, used)
			}
		})
	}
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
