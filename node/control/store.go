package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control/internal/atomicfile"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Applier is the node's side of a FileStore: it judges a configuration
// and brings it into effect.
type Applier interface {
	// Validate checks cfg before it is stored. Diagnostics of ERROR
	// severity reject it; others are reported with the result.
	Validate(cfg *nodev1.NodeConfigSnapshot) []*nodev1.ConfigDiagnostic
	// Activate brings a configuration that has just been stored into
	// effect, and says how: LIVE when it governs the node now, STAGED
	// when it will from the next start.
	Activate(ctx context.Context, cfg *nodev1.NodeConfigSnapshot) (nodev1.ConfigApplyMode, []*nodev1.ConfigDiagnostic)
}

// FileStore is a ConfigStore kept in one file, replaced atomically on each
// apply, so that a crash leaves either the old revision or the new one.
type FileStore struct {
	path    string
	applier Applier

	mu       sync.Mutex
	revision uint64
	config   *nodev1.NodeConfigSnapshot
	hash     [32]byte
}

// ErrStoreFile is wrapped by every failure to read a store file.
var ErrStoreFile = errors.New("control: bad config store file")

// OpenFileStore opens the store at path. With no file there, the store
// starts at revision 0 holding initial (what the node runs with before the
// owner has applied anything) and writes nothing until the first apply.
func OpenFileStore(path string, initial *nodev1.NodeConfigSnapshot, a Applier) (*FileStore, error) {
	if a == nil {
		return nil, errors.New("control: file store needs an applier")
	}
	s := &FileStore{path: path, applier: a}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if initial == nil {
			initial = &nodev1.NodeConfigSnapshot{}
		}
		s.config = proto.CloneOf(initial)
	case err != nil:
		return nil, fmt.Errorf("control: config store: %w", err)
	default:
		if s.revision, s.config, err = decodeStoreFile(b); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if s.hash, err = ConfigHash(s.config); err != nil {
		return nil, err
	}
	return s, nil
}

// Snapshot implements ConfigStore.
func (s *FileStore) Snapshot() (uint64, *nodev1.NodeConfigSnapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revision, s.config
}

// Apply implements ConfigStore: compare the revision, skip an identical
// config (NOOP), validate, persist as the next revision, then activate.
func (s *FileStore) Apply(ctx context.Context, expected uint64, cfg *nodev1.NodeConfigSnapshot) (ApplyResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if expected != s.revision {
		return ApplyResult{}, RevisionConflict(s.revision)
	}
	hash, err := ConfigHash(cfg)
	if err != nil {
		return ApplyResult{}, err
	}
	if hash == s.hash {
		return ApplyResult{Applied: true, Revision: s.revision, Mode: nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_NOOP}, nil
	}
	diags := s.applier.Validate(cfg)
	for _, d := range diags {
		if d.GetSeverity() == nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_ERROR {
			return ApplyResult{Revision: s.revision, Diagnostics: diags, Error: "the configuration was rejected: " + d.GetMessage()}, nil
		}
	}
	cfg = proto.CloneOf(cfg) // ours now: the caller may reuse its message
	b, err := encodeStoreFile(s.revision+1, cfg)
	if err != nil {
		return ApplyResult{}, err
	}
	if err := writeAtomic(s.path, b); err != nil {
		return ApplyResult{}, err
	}
	s.revision, s.config, s.hash = s.revision+1, cfg, hash
	mode, more := s.applier.Activate(ctx, cfg)
	return ApplyResult{Applied: true, Revision: s.revision, Mode: mode, Diagnostics: append(diags, more...)}, nil
}

// The store file: a magic, the format version, the revision, the config's
// deterministic protobuf bytes, and a SHA-256 over all of that, so that a
// torn or tampered file is refused rather than half-read.
//
//	"MNOWNCFG" | u32 LE format (1) | u64 LE revision | u32 LE length | config | sha256
var storeMagic = []byte("MNOWNCFG")

const (
	storeFormat    = 1
	storeHeaderLen = 8 + 4 + 8 + 4
)

func encodeStoreFile(revision uint64, cfg *nodev1.NodeConfigSnapshot) ([]byte, error) {
	body, err := canonical.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("control: encode config: %w", err)
	}
	if len(body) > wire.MaxControlFrameBytes {
		return nil, fmt.Errorf("control: config of %d bytes exceeds %d", len(body), wire.MaxControlFrameBytes)
	}
	b := make([]byte, 0, storeHeaderLen+len(body)+sha256.Size)
	b = append(b, storeMagic...)
	b = binary.LittleEndian.AppendUint32(b, storeFormat)
	b = binary.LittleEndian.AppendUint64(b, revision)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...), nil
}

func decodeStoreFile(b []byte) (uint64, *nodev1.NodeConfigSnapshot, error) {
	if len(b) < storeHeaderLen+sha256.Size || !bytes.Equal(b[:8], storeMagic) {
		return 0, nil, fmt.Errorf("%w: not a config store file", ErrStoreFile)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != storeFormat {
		return 0, nil, fmt.Errorf("%w: format %d, want %d", ErrStoreFile, v, storeFormat)
	}
	revision := binary.LittleEndian.Uint64(b[12:])
	n := binary.LittleEndian.Uint32(b[20:])
	if n > wire.MaxControlFrameBytes || int(n) != len(b)-storeHeaderLen-sha256.Size {
		return 0, nil, fmt.Errorf("%w: declares %d config bytes, holds %d", ErrStoreFile, n, len(b)-storeHeaderLen-sha256.Size)
	}
	end := storeHeaderLen + int(n)
	if sum := sha256.Sum256(b[:end]); !bytes.Equal(sum[:], b[end:]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch (torn or altered)", ErrStoreFile)
	}
	cfg := new(nodev1.NodeConfigSnapshot)
	if err := proto.Unmarshal(b[storeHeaderLen:end], cfg); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrStoreFile, err)
	}
	return revision, cfg, nil
}

// writeAtomic replaces path with data (0600: a config may name paths and
// commands the owner did not mean to publish).
func writeAtomic(path string, data []byte) error {
	if err := atomicfile.Write(path, data, 0o600, false); err != nil {
		return fmt.Errorf("control: persist config: %w", err)
	}
	return nil
}
