package wire

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// decodeCase edits a valid message and says how its decoder must answer:
// kind nil means the edited message is still valid.
type decodeCase[M proto.Message] struct {
	name  string
	edit  func(M)
	kind  error
	field string
}

func runDecodeCases[M proto.Message](t *testing.T, sample func() M, decode func([]byte) (M, error), cases []decodeCase[M]) {
	t.Helper()
	cases = append(cases,
		decodeCase[M]{name: "valid", edit: func(M) {}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := sample()
			tc.edit(m)
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decode(b)
			checkFrameError(t, err, tc.kind, tc.field)
			if tc.kind == nil && !proto.Equal(got, m) {
				t.Fatalf("decoded %v, want %v", got, m)
			}
		})
	}
	// Independent of the message: bytes that are not protobuf, and unknown
	// fields, which newer peers may send and which must be kept.
	t.Run("malformed", func(t *testing.T) {
		b, _ := proto.Marshal(sample())
		_, err := decode(append(b, 0x08)) // a varint tag with no value
		checkFrameError(t, err, ErrInvalidMessage, "")
	})
	t.Run("unknown field kept", func(t *testing.T) {
		b, _ := proto.Marshal(sample())
		b = protowire.AppendTag(b, 1000, protowire.BytesType)
		b = protowire.AppendString(b, "from the future")
		got, err := decode(b)
		checkFrameError(t, err, nil, "")
		if len(got.ProtoReflect().GetUnknown()) == 0 {
			t.Fatal("unknown field dropped")
		}
	})
}

