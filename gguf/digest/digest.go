// Package digest computes a model's weights_digest (mesh/1 §3.6): BLAKE3
// over the canonical encoding of the list of files the forward pass reads,
// each named by its path relative to the model directory and the BLAKE3 of
// all its bytes. Every byte is hashed once, streaming, when a model loads.
//
// The canonical encoding (our assumption until upstream publishes vectors):
// a det-CBOR array (RFC 8949 §4.2.1 core deterministic encoding) of
// two-element arrays [path, sum], path a text string with "/" separators,
// sum the 32-byte BLAKE3-256 as a byte string, sorted by path bytewise. An
// array of pairs rather than a map because the spec orders the list "in path
// order", which bytewise sorting of the paths states directly; a CBOR map
// would order by encoded key (length first under older canonical rules).
// For one GGUF file model.gguf the encoding is
//
//	0x81 0x82 0x6a "model.gguf" 0x58 0x20 <32 bytes>
package digest

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/zeebo/blake3"
)

// Sum is a BLAKE3-256 digest.
type Sum [32]byte

// String is the lowercase hex form used in receipts.
func (s Sum) String() string { return hex.EncodeToString(s[:]) }

// Entry is one file of a model: its path relative to the model directory
// ("/"-separated) and the BLAKE3 of its bytes.
type Entry struct {
	Path string
	Sum  Sum
	Size int64 // bytes hashed (informational; not part of the encoding)
}

var encMode = func() cbor.EncMode {
	m, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err) // static options
	}
	return m
}()

// Encode returns the canonical encoding of entries (sorted by path; the
// argument is not modified). Paths must be relative, clean, "/"-separated
// and distinct.
func Encode(entries []Entry) ([]byte, error) {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	pairs := make([][2]any, len(sorted))
	for i, e := range sorted {
		if err := checkPath(e.Path); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Path == e.Path {
			return nil, fmt.Errorf("digest: %q listed twice", e.Path)
		}
		pairs[i] = [2]any{e.Path, e.Sum[:]}
	}
	return encMode.Marshal(pairs)
}

// Root is BLAKE3-256 of Encode(entries): the weights_digest.
func Root(entries []Entry) (Sum, error) {
	b, err := Encode(entries)
	if err != nil {
		return Sum{}, err
	}
	return blake3.Sum256(b), nil
}

func checkPath(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "\\") {
		return fmt.Errorf("digest: path %q is not a clean relative /-separated path", p)
	}
	return nil
}

// bufSize is the read size when hashing a file: large enough that BLAKE3's
// SIMD paths see many 1 KiB chunks per call.
const bufSize = 1 << 20

// HashReader streams r through BLAKE3.
func HashReader(r io.Reader) (Sum, int64, error) {
	h := blake3.New()
	// Hiding r's WriterTo (an *os.File has one) keeps the copy on our
	// large buffer rather than a 32 KiB one.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, make([]byte, bufSize))
	if err != nil {
		return Sum{}, n, err
	}
	var s Sum
	h.Sum(s[:0])
	return s, n, nil
}

// HashBytes hashes b, e.g. a model file's memory mapping, without copying.
func HashBytes(b []byte) Sum { return blake3.Sum256(b) }

// Result is a computed weights digest and what it took.
type Result struct {
	Digest  Sum
	Entries []Entry       // sorted by path
	Bytes   int64         // total bytes hashed
	Elapsed time.Duration // wall time of the hashing
}

// MBps is the hashing rate in 10^6 bytes per second.
func (r Result) MBps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Elapsed.Seconds() / 1e6
}

// Files hashes the named files (paths relative to dir, "/"-separated) and
// returns the weights digest over them. For a single-file GGUF model:
// Files(dir, "model.gguf").
func Files(dir string, rel ...string) (Result, error) {
	if len(rel) == 0 {
		return Result{}, fmt.Errorf("digest: no files")
	}
	start := time.Now()
	var res Result
	for _, p := range rel {
		if err := checkPath(p); err != nil {
			return Result{}, err
		}
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return Result{}, fmt.Errorf("digest: %w", err)
		}
		sum, n, err := HashReader(f)
		f.Close()
		if err != nil {
			return Result{}, fmt.Errorf("digest: read %s: %w", p, err)
		}
		res.Entries = append(res.Entries, Entry{Path: p, Sum: sum, Size: n})
		res.Bytes += n
	}
	var err error
	if res.Digest, err = Root(res.Entries); err != nil {
		return Result{}, err
	}
	slices.SortFunc(res.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	res.Elapsed = time.Since(start)
	return res, nil
}
