package control

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// nopApplier accepts and activates anything live.
type nopApplier struct{}

func (nopApplier) Validate(*nodev1.NodeConfigSnapshot) []*nodev1.ConfigDiagnostic { return nil }

func (nopApplier) Activate(context.Context, *nodev1.NodeConfigSnapshot) (nodev1.ConfigApplyMode, []*nodev1.ConfigDiagnostic) {
	return nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_LIVE, nil
}

// TestFileStoreRefusesDamage: a torn or altered file is an error that
// says so, never a half-read config.
func TestFileStoreRefusesDamage(t *testing.T) {
	good, err := encodeStoreFile(3, &nodev1.NodeConfigSnapshot{Version: 7, ConfigToml: proto.String("x = 1")})
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	for name, b := range map[string][]byte{
		"empty":        nil,
		"truncated":    good[:len(good)-1],
		"bad magic":    flip(0),
		"bad format":   flip(8),
		"bad revision": flip(12),
		"bad length":   flip(20),
		"bad body":     flip(storeHeaderLen + 1),
		"bad checksum": flip(len(good) - 1),
		"extended":     append(bytes.Clone(good), 0),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "owner-config")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenFileStore(path, nil, nopApplier{}); !errors.Is(err, ErrStoreFile) {
				t.Fatalf("OpenFileStore = %v, want ErrStoreFile", err)
			}
		})
	}
	rev, cfg, err := decodeStoreFile(good)
	if err != nil || rev != 3 || cfg.GetVersion() != 7 {
		t.Fatalf("good file: %d %v %v", rev, cfg, err)
	}
}

func FuzzDecodeStoreFile(f *testing.F) {
	good, _ := encodeStoreFile(3, &nodev1.NodeConfigSnapshot{Version: 7, Models: []*nodev1.NodeModelEntry{{Model: "m"}}})
	f.Add(good)
	f.Add([]byte("MNOWNCFG"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rev, cfg, err := decodeStoreFile(b)
		if err != nil {
			if !errors.Is(err, ErrStoreFile) {
				t.Fatalf("error %v is not ErrStoreFile", err)
			}
			return
		}
		// What decodes re-encodes to a file that decodes the same.
		again, err := encodeStoreFile(rev, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rev2, cfg2, err := decodeStoreFile(again)
		if err != nil || rev2 != rev || !proto.Equal(cfg, cfg2) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func TestConfigHash(t *testing.T) {
	a := &nodev1.NodeConfigSnapshot{Version: 1, Models: []*nodev1.NodeModelEntry{{Model: "m"}}}
	b := proto.CloneOf(a)
	ha, _ := ConfigHash(a)
	hb, _ := ConfigHash(b)
	if ha != hb {
		t.Fatal("equal configs hash differently")
	}
	b.Models[0].Model = "n"
	if hb, _ = ConfigHash(b); ha == hb {
		t.Fatal("different configs hash the same")
	}
	// The empty config's hash is SHA-256 of no bytes.
	if h, _ := ConfigHash(&nodev1.NodeConfigSnapshot{}); h != [32]byte{0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55} {
		t.Fatalf("empty config hash %x", h)
	}
}
