package control

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// FuzzDecodeRequest: whatever bytes a client sends decode to a valid
// request or a typed error, and unknownCommand never claims a request
// that names a known command.
func FuzzDecodeRequest(f *testing.F) {
	a, b := seededKey(f, 10).ID(), seededKey(f, 11).ID()
	for _, env := range []*nodev1.OwnerControlEnvelope{
		getConfig(3, a, b),
		wire.RequestEnvelope(&nodev1.OwnerControlRequest{RequestId: 9, DrainModel: &nodev1.OwnerControlDrainModelRequest{
			RequesterNodeId: a[:], TargetNodeId: b[:], Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "m"}, DrainTimeoutSecs: proto.Uint64(4)}}),
		wire.HandshakeEnvelope(&nodev1.SignedNodeOwnership{OwnerId: "x"}),
	} {
		body, _ := proto.Marshal(env)
		f.Add(body)
	}
	inner := protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5), 12, protowire.BytesType), nil)
	f.Add(protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), 3, protowire.BytesType), inner))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := decodeRequest(body)
		if e != nil {
			if e.Code != ErrBadRequest.Code && e.Code != ErrUnknownCommand.Code {
				t.Fatalf("code %s", CodeName(e.Code))
			}
			if e.Code == ErrUnknownCommand.Code && e.RequestID == 0 {
				t.Fatal("UNKNOWN_COMMAND without a request id")
			}
			return
		}
		if wire.RequestCommand(req) == 0 || req.GetRequestId() == 0 {
			t.Fatalf("decoded an invalid request: %v", req)
		}
		if _, ok := commandOf(req).(addressed); !ok {
			t.Fatal("command is not addressed")
		}
		if _, unknown := unknownCommand(body); unknown {
			t.Fatal("a request of a known command was taken for an unknown one")
		}
	})
}

func TestUnknownCommandScan(t *testing.T) {
	known, _ := proto.Marshal(getConfig(3, seededKey(t, 10).ID(), seededKey(t, 11).ID()))
	if _, unknown := unknownCommand(known); unknown {
		t.Fatal("get_config taken for unknown")
	}
	if _, unknown := unknownCommand([]byte{0xff}); unknown {
		t.Fatal("garbage taken for a request")
	}
	if _, e := decodeRequest(known); e != nil {
		t.Fatal(e)
	}
	hs, _ := proto.Marshal(wire.HandshakeEnvelope(&nodev1.SignedNodeOwnership{OwnerId: "x", OwnerSignPublicKey: make([]byte, 32),
		NodeEndpointId: make([]byte, 32), Signature: make([]byte, 64)}))
	if _, e := decodeRequest(hs); !errors.Is(e, ErrBadRequest) {
		t.Fatalf("a handshake where a request belongs: %v", e)
	}
}
