package control_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func TestFileStorePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "owner-config")
	a := &controltest.Applier{}
	initial := &nodev1.NodeConfigSnapshot{Version: 1}
	s, err := control.OpenFileStore(path, initial, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("opening wrote a file before any apply")
	}
	ctx := context.Background()
	cfg := &nodev1.NodeConfigSnapshot{Version: 1, Models: []*nodev1.NodeModelEntry{{Model: "alpha", CtxSize: proto.Uint32(4096)}}}
	res, err := s.Apply(ctx, 0, cfg)
	if err != nil || !res.Applied || res.Revision != 1 || res.Mode != nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_LIVE {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	cfg.Models[0].Model = "mutated by the caller afterwards"
	if _, got := s.Snapshot(); got.GetModels()[0].GetModel() != "alpha" {
		t.Fatal("the store kept the caller's message")
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("store file: %v, mode %v", err, st.Mode())
	}

	again, err := control.OpenFileStore(path, initial, a)
	if err != nil {
		t.Fatal(err)
	}
	rev, got := again.Snapshot()
	if rev != 1 || got.GetModels()[0].GetModel() != "alpha" || got.GetModels()[0].GetCtxSize() != 4096 {
		t.Fatalf("reopened at %d: %v", rev, got)
	}
	_, err = again.Apply(ctx, 0, initial)
	wantCode(t, err, control.ErrRevisionConflict)
	if res, err := again.Apply(ctx, 1, got); err != nil || res.Mode != nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_NOOP || res.Revision != 1 {
		t.Fatalf("no-op apply: %+v, %v", res, err)
	}
	res, err = again.Apply(ctx, 1, &nodev1.NodeConfigSnapshot{ConfigToml: proto.String("reject")})
	if err != nil || res.Applied || res.Revision != 1 || len(res.Diagnostics) != 1 {
		t.Fatalf("rejected apply: %+v, %v", res, err)
	}
	if rev, _ := again.Snapshot(); rev != 1 {
		t.Fatal("a rejected apply moved the revision")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
