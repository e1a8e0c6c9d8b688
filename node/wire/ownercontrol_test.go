package wire

import (
	"math"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

type envCase = decodeCase[*nodev1.OwnerControlEnvelope]

func addressedIDs() (requester, target []byte) { return id(0xb2), id(0xa1) }

func modelRef(canonical, instance string) *nodev1.OwnerControlModelRef {
	r := &nodev1.OwnerControlModelRef{CanonicalModelRef: canonical}
	if instance != "" {
		r.InstanceId = &instance
	}
	return r
}

func TestOwnerControlEnvelopeFrame(t *testing.T) {
	runDecodeCases(t, sampleRequestEnvelope, DecodeOwnerControlEnvelope, []envCase{
		{"gen 0", func(e *nodev1.OwnerControlEnvelope) { e.Gen = 0 }, ErrBadGeneration, "gen"},
		{"gen 2", func(e *nodev1.OwnerControlEnvelope) { e.Gen = 2 }, ErrBadGeneration, "gen"},
		{"empty", func(e *nodev1.OwnerControlEnvelope) { e.Request = nil }, ErrInvalidMessage, ""},
		{"request and error", func(e *nodev1.OwnerControlEnvelope) {
			e.Error = &nodev1.OwnerControlError{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_BAD_REQUEST}
		}, ErrInvalidMessage, ""},
		{"request and handshake", func(e *nodev1.OwnerControlEnvelope) {
			e.Handshake = &nodev1.OwnerControlHandshake{Ownership: sampleOwnership()}
		}, ErrInvalidMessage, ""},
		{"request and response", func(e *nodev1.OwnerControlEnvelope) { e.Response = sampleResponseEnvelope().Response }, ErrInvalidMessage, ""},
	})
}

func TestOwnerControlHandshake(t *testing.T) {
	sample := func() *nodev1.OwnerControlEnvelope { return HandshakeEnvelope(sampleOwnership()) }
	runDecodeCases(t, sample, DecodeOwnerControlEnvelope, []envCase{
		{"no ownership", func(e *nodev1.OwnerControlEnvelope) { e.Handshake.Ownership = nil }, ErrInvalidMessage, "handshake.ownership"},
		{"owner_id blank", func(e *nodev1.OwnerControlEnvelope) { e.Handshake.Ownership.OwnerId = " " }, ErrInvalidMessage, "handshake.ownership.owner_id"},
		{"owner key 31", func(e *nodev1.OwnerControlEnvelope) {
			e.Handshake.Ownership.OwnerSignPublicKey = e.Handshake.Ownership.OwnerSignPublicKey[:31]
		}, ErrInvalidMessage, "handshake.ownership.owner_sign_public_key"},
		{"node_endpoint_id empty", func(e *nodev1.OwnerControlEnvelope) { e.Handshake.Ownership.NodeEndpointId = nil }, ErrInvalidMessage, "handshake.ownership.node_endpoint_id"},
		{"signature empty", func(e *nodev1.OwnerControlEnvelope) { e.Handshake.Ownership.Signature = nil }, ErrInvalidMessage, "handshake.ownership.signature"},
		{"signature 63", func(e *nodev1.OwnerControlEnvelope) {
			e.Handshake.Ownership.Signature = e.Handshake.Ownership.Signature[:63]
		}, ErrInvalidMessage, "handshake.ownership.signature"},
	})
}

func TestOwnerControlRequest(t *testing.T) {
	rq, tg := addressedIDs()
	set := func(f func(r *nodev1.OwnerControlRequest)) func(*nodev1.OwnerControlEnvelope) {
		return func(e *nodev1.OwnerControlEnvelope) {
			e.Request.GetConfig = nil
			f(e.Request)
		}
	}
	runDecodeCases(t, sampleRequestEnvelope, DecodeOwnerControlEnvelope, []envCase{
		{"request_id 0", func(e *nodev1.OwnerControlEnvelope) { e.Request.RequestId = 0 }, ErrInvalidMessage, "request.request_id"},
		{"request_id max", func(e *nodev1.OwnerControlEnvelope) { e.Request.RequestId = math.MaxUint64 }, nil, ""},
		{"no command", set(func(r *nodev1.OwnerControlRequest) {}), ErrInvalidMessage, "request"},
		{"two commands", func(e *nodev1.OwnerControlEnvelope) {
			e.Request.RefreshInventory = &nodev1.OwnerControlRefreshInventoryRequest{RequesterNodeId: rq, TargetNodeId: tg}
		}, ErrInvalidMessage, "request"},
		{"requester 31", func(e *nodev1.OwnerControlEnvelope) { e.Request.GetConfig.RequesterNodeId = rq[:31] }, ErrInvalidMessage, "request.get_config.requester_node_id"},
		{"target empty", func(e *nodev1.OwnerControlEnvelope) { e.Request.GetConfig.TargetNodeId = nil }, ErrInvalidMessage, "request.get_config.target_node_id"},
		{"watch_config", set(func(r *nodev1.OwnerControlRequest) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigRequest{RequesterNodeId: rq, TargetNodeId: tg, IncludeSnapshot: true}
		}), nil, ""},
		{"watch_config bad target", set(func(r *nodev1.OwnerControlRequest) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigRequest{RequesterNodeId: rq, TargetNodeId: tg[:1]}
		}), ErrInvalidMessage, "request.watch_config.target_node_id"},
		{"apply_config", set(func(r *nodev1.OwnerControlRequest) {
			r.ApplyConfig = &nodev1.OwnerControlApplyConfigRequest{RequesterNodeId: rq, TargetNodeId: tg, Config: &nodev1.NodeConfigSnapshot{}}
		}), nil, ""},
		{"apply_config without config", set(func(r *nodev1.OwnerControlRequest) {
			r.ApplyConfig = &nodev1.OwnerControlApplyConfigRequest{RequesterNodeId: rq, TargetNodeId: tg}
		}), ErrInvalidMessage, "request.apply_config.config"},
		{"refresh_inventory", set(func(r *nodev1.OwnerControlRequest) {
			r.RefreshInventory = &nodev1.OwnerControlRefreshInventoryRequest{RequesterNodeId: rq, TargetNodeId: tg}
		}), nil, ""},
		{"refresh_inventory bad requester", set(func(r *nodev1.OwnerControlRequest) {
			r.RefreshInventory = &nodev1.OwnerControlRefreshInventoryRequest{TargetNodeId: tg}
		}), ErrInvalidMessage, "request.refresh_inventory.requester_node_id"},
		{"load_model", set(func(r *nodev1.OwnerControlRequest) {
			r.LoadModel = &nodev1.OwnerControlLoadModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("hf://a/b@main", "")}
		}), nil, ""},
		{"load_model by instance only", set(func(r *nodev1.OwnerControlRequest) {
			r.LoadModel = &nodev1.OwnerControlLoadModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("", "inst-1")}
		}), ErrInvalidMessage, "request.load_model.model.canonical_model_ref"},
		{"load_model without model", set(func(r *nodev1.OwnerControlRequest) {
			r.LoadModel = &nodev1.OwnerControlLoadModelRequest{RequesterNodeId: rq, TargetNodeId: tg}
		}), ErrInvalidMessage, "request.load_model.model"},
		{"ensure_model", set(func(r *nodev1.OwnerControlRequest) {
			r.EnsureModel = &nodev1.OwnerControlEnsureModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("hf://a/b@main", "")}
		}), nil, ""},
		{"ensure_model blank ref", set(func(r *nodev1.OwnerControlRequest) {
			r.EnsureModel = &nodev1.OwnerControlEnsureModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("  ", "")}
		}), ErrInvalidMessage, "request.ensure_model.model.canonical_model_ref"},
		{"unload_model by instance", set(func(r *nodev1.OwnerControlRequest) {
			r.UnloadModel = &nodev1.OwnerControlUnloadModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("", "inst-1")}
		}), nil, ""},
		{"unload_model naming nothing", set(func(r *nodev1.OwnerControlRequest) {
			r.UnloadModel = &nodev1.OwnerControlUnloadModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("", "")}
		}), ErrInvalidMessage, "request.unload_model.model"},
		{"drain_model by ref", set(func(r *nodev1.OwnerControlRequest) {
			r.DrainModel = &nodev1.OwnerControlDrainModelRequest{RequesterNodeId: rq, TargetNodeId: tg, Model: modelRef("hf://a/b@main", "")}
		}), nil, ""},
		{"drain_model bad target", set(func(r *nodev1.OwnerControlRequest) {
			r.DrainModel = &nodev1.OwnerControlDrainModelRequest{RequesterNodeId: rq, TargetNodeId: tg[:8], Model: modelRef("x", "")}
		}), ErrInvalidMessage, "request.drain_model.target_node_id"},
	})
}

