package control

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// FuzzFacadeBody: no JSON body makes the owner-control facade's decoding
// of a command (serveHTTP: jsonStrict into the command's request
// message) panic, and what it decodes writes and reads back equal.
// Seeded from protojson's writing of each command's request as meshcli
// sends them (the facade's bodies in rest_test.go).
func FuzzFacadeBody(f *testing.F) {
	model := &nodev1.OwnerControlModelRef{CanonicalModelRef: "alpha"}
	for _, req := range []*nodev1.OwnerControlRequest{
		{GetConfig: &nodev1.OwnerControlGetConfigRequest{}},
		{ApplyConfig: &nodev1.OwnerControlApplyConfigRequest{ExpectedRevision: 5, Config: &nodev1.NodeConfigSnapshot{ConfigToml: proto.String("models = [\"alpha.gguf\"]\n")}}},
		{LoadModel: &nodev1.OwnerControlLoadModelRequest{Model: model}},
		{UnloadModel: &nodev1.OwnerControlUnloadModelRequest{Model: model}},
		{DrainModel: &nodev1.OwnerControlDrainModelRequest{Model: model, DrainTimeoutSecs: proto.Uint64(4)}},
		{RefreshInventory: &nodev1.OwnerControlRefreshInventoryRequest{}},
	} {
		cmd := wire.RequestCommand(req)
		body, err := protojson.Marshal(commandField(req.ProtoReflect(), cmd).Message().Interface())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(cmd), body)
	}
	f.Fuzz(func(t *testing.T, c uint8, body []byte) {
		cmd := wire.OwnerCommand(c%uint8(wire.CommandDrainModel-wire.CommandGetConfig+1)) + wire.CommandGetConfig
		req := &nodev1.OwnerControlRequest{}
		inner := commandField(req.ProtoReflect(), cmd).Mutable().Message().Interface()
		if err := jsonStrict.Unmarshal(body, inner); err != nil {
			return
		}
		again := proto.Clone(inner)
		proto.Reset(again)
		out, err := protojson.Marshal(inner)
		if err != nil {
			t.Fatalf("%v: decoded, but does not write: %v", cmd, err)
		}
		if err := jsonStrict.Unmarshal(out, again); err != nil || !proto.Equal(inner, again) {
			t.Fatalf("%v: %s reads back as %v, %v", cmd, out, again, err)
		}
	})
}
