// Package modelshare moves model files between mesh peers over
// meshnode-file/1 (node/wire/filewire, docs/file-protocol.md).
//
// Catalog is what a node holds: the GGUF files of its models dir, each
// with its SHA-256 and weights digest, hashed once per file and kept in a
// cache file keyed by size and modification time. Server answers an
// admitted peer's List and Get on a SUBPROTOCOL stream, under the node's
// mesh access policy and its serve_files switch, its bytes paced by a
// Bucket shared by every transfer so that serving files never starves
// serving inference. PeerSource is the fetching end: a modelfetch.Source
// over one holder, which checks what it fetched against the SHA-256 and
// the weights digest the holder advertised.
package modelshare

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/zeebo/blake3"

	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/node/wire/filewire"
)

// Catalog lists and opens the model files of a models dir. It is safe for
// concurrent use; files are hashed one at a time.
type Catalog struct {
	// Dir is the models dir: its *.gguf files, not its subdirs (partial
	// downloads live in one).
	Dir string
	// CacheFile keeps the hashes across restarts (in the state dir); ""
	// keeps them in memory only.
	CacheFile string
	Logger    *slog.Logger

	mu     sync.Mutex
	loaded bool
	cache  map[string]cached
}

// cached is one file's hashes, valid while its size and mtime stay.
type cached struct {
	Size    int64  `json:"size"`
	ModNano int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
	Weights string `json:"weights_digest"`
}

// ErrNotFound is a file the catalog does not hold.
var ErrNotFound = errors.New("no such model file here")

// List returns the files of the models dir with their hashes, sorted by
// name, hashing those it has not seen (or that changed) first.
func (c *Catalog) List(ctx context.Context) ([]filewire.File, error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("models dir: %w", err)
	}
	var out []filewire.File
	for _, e := range entries {
		if e.IsDir() || !strings.EqualFold(filepath.Ext(e.Name()), ".gguf") || e.Name()[0] == '.' || len(e.Name()) > filewire.MaxName {
			continue
		}
		f, file, err := c.open(ctx, e.Name())
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.log().Warn("model file not listed for peers", "file", e.Name(), "err", err)
			continue
		}
		f.Close()
		out = append(out, file)
	}
	slices.SortFunc(out, func(a, b filewire.File) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Open opens the file named name (a plain file name) or, when name is
// empty, the one whose weights digest is weights, and returns it with its
// hashes as they are for the bytes the open file holds now.
func (c *Catalog) Open(ctx context.Context, name string, weights [32]byte) (*os.File, filewire.File, error) {
	if name != "" {
		if !strings.EqualFold(filepath.Ext(name), ".gguf") {
			name += ".gguf"
		}
		return c.open(ctx, name)
	}
	files, err := c.List(ctx)
	if err != nil {
		return nil, filewire.File{}, err
	}
	for _, f := range files {
		if f.Weights == weights {
			return c.open(ctx, f.Name)
		}
	}
	return nil, filewire.File{}, fmt.Errorf("weights digest %x: %w", weights, ErrNotFound)
}

// open opens the regular file name of the dir (never a symlink out of
// it) and finds its hashes, computing them if its size or mtime changed.
func (c *Catalog) open(ctx context.Context, name string) (*os.File, filewire.File, error) {
	if name == "" || name[0] == '.' || strings.ContainsAny(name, `/\`) {
		return nil, filewire.File{}, fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	path := filepath.Join(c.Dir, name)
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		return nil, filewire.File{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, filewire.File{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, filewire.File{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	file, err := c.hashes(ctx, f, name, st)
	if err != nil {
		f.Close()
		return nil, filewire.File{}, err
	}
	return f, file, nil
}

func (c *Catalog) hashes(ctx context.Context, f *os.File, name string, st fs.FileInfo) (filewire.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	file := filewire.File{Name: name, Size: uint64(st.Size())}
	if e, ok := c.cache[name]; ok && e.Size == st.Size() && e.ModNano == st.ModTime().UnixNano() {
		s, err1 := hex.DecodeString(e.SHA256)
		w, err2 := hex.DecodeString(e.Weights)
		if err1 == nil && err2 == nil && len(s) == 32 && len(w) == 32 {
			copy(file.SHA256[:], s)
			copy(file.Weights[:], w)
			return file, nil
		}
	}
	// Hashing reads the whole file once: SHA-256 for the fetcher's check,
	// BLAKE3 for the weights digest, in one pass.
	sh, bh := sha256.New(), blake3.New()
	n, err := io.CopyBuffer(io.MultiWriter(sh, bh), &ctxReader{ctx, io.NewSectionReader(f, 0, st.Size())}, make([]byte, 1<<20))
	if err != nil {
		return filewire.File{}, fmt.Errorf("hashing %s: %w", name, err)
	}
	if n != st.Size() {
		return filewire.File{}, fmt.Errorf("hashing %s: read %d bytes of %d", name, n, st.Size())
	}
	sh.Sum(file.SHA256[:0])
	var b3 digest.Sum
	bh.Sum(b3[:0])
	w, err := digest.Root([]digest.Entry{{Path: name, Sum: b3}})
	if err != nil {
		return filewire.File{}, err
	}
	file.Weights = w
	c.cache[name] = cached{Size: st.Size(), ModNano: st.ModTime().UnixNano(), SHA256: hex.EncodeToString(file.SHA256[:]), Weights: w.String()}
	c.save()
	c.log().Info("model file hashed for peers", "file", name, "bytes", n, "sha256", hex.EncodeToString(file.SHA256[:]), "weights_digest", w.String())
	return file, nil
}

// load reads the cache file once; a missing or unreadable one is empty.
func (c *Catalog) load() {
	if c.loaded {
		return
	}
	c.loaded = true
	c.cache = map[string]cached{}
	if c.CacheFile == "" {
		return
	}
	b, err := os.ReadFile(c.CacheFile)
	if err != nil {
		return
	}
	if err := json.Unmarshal(b, &c.cache); err != nil {
		c.log().Warn("model file hash cache unreadable: hashing again", "file", c.CacheFile, "err", err)
		c.cache = map[string]cached{}
	}
}

// save writes the cache through a temporary file renamed into place.
func (c *Catalog) save() {
	if c.CacheFile == "" {
		return
	}
	b, _ := json.Marshal(c.cache)
	tmp := c.CacheFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err == nil {
		err = os.Rename(tmp, c.CacheFile)
		if err != nil {
			c.log().Warn("model file hash cache not saved", "file", c.CacheFile, "err", err)
		}
	}
}

func (c *Catalog) log() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// ctxReader stops a long read when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r *ctxReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(b)
}