func TestOwnerControlResponse(t *testing.T) {
	set := func(f func(r *nodev1.OwnerControlResponse)) func(*nodev1.OwnerControlEnvelope) {
		return func(e *nodev1.OwnerControlEnvelope) {
			e.Response.RefreshInventory = nil
			f(e.Response)
		}
	}
	inv := func(f func(i *nodev1.OwnerControlRefreshInventory)) func(*nodev1.OwnerControlEnvelope) {
		return func(e *nodev1.OwnerControlEnvelope) { f(e.Response.RefreshInventory.Inventory) }
	}
	entry := func(ref string) *nodev1.OwnerControlInventoryEntry {
		return &nodev1.OwnerControlInventoryEntry{CanonicalModelRef: ref}
	}
	runDecodeCases(t, sampleResponseEnvelope, DecodeOwnerControlEnvelope, []envCase{
		{"request_id 0", func(e *nodev1.OwnerControlEnvelope) { e.Response.RequestId = 0 }, ErrInvalidMessage, "response.request_id"},
		{"no result", set(func(r *nodev1.OwnerControlResponse) {}), ErrInvalidMessage, "response"},
		{"two results", func(e *nodev1.OwnerControlEnvelope) {
			e.Response.GetConfig = &nodev1.OwnerControlGetConfigResponse{Snapshot: sampleConfigSnapshot()}
		}, ErrInvalidMessage, "response"},
		{"get_config", set(func(r *nodev1.OwnerControlResponse) {
			r.GetConfig = &nodev1.OwnerControlGetConfigResponse{Snapshot: sampleConfigSnapshot()}
		}), nil, ""},
		{"get_config without snapshot", set(func(r *nodev1.OwnerControlResponse) {
			r.GetConfig = &nodev1.OwnerControlGetConfigResponse{}
		}), ErrInvalidMessage, "response.get_config.snapshot"},
		{"snapshot node_id short", func(e *nodev1.OwnerControlEnvelope) {
			e.Response.RefreshInventory.Snapshot.NodeId = []byte{1}
		}, ErrInvalidMessage, "response.refresh_inventory.snapshot.node_id"},
		{"snapshot config_hash short", func(e *nodev1.OwnerControlEnvelope) {
			e.Response.RefreshInventory.Snapshot.ConfigHash = make([]byte, 20)
		}, ErrInvalidMessage, "response.refresh_inventory.snapshot.config_hash"},
		{"snapshot without config", func(e *nodev1.OwnerControlEnvelope) {
			e.Response.RefreshInventory.Snapshot.Config = nil
		}, ErrInvalidMessage, "response.refresh_inventory.snapshot.config"},
		{"refresh without snapshot", func(e *nodev1.OwnerControlEnvelope) {
			e.Response.RefreshInventory.Snapshot = nil
		}, ErrInvalidMessage, "response.refresh_inventory.snapshot"},
		{"refresh from an old server", func(e *nodev1.OwnerControlEnvelope) {
			e.Response.RefreshInventory.Inventory = nil
		}, nil, ""},
		{"disposition coalesced", inv(func(i *nodev1.OwnerControlRefreshInventory) {
			i.Disposition = nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_COALESCED
		}), nil, ""},
		{"disposition unspecified", inv(func(i *nodev1.OwnerControlRefreshInventory) { i.Disposition = 0 }),
			ErrInvalidMessage, "response.refresh_inventory.inventory.disposition"},
		{"disposition unknown", inv(func(i *nodev1.OwnerControlRefreshInventory) { i.Disposition = 99 }),
			ErrInvalidMessage, "response.refresh_inventory.inventory.disposition"},
		{"no entries", inv(func(i *nodev1.OwnerControlRefreshInventory) { i.Entries = nil }), nil, ""},
		{"entries unsorted", inv(func(i *nodev1.OwnerControlRefreshInventory) {
			i.Entries = []*nodev1.OwnerControlInventoryEntry{entry("b"), entry("a")}
		}), ErrInvalidMessage, "response.refresh_inventory.inventory.entries[1].canonical_model_ref"},
		{"entries duplicated", inv(func(i *nodev1.OwnerControlRefreshInventory) {
			i.Entries = []*nodev1.OwnerControlInventoryEntry{entry("a"), entry("b"), entry("b ")}
		}), ErrInvalidMessage, "response.refresh_inventory.inventory.entries[2].canonical_model_ref"},
		{"entry blank", inv(func(i *nodev1.OwnerControlRefreshInventory) {
			i.Entries = []*nodev1.OwnerControlInventoryEntry{entry(" ")}
		}), ErrInvalidMessage, "response.refresh_inventory.inventory.entries[0].canonical_model_ref"},
		{"watch accepted", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{Accepted: &nodev1.OwnerControlWatchAccepted{TargetNodeId: id(0xa1)}}
		}), nil, ""},
		{"watch accepted bad target", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{Accepted: &nodev1.OwnerControlWatchAccepted{}}
		}), ErrInvalidMessage, "response.watch_config.accepted.target_node_id"},
		{"watch update", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{Update: &nodev1.OwnerControlConfigUpdate{
				NodeId: id(0xa1), Revision: 8, ConfigHash: id(0xcf), Config: &nodev1.NodeConfigSnapshot{}}}
		}), nil, ""},
		{"watch update bad hash", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{Update: &nodev1.OwnerControlConfigUpdate{
				NodeId: id(0xa1), ConfigHash: []byte{1}, Config: &nodev1.NodeConfigSnapshot{}}}
		}), ErrInvalidMessage, "response.watch_config.update.config_hash"},
		{"watch snapshot", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{Snapshot: sampleConfigSnapshot()}
		}), nil, ""},
		{"watch nothing", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{}
		}), ErrInvalidMessage, "response.watch_config"},
		{"watch two", set(func(r *nodev1.OwnerControlResponse) {
			r.WatchConfig = &nodev1.OwnerControlWatchConfigResponse{Snapshot: sampleConfigSnapshot(),
				Accepted: &nodev1.OwnerControlWatchAccepted{TargetNodeId: id(0xa1)}}
		}), ErrInvalidMessage, "response.watch_config"},
		{"apply success", set(func(r *nodev1.OwnerControlResponse) {
			r.ApplyConfig = &nodev1.OwnerControlApplyConfigResponse{Success: true, ConfigHash: id(0xcf)}
		}), nil, ""},
		{"apply success without hash", set(func(r *nodev1.OwnerControlResponse) {
			r.ApplyConfig = &nodev1.OwnerControlApplyConfigResponse{Success: true}
		}), ErrInvalidMessage, "response.apply_config.config_hash"},
		{"apply failure without hash", set(func(r *nodev1.OwnerControlResponse) {
			r.ApplyConfig = &nodev1.OwnerControlApplyConfigResponse{Error: str("conflict")}
		}), nil, ""},
		{"apply failure with short hash", set(func(r *nodev1.OwnerControlResponse) {
			r.ApplyConfig = &nodev1.OwnerControlApplyConfigResponse{ConfigHash: []byte{1, 2, 3}}
		}), ErrInvalidMessage, "response.apply_config.config_hash"},
		{"load_model", set(func(r *nodev1.OwnerControlResponse) {
			r.LoadModel = &nodev1.OwnerControlLoadModelResponse{IntentId: "i-1", AcceptedState: "queued"}
		}), nil, ""},
		{"drain_model", set(func(r *nodev1.OwnerControlResponse) {
			r.DrainModel = &nodev1.OwnerControlDrainModelResponse{IntentId: "i-2"}
		}), nil, ""},
	})
}