func TestDecodeGossipFrame(t *testing.T) {
	runDecodeCases(t, sampleGossipFrame, DecodeGossipFrame, []decodeCase[*nodev1.GossipFrame]{
		{"gen 0", func(f *nodev1.GossipFrame) { f.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 2", func(f *nodev1.GossipFrame) { f.Gen = 2 }, ErrBadGeneration, "gen"},
		{"sender_id empty", func(f *nodev1.GossipFrame) { f.SenderId = nil }, ErrInvalidMessage, "sender_id"},
		{"sender_id 31", func(f *nodev1.GossipFrame) { f.SenderId = f.SenderId[:31] }, ErrInvalidMessage, "sender_id"},
		{"sender_id 33", func(f *nodev1.GossipFrame) { f.SenderId = append(f.SenderId, 0) }, ErrInvalidMessage, "sender_id"},
		{"no peers", func(f *nodev1.GossipFrame) { f.Peers = nil }, nil, ""},
		{"endpoint_id short", func(f *nodev1.GossipFrame) { f.Peers[1].EndpointId = id(1)[:16] }, ErrInvalidMessage, "peers[1].endpoint_id"},
		{"endpoint_id empty", func(f *nodev1.GossipFrame) { f.Peers[0].EndpointId = nil }, ErrInvalidMessage, "peers[0].endpoint_id"},
		{"host without http_port", func(f *nodev1.GossipFrame) { f.Peers[0].HttpPort = nil }, ErrInvalidMessage, "peers[0].http_port"},
		{"host with http_port 0", func(f *nodev1.GossipFrame) { f.Peers[0].HttpPort = u32(0) }, nil, ""},
		{"worker without http_port", func(f *nodev1.GossipFrame) { f.Peers[0].Role, f.Peers[0].HttpPort = nodev1.NodeRole_WORKER, nil }, nil, ""},
		{"client without http_port", func(f *nodev1.GossipFrame) { f.Peers[0].Role, f.Peers[0].HttpPort = nodev1.NodeRole_CLIENT, nil }, nil, ""},
		{"subprotocol name empty", func(f *nodev1.GossipFrame) { f.Peers[0].Subprotocols[0].Name = "" }, ErrInvalidMessage, "peers[0].subprotocols[0].name"},
		{"subprotocol name blank", func(f *nodev1.GossipFrame) { f.Peers[0].Subprotocols[0].Name = " \t" }, ErrInvalidMessage, "peers[0].subprotocols[0].name"},
		{"subprotocol major 0", func(f *nodev1.GossipFrame) { f.Peers[0].Subprotocols[0].Major = 0 }, ErrInvalidMessage, "peers[0].subprotocols[0].major"},
		{"model load", func(f *nodev1.GossipFrame) { f.Peers[0].MeshnodeModelLoad = sampleModelLoads() }, nil, ""},
		{"model load name blank", func(f *nodev1.GossipFrame) {
			f.Peers[0].MeshnodeModelLoad = sampleModelLoads()
			f.Peers[0].MeshnodeModelLoad[1].ModelName = " "
		}, ErrInvalidMessage, "peers[0].meshnode_model_load[1].model_name"},
		{"model load fidelity 5", func(f *nodev1.GossipFrame) {
			f.Peers[0].MeshnodeModelLoad = sampleModelLoads()
			f.Peers[0].MeshnodeModelLoad[0].Fidelity = 5
		}, ErrInvalidMessage, "peers[0].meshnode_model_load[0].fidelity"},
		{"model load free over slots", func(f *nodev1.GossipFrame) {
			f.Peers[0].MeshnodeModelLoad = sampleModelLoads()
			f.Peers[0].MeshnodeModelLoad[0].FreeSlots = 5
		}, ErrInvalidMessage, "peers[0].meshnode_model_load[0].free_slots"},
		{"model load twice", func(f *nodev1.GossipFrame) {
			f.Peers[0].MeshnodeModelLoad = sampleModelLoads()
			f.Peers[0].MeshnodeModelLoad[1].ModelName = f.Peers[0].MeshnodeModelLoad[0].ModelName
		}, ErrInvalidMessage, "peers[0].meshnode_model_load[1].model_name"},
	})
}

func TestDecodeRouteTableRequest(t *testing.T) {
	runDecodeCases(t, sampleRouteTableRequest, DecodeRouteTableRequest, []decodeCase[*nodev1.RouteTableRequest]{
		{"gen 0", func(r *nodev1.RouteTableRequest) { r.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen max", func(r *nodev1.RouteTableRequest) { r.Gen = ^uint32(0) }, ErrBadGeneration, "gen"},
		{"passive requester", func(r *nodev1.RouteTableRequest) { r.RequesterId = nil }, nil, ""},
		{"requester_id 1", func(r *nodev1.RouteTableRequest) { r.RequesterId = []byte{1} }, ErrInvalidMessage, "requester_id"},
		{"requester_id 31", func(r *nodev1.RouteTableRequest) { r.RequesterId = r.RequesterId[:31] }, ErrInvalidMessage, "requester_id"},
		{"requester_id 64", func(r *nodev1.RouteTableRequest) { r.RequesterId = append(r.RequesterId, r.RequesterId...) }, ErrInvalidMessage, "requester_id"},
	})
}

func TestDecodeRouteTable(t *testing.T) {
	runDecodeCases(t, sampleRouteTable, DecodeRouteTable, []decodeCase[*nodev1.RouteTable]{
		{"gen 0", func(r *nodev1.RouteTable) { r.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 2", func(r *nodev1.RouteTable) { r.Gen = 2 }, ErrBadGeneration, "gen"},
		{"empty", func(r *nodev1.RouteTable) { r.Entries, r.MeshId = nil, nil }, nil, ""},
		{"endpoint_id short", func(r *nodev1.RouteTable) { r.Entries[1].EndpointId = []byte{1, 2} }, ErrInvalidMessage, "entries[1].endpoint_id"},
		{"endpoint_id empty", func(r *nodev1.RouteTable) { r.Entries[0].EndpointId = nil }, ErrInvalidMessage, "entries[0].endpoint_id"},
	})
}

func TestDecodePeerDown(t *testing.T) {
	runDecodeCases(t, samplePeerDown, DecodePeerDown, []decodeCase[*nodev1.PeerDown]{
		{"gen 0", func(p *nodev1.PeerDown) { p.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 3", func(p *nodev1.PeerDown) { p.Gen = 3 }, ErrBadGeneration, "gen"},
		{"peer_id empty", func(p *nodev1.PeerDown) { p.PeerId = nil }, ErrInvalidMessage, "peer_id"},
		{"peer_id 33", func(p *nodev1.PeerDown) { p.PeerId = append(p.PeerId, 1) }, ErrInvalidMessage, "peer_id"},
	})
}

func TestDecodePeerLeaving(t *testing.T) {
	runDecodeCases(t, samplePeerLeaving, DecodePeerLeaving, []decodeCase[*nodev1.PeerLeaving]{
		{"gen 0", func(p *nodev1.PeerLeaving) { p.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 2", func(p *nodev1.PeerLeaving) { p.Gen = 2 }, ErrBadGeneration, "gen"},
		{"peer_id empty", func(p *nodev1.PeerLeaving) { p.PeerId = nil }, ErrInvalidMessage, "peer_id"},
		{"peer_id 16", func(p *nodev1.PeerLeaving) { p.PeerId = p.PeerId[:16] }, ErrInvalidMessage, "peer_id"},
	})
}

func TestDecodeTunnelMap(t *testing.T) {
	runDecodeCases(t, sampleTunnelMap, DecodeTunnelMap, []decodeCase[*nodev1.TunnelMap]{
		{"owner_peer_id empty", func(m *nodev1.TunnelMap) { m.OwnerPeerId = nil }, ErrInvalidMessage, "owner_peer_id"},
		{"owner_peer_id 31", func(m *nodev1.TunnelMap) { m.OwnerPeerId = m.OwnerPeerId[:31] }, ErrInvalidMessage, "owner_peer_id"},
		{"no entries", func(m *nodev1.TunnelMap) { m.Entries = nil }, nil, ""},
		{"target_peer_id short", func(m *nodev1.TunnelMap) { m.Entries[1].TargetPeerId = []byte{9} }, ErrInvalidMessage, "entries[1].target_peer_id"},
		{"tunnel_port 0", func(m *nodev1.TunnelMap) { m.Entries[0].TunnelPort = 0 }, ErrInvalidMessage, "entries[0].tunnel_port"},
		{"tunnel_port 65536", func(m *nodev1.TunnelMap) { m.Entries[1].TunnelPort = 65536 }, ErrInvalidMessage, "entries[1].tunnel_port"},
		{"tunnel_port max uint32", func(m *nodev1.TunnelMap) { m.Entries[1].TunnelPort = ^uint32(0) }, ErrInvalidMessage, "entries[1].tunnel_port"},
		{"no relay", func(m *nodev1.TunnelMap) { m.Entries[1].RelayPeerId = nil }, nil, ""},
	})
}

func TestDecodeMeshSubprotocolOpen(t *testing.T) {
	runDecodeCases(t, sampleMeshSubprotocolOpen, DecodeMeshSubprotocolOpen, []decodeCase[*nodev1.MeshSubprotocolOpen]{
		{"gen 0", func(o *nodev1.MeshSubprotocolOpen) { o.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 2", func(o *nodev1.MeshSubprotocolOpen) { o.Gen = 2 }, ErrBadGeneration, "gen"},
		{"name empty", func(o *nodev1.MeshSubprotocolOpen) { o.Name = "" }, ErrInvalidMessage, "name"},
		{"name blank", func(o *nodev1.MeshSubprotocolOpen) { o.Name = "  " }, ErrInvalidMessage, "name"},
		{"major 0", func(o *nodev1.MeshSubprotocolOpen) { o.Major = 0 }, ErrInvalidMessage, "major"},
		{"major 1", func(o *nodev1.MeshSubprotocolOpen) { o.Major = 1 }, nil, ""},
	})
}

func TestDecodeDirectPathRequest(t *testing.T) {
	runDecodeCases(t, sampleDirectPathRequest, DecodeDirectPathRequest, []decodeCase[*nodev1.DirectPathRequest]{
		{"gen 0", func(r *nodev1.DirectPathRequest) { r.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 2", func(r *nodev1.DirectPathRequest) { r.Gen = 2 }, ErrBadGeneration, "gen"},
		{"requester_id empty", func(r *nodev1.DirectPathRequest) { r.RequesterId = nil }, ErrInvalidMessage, "requester_id"},
		{"requester_id 33", func(r *nodev1.DirectPathRequest) { r.RequesterId = append(r.RequesterId, 0) }, ErrInvalidMessage, "requester_id"},
		{"serialized_addr empty", func(r *nodev1.DirectPathRequest) { r.SerializedAddr = nil }, ErrInvalidMessage, "serialized_addr"},
	})
}

func TestValidateMeshSubprotocol(t *testing.T) {
	for _, tc := range []struct {
		sp    *nodev1.MeshSubprotocol
		field string
	}{
		{&nodev1.MeshSubprotocol{Name: "skippy-stage", Major: 2}, ""},
		{&nodev1.MeshSubprotocol{Name: "", Major: 2}, "name"},
		{&nodev1.MeshSubprotocol{Name: "x", Major: 0}, "major"},
	} {
		err := ValidateMeshSubprotocol(tc.sp)
		if tc.field == "" {
			checkFrameError(t, err, nil, "")
		} else {
			checkFrameError(t, err, ErrInvalidMessage, tc.field)
		}
	}
}

// TestDecodeRejectsBadUTF8 covers what proto3 itself forbids: a string
// field that is not UTF-8.
func TestDecodeRejectsBadUTF8(t *testing.T) {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{0xff, 0xfe})
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 2)
	_, err := DecodeMeshSubprotocolOpen(b)
	checkFrameError(t, err, ErrInvalidMessage, "")
}

func TestCheckSender(t *testing.T) {
	conn := id(0xa1)
	for _, tc := range []struct {
		name string
		m    proto.Message
		kind error
	}{
		{"gossip ok", &nodev1.GossipFrame{SenderId: id(0xa1)}, nil},
		{"gossip forged", &nodev1.GossipFrame{SenderId: id(0xb2)}, ErrForgedSender},
		{"gossip empty", &nodev1.GossipFrame{}, ErrForgedSender},
		{"tunnel map ok", &nodev1.TunnelMap{OwnerPeerId: id(0xa1)}, nil},
		{"tunnel map forged", &nodev1.TunnelMap{OwnerPeerId: id(0xb2)}, ErrForgedSender},
		{"peer leaving ok", &nodev1.PeerLeaving{PeerId: id(0xa1)}, nil},
		{"peer leaving forged", &nodev1.PeerLeaving{PeerId: id(0xb2)}, ErrForgedSender},
		{"direct path ok", &nodev1.DirectPathRequest{RequesterId: id(0xa1)}, nil},
		{"direct path forged", &nodev1.DirectPathRequest{RequesterId: id(0xb2)}, ErrForgedSender},
		{"not sender-bound", &nodev1.PeerDown{PeerId: id(0xa1)}, ErrInvalidMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkFrameError(t, CheckSender(tc.m, conn), tc.kind, "*")
		})
	}
	// A connection identity of the wrong length never matches, not even an
	// equally wrong claim.
	checkFrameError(t, CheckSender(&nodev1.GossipFrame{SenderId: []byte{1}}, []byte{1}), ErrForgedSender, "sender_id")
	checkFrameError(t, CheckSender(&nodev1.GossipFrame{}, nil), ErrForgedSender, "sender_id")
}
