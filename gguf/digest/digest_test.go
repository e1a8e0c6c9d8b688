package digest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeebo/blake3"
)

func TestHashMatchesBLAKE3Vector(t *testing.T) {
	// BLAKE3 of the empty input (the reference test vectors' first entry).
	const want = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
	s, n, err := HashReader(bytes.NewReader(nil))
	if err != nil || n != 0 || s.String() != want {
		t.Fatalf("HashReader(empty) = %s, %d, %v; want %s", s, n, err, want)
	}
	if got := HashBytes(nil).String(); got != want {
		t.Fatalf("HashBytes(empty) = %s", got)
	}
}

func TestEncodeIsCanonical(t *testing.T) {
	var sum Sum
	for i := range sum {
		sum[i] = byte(i)
	}
	got, err := Encode([]Entry{{Path: "model.gguf", Sum: sum}})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{0x81, 0x82, 0x6a}, "model.gguf"...)
	want = append(append(want, 0x58, 0x20), sum[:]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode = %x\nwant     %x", got, want)
	}

	a := Entry{Path: "config.json", Sum: Sum{1}}
	b := Entry{Path: "model-00001-of-00002.safetensors", Sum: Sum{2}}
	c := Entry{Path: "sub/model.safetensors", Sum: Sum{3}}
	r1, err1 := Root([]Entry{c, a, b})
	r2, err2 := Root([]Entry{a, b, c})
	if err1 != nil || err2 != nil || r1 != r2 {
		t.Fatalf("Root depends on argument order: %s %s (%v %v)", r1, r2, err1, err2)
	}
	enc, _ := Encode([]Entry{a, b, c})
	if r1 != Sum(blake3.Sum256(enc)) {
		t.Fatal("Root is not BLAKE3 of Encode")
	}
	if r3, _ := Root([]Entry{a, b, {Path: "sub/model.safetensors", Sum: Sum{4}}}); r3 == r1 {
		t.Fatal("changing one file's sum left the root unchanged")
	}
	if r4, _ := Root([]Entry{a, b, {Path: "sub/other.safetensors", Sum: Sum{3}}}); r4 == r1 {
		t.Fatal("renaming a file left the root unchanged")
	}
}

func TestEncodeRejectsBadLists(t *testing.T) {
	for _, p := range []string{"", "/abs/model.gguf", "../model.gguf", "a/../b", "a//b", "./a", `a\b`, ".."} {
		if _, err := Encode([]Entry{{Path: p}}); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	if _, err := Encode([]Entry{{Path: "a"}, {Path: "a"}}); err == nil {
		t.Error("duplicate path accepted")
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3<<20+17) // several read buffers and a ragged end
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(dir, "model.gguf"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Files(dir, "model.gguf")
	if err != nil {
		t.Fatal(err)
	}
	want := Sum(blake3.Sum256(data))
	if len(res.Entries) != 1 || res.Entries[0].Sum != want || res.Bytes != int64(len(data)) {
		t.Fatalf("Files = %+v, want one entry with sum %s", res, want)
	}
	root, _ := Root([]Entry{{Path: "model.gguf", Sum: want}})
	if res.Digest != root {
		t.Fatalf("digest %s, want %s", res.Digest, root)
	}
	if _, err := Files(dir, "missing.gguf"); err == nil {
		t.Error("missing file accepted")
	}
	if _, err := Files(dir, "../model.gguf"); err == nil {
		t.Error("path outside the model directory accepted")
	}
}

// TestPinnedVector pins one digest so a change to the encoding cannot pass
// unnoticed: a model directory holding model.gguf = "meshnode".
func TestPinnedVector(t *testing.T) {
	sum := HashBytes([]byte("meshnode"))
	root, err := Root([]Entry{{Path: "model.gguf", Sum: sum}})
	if err != nil {
		t.Fatal(err)
	}
	enc := append([]byte{0x81, 0x82, 0x6a}, "model.gguf"...)
	enc = append(append(enc, 0x58, 0x20), sum[:]...)
	if want := blake3.Sum256(enc); hex.EncodeToString(want[:]) != root.String() {
		t.Fatalf("root %s != BLAKE3 of the hand-built encoding", root)
	}
	if want := "d4de23702e9f554239dd851d847661b4ca5dfae9e9deb7168a02851e7d0eb942"; root.String() != want {
		t.Fatalf("weights_digest{model.gguf=\"meshnode\"} = %s, pinned %s", root, want)
	}
}

func BenchmarkHashBytes(b *testing.B) {
	data := make([]byte, 64<<20)
	rand.Read(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		HashBytes(data)
	}
	hashRate := float64(len(data)) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(hashRate/1e6, "MB/s_hash")
	b.ReportMetric(hashRate/copyRate(data), "x_memcpy")
}

// copyRate is the memory-speed yardstick: bytes per second copy() moves,
// measured in the same run (best of three).
func copyRate(data []byte) float64 {
	dst := make([]byte, len(data))
	best := 0.0
	for range 3 {
		start := time.Now()
		copy(dst, data)
		best = max(best, float64(len(data))/time.Since(start).Seconds())
	}
	return best
}