func TestOwnerControlError(t *testing.T) {
	sample := func() *nodev1.OwnerControlEnvelope {
		return ErrorEnvelope(nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_UNKNOWN_COMMAND, "no such command", 5)
	}
	runDecodeCases(t, sample, DecodeOwnerControlEnvelope, []envCase{
		{"no request id", func(e *nodev1.OwnerControlEnvelope) { e.Error.RequestId = nil }, nil, ""},
		{"code unspecified", func(e *nodev1.OwnerControlEnvelope) { e.Error.Code = 0 }, ErrInvalidMessage, "error.code"},
		{"code unknown", func(e *nodev1.OwnerControlEnvelope) { e.Error.Code = 11 }, ErrInvalidMessage, "error.code"},
	})
	if e := ErrorEnvelope(nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_INVALID_HANDSHAKE, "bad", 0); e.Error.RequestId != nil {
		t.Fatal("request id 0 must leave request_id unset")
	}
}

func TestCommands(t *testing.T) {
	req := &nodev1.OwnerControlRequest{DrainModel: &nodev1.OwnerControlDrainModelRequest{}}
	if c := RequestCommand(req); c != CommandDrainModel || c.String() != "drain_model" {
		t.Fatalf("got %v", c)
	}
	req.GetConfig = &nodev1.OwnerControlGetConfigRequest{}
	if c := RequestCommand(req); c != 0 {
		t.Fatalf("two commands: got %v", c)
	}
	if c := RequestCommand(&nodev1.OwnerControlRequest{}); c != 0 {
		t.Fatalf("no command: got %v", c)
	}
	resp := &nodev1.OwnerControlResponse{RefreshInventory: &nodev1.OwnerControlRefreshInventoryResponse{}}
	if c := ResponseCommand(resp); c != CommandRefreshInventory || c.String() != "refresh_inventory" {
		t.Fatalf("got %v", c)
	}
	// Each command's constant is its field tag in both messages.
	reqFields := (&nodev1.OwnerControlRequest{}).ProtoReflect().Descriptor().Fields()
	respFields := (&nodev1.OwnerControlResponse{}).ProtoReflect().Descriptor().Fields()
	for c := CommandGetConfig; c <= CommandDrainModel; c++ {
		if f := reqFields.ByNumber(protoreflect.FieldNumber(c)); f == nil || string(f.Name()) != c.String() {
			t.Errorf("request tag %d is %v, want %s", c, f, c)
		}
		if f := respFields.ByNumber(protoreflect.FieldNumber(c)); f == nil || string(f.Name()) != c.String() {
			t.Errorf("response tag %d is %v, want %s", c, f, c)
		}
	}
	if s := OwnerCommand(1).String(); s != "OwnerCommand(1)" {
		t.Errorf("unknown command prints as %q", s)
	}
}

