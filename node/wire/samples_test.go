package wire

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Valid messages of every decoded kind, shared by the tests, the golden
// files and the fuzz seeds. Each call returns a fresh copy to edit.

func id(b byte) []byte { return bytes.Repeat([]byte{b}, EndpointIDLen) }

func u32(v uint32) *uint32 { return &v }
func str(s string) *string { return &s }

func sampleGossipFrame() *nodev1.GossipFrame {
	return &nodev1.GossipFrame{
		Gen:      ProtocolGeneration,
		SenderId: id(0xa1),
		Peers: []*nodev1.PeerAnnouncement{
			{
				EndpointId:          id(0xa1),
				Role:                nodev1.NodeRole_HOST,
				HttpPort:            u32(9337),
				Version:             str("meshnode 0.1.0"),
				VramBytes:           8 << 30,
				AvailableModelSizes: map[string]uint64{"meshnode-fortunes-Q8_0": 12345678, "b-model": 42},
				HostedModels:        []string{"meshnode-fortunes-Q8_0"},
				HostedModelsKnown:   proto.Bool(true),
				Subprotocols:        []*nodev1.MeshSubprotocol{{Name: "skippy-stage", Major: 2, Features: []string{"artifact-transfer"}}},
				AvailableModelMetadata: []*nodev1.CompactModelMetadata{{
					ModelKey: "meshnode-fortunes-Q8_0", Architecture: "llama", ContextLength: 2048,
					RopeFreqBase:  10000,
					SpecialTokens: []*nodev1.SpecialToken{{Name: "bos", TokenId: 1}},
				}},
				Hardware:                &nodev1.HardwareInfo{IsSoc: proto.Bool(true), Gpus: []*nodev1.GpuInfo{{Name: str("Orin")}}},
				InferenceAdmissionState: nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING.Enum(),
			},
			{EndpointId: id(0xb2), Role: nodev1.NodeRole_WORKER, RttMs: u32(3)},
		},
	}
}

// sampleModelLoads are meshnode extension entries (MeshnodeModelLoad), kept
// out of sampleGossipFrame so that its golden bytes stay upstream's.
func sampleModelLoads() []*nodev1.MeshnodeModelLoad {
	return []*nodev1.MeshnodeModelLoad{
		{ModelName: "meshnode-fortunes-Q8_0", UjPerPromptTokenMilli: 1500, UjPerOutputTokenMilli: 4200,
			EnergyGrade: nodev1.MeshnodeEnergyGrade_MESHNODE_ENERGY_GRADE_HW_SHUNT, Receipts: 32,
			OutputTokensPerSecondMilli: 25000, Slots: 4, FreeSlots: 1, Queued: 0, QueueLimit: 512, Fidelity: 2},
		{ModelName: "b-model", EnergyGrade: nodev1.MeshnodeEnergyGrade_MESHNODE_ENERGY_GRADE_ESTIMATOR, Slots: 1},
	}
}

func sampleRouteTableRequest() *nodev1.RouteTableRequest {
	return &nodev1.RouteTableRequest{Gen: ProtocolGeneration, RequesterId: id(0xc3)}
}

func sampleRouteTable() *nodev1.RouteTable {
	return &nodev1.RouteTable{
		Gen:     ProtocolGeneration,
		MeshId:  str("mesh-1"),
		Entries: []*nodev1.RouteEntry{{EndpointId: id(0xa1), Model: "meshnode-fortunes-Q8_0"}, {EndpointId: id(0xb2)}},
	}
}

func samplePeerDown() *nodev1.PeerDown {
	return &nodev1.PeerDown{Gen: ProtocolGeneration, PeerId: id(0xd4)}
}

func samplePeerLeaving() *nodev1.PeerLeaving {
	return &nodev1.PeerLeaving{Gen: ProtocolGeneration, PeerId: id(0x11)}
}

func sampleTunnelMap() *nodev1.TunnelMap {
	return &nodev1.TunnelMap{
		OwnerPeerId: id(0xa1),
		Entries: []*nodev1.TunnelEntry{
			{TargetPeerId: id(0xb2), TunnelPort: 1},
			{TargetPeerId: id(0xd4), RelayPeerId: id(0xb2), TunnelPort: 65535},
		},
	}
}

func sampleMeshSubprotocolOpen() *nodev1.MeshSubprotocolOpen {
	return &nodev1.MeshSubprotocolOpen{Gen: ProtocolGeneration, Name: "skippy-stage", Major: 2}
}

func sampleDirectPathRequest() *nodev1.DirectPathRequest {
	return &nodev1.DirectPathRequest{Gen: ProtocolGeneration, RequesterId: id(0xb2),
		SerializedAddr: []byte(`{"id":"b2","addrs":[{"Ip":"192.0.2.7:9338"}]}`)}
}

func sampleOwnership() *nodev1.SignedNodeOwnership {
	return &nodev1.SignedNodeOwnership{
		Version: 1, CertId: "cert-1", OwnerId: "owner-1",
		OwnerSignPublicKey: id(0x0e), NodeEndpointId: id(0xa1),
		IssuedAtUnixMs: 1, ExpiresAtUnixMs: 2,
		Signature: bytes.Repeat([]byte{0x5e}, 64),
	}
}

func sampleConfigSnapshot() *nodev1.OwnerControlConfigSnapshot {
	return &nodev1.OwnerControlConfigSnapshot{
		NodeId: id(0xa1), Revision: 7, ConfigHash: id(0xcf),
		Config: &nodev1.NodeConfigSnapshot{Version: 1, Models: []*nodev1.NodeModelEntry{{Model: "meshnode-fortunes-Q8_0"}}},
	}
}

func sampleRequestEnvelope() *nodev1.OwnerControlEnvelope {
	return RequestEnvelope(&nodev1.OwnerControlRequest{
		RequestId: 1,
		GetConfig: &nodev1.OwnerControlGetConfigRequest{RequesterNodeId: id(0xb2), TargetNodeId: id(0xa1)},
	})
}

func sampleResponseEnvelope() *nodev1.OwnerControlEnvelope {
	env, _ := ResponseEnvelope(&nodev1.OwnerControlResponse{
		RequestId: 1,
		RefreshInventory: &nodev1.OwnerControlRefreshInventoryResponse{
			Snapshot: sampleConfigSnapshot(),
			Inventory: &nodev1.OwnerControlRefreshInventory{
				Disposition: nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_EXECUTED,
				Entries: []*nodev1.OwnerControlInventoryEntry{
					{CanonicalModelRef: "hf://a/b@main", TotalSizeBytes: 10},
					{CanonicalModelRef: "hf://a/c@main", TotalSizeBytes: 20},
				},
			},
		},
	})
	return env
}

// checkFrameError asserts err is a *FrameError of kind (nil: no error) at
// field, when field is not "*".
func checkFrameError(t *testing.T, err, kind error, field string) {
	t.Helper()
	if kind == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	var fe *FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FrameError", err, err)
	}
	if field != "*" && fe.Field != field {
		t.Fatalf("error %q names field %q, want %q", err, fe.Field, field)
	}
}
