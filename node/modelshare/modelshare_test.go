package modelshare

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/modelfetch"
)

func fileBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// holder is a Server over a models dir, reached through net.Pipe streams.
type holder struct {
	dir string
	srv *Server
	// cutDial and cutAfter, when set, end the stream of dial number
	// cutDial (from 1) after cutAfter bytes.
	cutDial, cutAfter int
	dials             int
}

func newHolder(t *testing.T, files map[string][]byte) *holder {
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &holder{dir: dir, srv: &Server{Catalog: &Catalog{Dir: dir, CacheFile: filepath.Join(t.TempDir(), "hashes.json")}}}
}

// cutConn ends the stream after n bytes written.
type cutConn struct {
	net.Conn
	left int
}

func (c *cutConn) Write(b []byte) (int, error) {
	if len(b) > c.left {
		n, _ := c.Conn.Write(b[:c.left])
		c.left = 0
		c.Conn.Close()
		return n, io.ErrClosedPipe
	}
	c.left -= len(b)
	return c.Conn.Write(b)
}

func (h *holder) dial(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
	a, b := net.Pipe()
	var st Stream = b
	h.dials++
	if h.dials == h.cutDial {
		st = &cutConn{Conn: b, left: h.cutAfter}
	}
	go func() {
		h.srv.ServeStream(ctx, peer, st)
		b.Close()
	}()
	return a, nil
}

var peerA = identity.EndpointID{1, 2, 3, 4}

func fetchFrom(t *testing.T, h *holder, want Want) (modelfetch.Result, string, error) {
	dir := t.TempDir()
	f := &modelfetch.Fetcher{Dir: dir, Backoff: time.Millisecond}
	src := &PeerSource{Dial: h.dial, Peer: peerA, Want: want}
	name := want.Name
	if name == "" {
		name = "by-digest"
	}
	res, err := f.Fetch(context.Background(), name, src, nil)
	return res, dir, err
}