// responseWithConfig returns a response whose envelope encodes to exactly
// size bytes.
func responseWithConfig(t *testing.T, size int) *nodev1.OwnerControlResponse {
	t.Helper()
	snap := sampleConfigSnapshot()
	resp := &nodev1.OwnerControlResponse{RequestId: 77, GetConfig: &nodev1.OwnerControlGetConfigResponse{Snapshot: snap}}
	toml := ""
	for range 3 { // varint lengths settle within a step or two
		snap.Config.ConfigToml = &toml
		n := proto.Size(&nodev1.OwnerControlEnvelope{Gen: 1, Response: resp})
		toml = strings.Repeat("#", len(toml)+size-n)
	}
	snap.Config.ConfigToml = &toml
	if n := proto.Size(&nodev1.OwnerControlEnvelope{Gen: 1, Response: resp}); n != size {
		t.Fatalf("built a %d-byte response, want %d", n, size)
	}
	return resp
}

func TestResponseEnvelopeReplacesOversize(t *testing.T) {
	env, replaced := ResponseEnvelope(responseWithConfig(t, MaxControlFrameBytes))
	if replaced || env.Response == nil {
		t.Fatal("a response of exactly the limit was replaced")
	}
	if _, err := AppendFrame(nil, env); err != nil {
		t.Fatal(err)
	}

	env, replaced = ResponseEnvelope(responseWithConfig(t, MaxControlFrameBytes+1))
	if !replaced || env.Response != nil {
		t.Fatal("an oversize response was not replaced")
	}
	if env.Error.GetCode() != nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_CONTROL_UNAVAILABLE || env.Error.GetRequestId() != 77 {
		t.Fatalf("replacement is %v", env.Error)
	}
	b, err := AppendFrame(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	body, _, _ := ParseFrame(b)
	if _, err := DecodeOwnerControlEnvelope(body); err != nil {
		t.Fatalf("replacement does not decode: %v", err)
	}
}

func TestRequestIDs(t *testing.T) {
	var ids RequestIDs
	if got := ids.Next(); got != 1 {
		t.Fatalf("first id %d, want 1", got)
	}
	ids.last.Store(math.MaxUint64 - 1)
	if got := ids.Next(); got != math.MaxUint64 {
		t.Fatalf("got %d, want MaxUint64", got)
	}
	if got := ids.Next(); got != 1 {
		t.Fatalf("after wrapping: got %d, want 1 (0 skipped)", got)
	}

	// Concurrent callers across the wrap: no zero, no repeats.
	ids.last.Store(math.MaxUint64 - 500)
	const workers, each = 8, 200
	got := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				got[w] = append(got[w], ids.Next())
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for _, g := range got {
		for _, v := range g {
			if v == 0 || seen[v] {
				t.Fatalf("id %d handed out twice or zero", v)
			}
			seen[v] = true
		}
	}
}
