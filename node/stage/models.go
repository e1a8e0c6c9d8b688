package stage

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/digest"
)

// Files is a Models over GGUF files on this node: each is known by the
// weights digest the GGUF engine computes for it (digest.Files over the
// one file), hashed at the first Open that needs it, and opened (mapped)
// once and kept open until Close. A file replaced after it was hashed is
// not noticed: it keeps its first digest.
type Files struct {
	// Paths are the GGUF files a stage may be loaded from.
	Paths []string

	mu     sync.Mutex
	hashed map[string][32]byte // path → digest
	open   map[[32]byte]*gguf.File
}

// Open returns the file whose weights digest is d, or ErrNoModel.
func (fs *Files) Open(d [32]byte) (*gguf.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.open[d]; f != nil {
		return f, nil
	}
	if fs.hashed == nil {
		fs.hashed, fs.open = map[string][32]byte{}, map[[32]byte]*gguf.File{}
	}
	for _, p := range fs.Paths {
		sum, ok := fs.hashed[p]
		if !ok {
			// Hashing reads the whole file: done once per path, and only
			// until the digest asked for is found.
			res, err := digest.Files(filepath.Dir(p), filepath.Base(p))
			if err != nil {
				return nil, fmt.Errorf("stage: %w", err)
			}
			sum = res.Digest
			fs.hashed[p] = sum
		}
		if sum != d {
			continue
		}
		f, err := gguf.Open(p)
		if err != nil {
			return nil, fmt.Errorf("stage: %w", err)
		}
		fs.open[d] = f
		return f, nil
	}
	return nil, fmt.Errorf("%w: %x", ErrNoModel, d)
}

// Close closes the files Open opened.
func (fs *Files) Close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for d, f := range fs.open {
		f.Close()
		delete(fs.open, d)
	}
	return nil
}