func TestFetchFromPeer(t *testing.T) {
	data := fileBytes(3<<20+11, 1)
	h := newHolder(t, map[string][]byte{"m.gguf": data, "notes.txt": []byte("x"), ".hidden.gguf": data})
	if err := os.MkdirAll(filepath.Join(h.dir, ".partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(h.dir, ".partial", "half.gguf"), data[:100], 0o644)

	files, err := h.srv.Catalog.List(context.Background())
	if err != nil || len(files) != 1 || files[0].Name != "m.gguf" {
		t.Fatalf("catalog %+v, %v: want m.gguf only", files, err)
	}
	want, _ := digest.Files(h.dir, "m.gguf")
	if files[0].Weights != want.Digest || files[0].SHA256 != sha256.Sum256(data) {
		t.Fatal("advertised hashes are not the file's")
	}
	res, dir, err := fetchFrom(t, h, Want{Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "m.gguf")); !bytes.Equal(got, data) || res.Weights != want.Digest {
		t.Fatal("fetched file differs from the holder's")
	}
	// By weights digest: the holder finds the file it names.
	w, err := ParseWant(want.Digest.String())
	if err != nil || w.Name != "" {
		t.Fatalf("ParseWant(digest) = %+v, %v", w, err)
	}
	src := &PeerSource{Dial: h.dial, Peer: peerA, Want: w}
	if _, err := (&modelfetch.Fetcher{Dir: t.TempDir()}).Fetch(context.Background(), "m", src, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fetchFrom(t, h, Want{Name: "other"}); !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "holds no other") {
		t.Fatalf("a file the peer lacks: %v", err)
	}
}

func TestFetchFromPeerResumes(t *testing.T) {
	data := fileBytes(2<<20, 2)
	h := newHolder(t, map[string][]byte{"m.gguf": data})
	if _, err := h.srv.Catalog.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Dial 1 lists the files; dial 2, the transfer, breaks at 700 kB;
	// dial 3 resumes it.
	h.dials, h.cutDial, h.cutAfter = 0, 2, 700_000
	dir := t.TempDir()
	f := &modelfetch.Fetcher{Dir: dir, Backoff: time.Millisecond}
	src := &PeerSource{Dial: h.dial, Peer: peerA, Want: Want{Name: "m"}}
	res, err := f.Fetch(context.Background(), "m", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.dials != 3 {
		t.Fatalf("%d streams, want a listing, a cut transfer and its resumption", h.dials)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Fatal("resumed transfer differs")
	}
}

// TestHostileHolder: a holder whose file changed on disk after it was
// hashed (same size and mtime) advertises one SHA-256 and sends other
// bytes: the fetch discards them and names the peer.
func TestHostileHolder(t *testing.T) {
	data := fileBytes(1<<20, 3)
	h := newHolder(t, map[string][]byte{"m.gguf": data})
	if _, err := h.srv.Catalog.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(h.dir, "m.gguf")
	st, _ := os.Stat(path)
	bad := bytes.Clone(data)
	bad[12345] ^= 0xff
	os.WriteFile(path, bad, 0o644)
	os.Chtimes(path, st.ModTime(), st.ModTime())
	_, dir, err := fetchFrom(t, h, Want{Name: "m"})
	var he *modelfetch.HashError
	if !errors.As(err, &he) || he.Origin != "mesh peer "+peerA.Short() {
		t.Fatalf("got %v, want a hash mismatch naming the peer", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.gguf")); len(m) != 0 {
		t.Fatalf("wrong bytes reached the models dir: %v", m)
	}
}

// TestWeightsDigestChecked: bytes that match the advertised SHA-256 but
// not the advertised weights digest are discarded too.
func TestWeightsDigestChecked(t *testing.T) {
	data := fileBytes(100_000, 4)
	src := &PeerSource{Peer: peerA}
	src.file.Name = "m.gguf"
	src.file.Weights = [32]byte{9}
	err := src.Check(modelfetch.Result{BLAKE3: digest.HashBytes(data)})
	var he *modelfetch.HashError
	if !errors.As(err, &he) || he.What != "weights digest" {
		t.Fatalf("got %v", err)
	}
	w, _ := digest.Root([]digest.Entry{{Path: "m.gguf", Sum: digest.HashBytes(data)}})
	src.file.Weights = w
	if err := src.Check(modelfetch.Result{BLAKE3: digest.HashBytes(data)}); err != nil {
		t.Fatal(err)
	}
}

func TestRefusals(t *testing.T) {
	h := newHolder(t, map[string][]byte{"m.gguf": fileBytes(1000, 5)})
	h.srv.Allow = func(identity.EndpointID) error {
		return errors.New(`this node serves no requests from mesh peers (mesh_access = "none")`)
	}
	if _, _, err := fetchFrom(t, h, Want{Name: "m"}); !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), `mesh_access = "none"`) {
		t.Fatalf("refused by policy: %v", err)
	}
	h.srv.Allow = nil
	h.srv.Serving = func() bool { return false }
	if _, _, err := fetchFrom(t, h, Want{Name: "m"}); !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "serve_files = false") {
		t.Fatalf("serving off: %v", err)
	}
}

func TestCatalogCache(t *testing.T) {
	data := fileBytes(10_000, 6)
	h := newHolder(t, map[string][]byte{"m.gguf": data})
	c := h.srv.Catalog
	first, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A new catalog over the same cache file takes the hashes from it:
	// change the bytes, keep size and mtime, and the old hash stays.
	path := filepath.Join(h.dir, "m.gguf")
	st, _ := os.Stat(path)
	os.WriteFile(path, fileBytes(10_000, 7), 0o644)
	os.Chtimes(path, st.ModTime(), st.ModTime())
	c2 := &Catalog{Dir: h.dir, CacheFile: c.CacheFile}
	again, _ := c2.List(context.Background())
	if again[0].SHA256 != first[0].SHA256 {
		t.Fatal("the cache was not used")
	}
	// A new mtime: hashed again.
	os.Chtimes(path, st.ModTime().Add(time.Second), st.ModTime().Add(time.Second))
	third, _ := c2.List(context.Background())
	if third[0].SHA256 == first[0].SHA256 || third[0].SHA256 != sha256.Sum256(fileBytes(10_000, 7)) {
		t.Fatal("a changed file was not hashed again")
	}
}

// TestBucket: the waits a bucket asks for add up to the bytes over its
// rate, whatever the sizes taken (fake clock: the sleeps advance it).
func TestBucket(t *testing.T) {
	now := time.Unix(100, 0)
	var slept time.Duration
	b := NewBucket(1_000_000, 100_000, func() time.Time { return now }, func(_ context.Context, d time.Duration) error {
		slept += d
		now = now.Add(d)
		return nil
	})
	ctx := context.Background()
	// 100 kB of burst, then 4.9 MB more at 1 MB/s: 4.9 s of waiting.
	total := 0
	for _, n := range []int{100_000, 262_144, 262_144, 1_000_000, 3_275_712} {
		if err := b.Wait(ctx, n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	want := time.Duration(float64(total-100_000) / 1e6 * float64(time.Second))
	if d := slept - want; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("slept %v for %d bytes, want %v ± 1ms", slept, total, want)
	}
	// Idle time refills up to the burst only.
	now = now.Add(time.Hour)
	slept = 0
	b.Wait(ctx, 100_000)
	b.Wait(ctx, 500_000)
	if d := slept - 500*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("after idling, slept %v for 600 kB, want 500ms", slept)
	}
	if NewBucket(0, 0, nil, nil).Wait(ctx, 1<<30) != nil {
		t.Fatal("an unlimited bucket waited")
	}
}

func TestParseWant(t *testing.T) {
	if w, err := ParseWant("qwen.gguf"); err != nil || w.Name != "qwen" {
		t.Fatalf("%+v %v", w, err)
	}
	if w, err := ParseWant("qwen"); err != nil || w.Name != "qwen" {
		t.Fatalf("%+v %v", w, err)
	}
	for _, bad := range []string{"../x", "a/b", ".x", ""} {
		if _, err := ParseWant(bad); err == nil {
			t.Errorf("ParseWant(%q) accepted", bad)
		}
	}
}
