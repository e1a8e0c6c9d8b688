package hfhub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/modelfetch"
)

// fakeHub behaves like the hub and its CDN for one repo: HEAD and GET of
// the resolve URL redirect (302) to the CDN, which serves the bytes with
// Range and If-Range (http.ServeContent); the tree API lists the LFS oid.
type fakeHub struct {
	hub, cdn *httptest.Server
	mu       sync.Mutex
	files    map[string][]byte // path in repo → bytes
	etag     map[string]string // the ETag the hub and CDN give (default: SHA-256)
	listed   map[string]string // the SHA-256 the hub lists, when not the bytes'
	lfs      bool              // X-Linked-Etag carries the SHA-256 (else only the tree does)
	token    string            // required of every hub request when set
	cutAt    int64             // the CDN's next GET breaks its connection after this many bytes
	commit   string
	ranges   []string // Range headers the CDN saw
	cdnAuth  []string // Authorization headers the CDN saw
}

func newFakeHub(t testing.TB) *fakeHub {
	f := &fakeHub{files: map[string][]byte{}, etag: map[string]string{}, listed: map[string]string{}, lfs: true, commit: strings.Repeat("c0", 20)}
	f.cdn = httptest.NewServer(http.HandlerFunc(f.serveCDN))
	f.hub = httptest.NewServer(http.HandlerFunc(f.serveHub))
	// The CDN is another host than the hub (localhost, not 127.0.0.1), as
	// it is in life: a client must not hand it the hub token.
	f.cdn.URL = strings.Replace(f.cdn.URL, "127.0.0.1", "localhost", 1)
	t.Cleanup(func() { f.hub.Close(); f.cdn.Close() })
	return f
}

func (f *fakeHub) sha(p string) string {
	if s := f.listed[p]; s != "" {
		return s
	}
	s := sha256.Sum256(f.files[p])
	return hex.EncodeToString(s[:])
}

func (f *fakeHub) tag(p string) string {
	if e := f.etag[p]; e != "" {
		return e
	}
	return f.sha(p)
}

func (f *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		w.Header().Set("X-Error-Message", "Access to model owner/repo is restricted.")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/api/models/owner/repo/tree/"); ok {
		_, dir, _ := strings.Cut(rest, "/")
		var out []map[string]any
		for p := range f.files {
			if d := filepath.Dir(p); d == dir || (d == "." && dir == "") {
				out = append(out, map[string]any{"type": "file", "path": p, "size": len(f.files[p]),
					"lfs": map[string]any{"oid": f.sha(p), "size": len(f.files[p]), "pointerSize": 134}})
			}
		}
		json.NewEncoder(w).Encode(out)
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/old-owner/repo/"); ok {
		// A renamed repo: a relative redirect within the hub.
		http.Redirect(w, r, "/owner/repo/"+rest, http.StatusMovedPermanently)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/owner/repo/resolve/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, p, _ := strings.Cut(rest, "/")
	data, ok := f.files[p]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.NotFound(w, r)
		return
	}
	w.Header().Set("X-Repo-Commit", f.commit)
	if f.lfs {
		w.Header().Set("X-Linked-Etag", `"`+f.tag(p)+`"`)
	}
	w.Header().Set("ETag", `W/"not-a-sha"`)
	w.Header().Set("X-Linked-Size", fmt.Sprint(len(data)))
	w.Header().Set("Location", f.cdn.URL+"/blobs/"+p+"?signed=1")
	w.WriteHeader(http.StatusFound)
}

func (f *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	p := strings.TrimPrefix(r.URL.Path, "/blobs/")
	data, ok := f.files[p]
	tag := f.tag(p)
	cut := f.cutAt
	f.cutAt = 0
	if r.Method == http.MethodGet {
		f.ranges = append(f.ranges, r.Header.Get("Range"))
		f.cdnAuth = append(f.cdnAuth, r.Header.Get("Authorization"))
	}
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", `"`+tag+`"`)
	if cut > 0 && r.Method == http.MethodGet {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-file
	}
	http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(data))
}

func (f *fakeHub) seenRanges() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ranges...)
}

func modelBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func fetcher(t *testing.T) *modelfetch.Fetcher {
	return &modelfetch.Fetcher{Dir: t.TempDir(), Backoff: time.Millisecond}
}

func ggufIn(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.gguf"))
	return m
}

func TestParseRef(t *testing.T) {
	const ep = "https://huggingface.co"
	for in, want := range map[string]Ref{
		"owner/repo/file.gguf":                                           {"owner/repo", "main", "file.gguf"},
		"owner/repo/dir/file.gguf":                                       {"owner/repo", "main", "dir/file.gguf"},
		"owner/repo@v1.0/file.gguf":                                      {"owner/repo", "v1.0", "file.gguf"},
		"https://huggingface.co/owner/repo/resolve/main/file.gguf":       {"owner/repo", "main", "file.gguf"},
		"https://huggingface.co/owner/repo/blob/abc123/sub/file.gguf":    {"owner/repo", "abc123", "sub/file.gguf"},
		"https://huggingface.co/owner/repo/resolve/refs%2Fpr%2F1/f.gguf": {"owner/repo", "refs/pr/1", "f.gguf"},
	} {
		got, err := ParseRef(in, ep)
		if err != nil || got != want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"owner/repo", "file.gguf", "owner/repo/../x.gguf", "owner/../x.gguf", "https://example.com/owner/repo/resolve/main/f.gguf",
		"https://huggingface.co/owner/repo/tree/main/f.gguf", "owner/repo//f.gguf", "owner/repo/f.gguf?x=1"} {
		if _, err := ParseRef(in, ep); !errors.Is(err, ErrBadRef) {
			t.Errorf("ParseRef(%q): got %v, want ErrBadRef", in, err)
		}
	}
}

func TestPullFromHub(t *testing.T) {
	h := newFakeHub(t)
	data := modelBytes(2<<20+5, 1)
	h.files["sub/model-q4.gguf"] = data
	h.token = "hf_secret"
	c := &Client{Endpoint: h.hub.URL, Token: "hf_secret"}
	f := fetcher(t)
	res, err := f.Fetch(context.Background(), "model-q4", c.Source(Ref{"owner/repo", "main", "sub/model-q4.gguf"}, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Fatal("pulled file differs from the hub's")
	}
	for _, a := range h.cdnAuth {
		if a != "" {
			t.Fatalf("the CDN was sent the hub token (%q)", a)
		}
	}
	// Without the token the hub refuses, and the error says what to do.
	c.Token = ""
	_, err = (&modelfetch.Fetcher{Dir: t.TempDir()}).Fetch(context.Background(), "x", c.Source(Ref{"owner/repo", "main", "sub/model-q4.gguf"}, ""), nil)
	if err == nil || !strings.Contains(err.Error(), "HF_TOKEN") || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("unauthorised pull: %v", err)
	}
}

func TestPullFollowsRenamedRepo(t *testing.T) {
	h := newFakeHub(t)
	h.files["m.gguf"] = modelBytes(4096, 2)
	c := &Client{Endpoint: h.hub.URL}
	info, err := c.Stat(context.Background(), Ref{"old-owner/repo", "main", "m.gguf"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if info.Commit != h.commit || info.Size != 4096 || !strings.HasPrefix(info.Location, h.cdn.URL) {
		t.Fatalf("stat %+v", info)
	}
}

func TestPullResumesCutConnection(t *testing.T) {
	h := newFakeHub(t)
	data := modelBytes(3<<20, 3)
	h.files["m.gguf"] = data
	h.cutAt = 1 << 20
	c := &Client{Endpoint: h.hub.URL}
	f := fetcher(t)
	var during []string
	res, err := f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), func(p modelfetch.Progress) {
		if p.Phase != modelfetch.PhaseDone {
			during = append(during, ggufIn(t, f.Dir)...)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 0 {
		t.Fatalf("the models dir listed %v before the file was verified", during)
	}
	r := h.seenRanges()
	if len(r) != 2 || r[0] != "" || !strings.HasPrefix(r[1], "bytes=") || r[1] == "bytes=0-" {
		t.Fatalf("CDN saw ranges %q: want a whole GET, then a resume", r)
	}
	if res.Resumed != 0 {
		t.Fatalf("Resumed %d for a fetch that started empty", res.Resumed)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Fatal("resumed file differs")
	}
}

func TestPullResumesAcrossPulls(t *testing.T) {
	h := newFakeHub(t)
	data := modelBytes(3<<20, 4)
	h.files["m.gguf"] = data
	h.cutAt = 1 << 20
	c := &Client{Endpoint: h.hub.URL}
	f := fetcher(t)
	f.Attempts = 1 // the cut ends the first pull
	if _, err := f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil); err == nil {
		t.Fatal("a pull with one attempt survived a cut")
	}
	if g := ggufIn(t, f.Dir); len(g) != 0 {
		t.Fatalf("a cut pull left %v in the models dir", g)
	}
	st, err := os.Stat(f.PartialPath("m.gguf"))
	if err != nil || st.Size() == 0 {
		t.Fatalf("no partial kept: %v", err)
	}
	res, err := f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.seenRanges(); r[len(r)-1] != fmt.Sprintf("bytes=%d-", st.Size()) || res.Resumed != st.Size() {
		t.Fatalf("second pull: ranges %q, resumed %d; want a resume from %d", r, res.Resumed, st.Size())
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Fatal("file differs")
	}
}

func TestPullRestartsWhenFileChanged(t *testing.T) {
	h := newFakeHub(t)
	h.files["m.gguf"] = modelBytes(3<<20, 5)
	h.cutAt = 1 << 20
	c := &Client{Endpoint: h.hub.URL}
	f := fetcher(t)
	f.Attempts = 1
	f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil)
	// A new upload of the file: another SHA-256, so another ETag.
	newer := modelBytes(3<<20, 6)
	h.mu.Lock()
	h.files["m.gguf"] = newer
	h.ranges = nil
	h.mu.Unlock()
	res, err := f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := h.seenRanges(); len(r) != 1 || r[0] != "" || res.Resumed != 0 {
		t.Fatalf("ranges %q, resumed %d: a changed file must be fetched whole", r, res.Resumed)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, newer) {
		t.Fatal("file is not the new upload")
	}
}

func TestPullIfRangeRestartsAtCDN(t *testing.T) {
	// The CDN's copy changed under the same hub ETag (If-Range fails):
	// it answers the whole file, and the fetch starts over from it.
	h := newFakeHub(t)
	data := modelBytes(2<<20, 7)
	h.files["m.gguf"] = data
	h.cutAt = 1 << 20
	c := &Client{Endpoint: h.hub.URL}
	f := fetcher(t)
	f.Attempts = 1
	f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil)
	// Rewrite the record's validator as if the CDN had served another version.
	rec := f.PartialPath("m.gguf") + ".json"
	b, _ := os.ReadFile(rec)
	os.WriteFile(rec, bytes.Replace(b, []byte(`"validator":"\"`), []byte(`"validator":"\"stale`), 1), 0o644)
	f.Attempts = 0
	res, err := f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Fatal("file differs")
	}
	if r := h.seenRanges(); !strings.HasPrefix(r[len(r)-1], "bytes=") || res.Resumed != 0 {
		t.Fatalf("ranges %q, resumed %d: want a range refused by If-Range and nothing kept", r, res.Resumed)
	}
}

func TestPullWrongHash(t *testing.T) {
	h := newFakeHub(t)
	h.files["m.gguf"] = modelBytes(1<<20, 8)
	h.listed["m.gguf"] = strings.Repeat("ab", 32)
	c := &Client{Endpoint: h.hub.URL}
	f := fetcher(t)
	_, err := f.Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "m.gguf"}, ""), nil)
	var he *modelfetch.HashError
	if !errors.As(err, &he) || he.Want != strings.Repeat("ab", 32) || !strings.Contains(he.Origin, "owner/repo/m.gguf") {
		t.Fatalf("got %v, want a hash mismatch naming the file", err)
	}
	if g := ggufIn(t, f.Dir); len(g) != 0 {
		t.Fatalf("wrong bytes reached the models dir: %v", g)
	}
	if _, err := os.Stat(f.PartialPath("m.gguf")); !os.IsNotExist(err) {
		t.Fatal("wrong bytes kept as a partial")
	}
}

func TestPullSHA256FromTree(t *testing.T) {
	h := newFakeHub(t)
	data := modelBytes(100_000, 9)
	h.files["dir/m.gguf"] = data
	h.lfs = false // the HEAD carries no SHA-256: the tree API does
	c := &Client{Endpoint: h.hub.URL}
	info, err := c.Stat(context.Background(), Ref{"owner/repo", "main", "dir/m.gguf"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != sha256.Sum256(data) {
		t.Fatal("SHA-256 is not the tree's")
	}
	// One the owner expects must match the hub's.
	if _, err := c.Stat(context.Background(), Ref{"owner/repo", "main", "dir/m.gguf"}, strings.Repeat("00", 32)); err == nil || !strings.Contains(err.Error(), "not the") {
		t.Fatalf("a conflicting --sha256: %v", err)
	}
	// A file the hub lists no SHA-256 for is refused without one.
	h.files["dir/small.gguf"] = []byte("x")
	h.mu.Lock()
	h.listed["dir/small.gguf"] = "nothex"
	h.mu.Unlock()
	if _, err := c.Stat(context.Background(), Ref{"owner/repo", "main", "dir/small.gguf"}, ""); err == nil || !strings.Contains(err.Error(), "--sha256") {
		t.Fatalf("a file with no listed SHA-256: %v", err)
	}
}

func TestPullMissingFile(t *testing.T) {
	h := newFakeHub(t)
	c := &Client{Endpoint: h.hub.URL}
	_, err := fetcher(t).Fetch(context.Background(), "m", c.Source(Ref{"owner/repo", "main", "nope.gguf"}, ""), nil)
	if err == nil || !strings.Contains(err.Error(), "no such repo, revision or file") {
		t.Fatalf("got %v", err)
	}
}

func TestPullFromURL(t *testing.T) {
	h := newFakeHub(t)
	data := modelBytes(300_000, 10)
	h.files["m.gguf"] = data
	c := &Client{}
	u := h.cdn.URL + "/blobs/m.gguf"
	if _, err := fetcher(t).Fetch(context.Background(), "m", c.URLSource(u, ""), nil); err == nil || !strings.Contains(err.Error(), "--sha256") {
		t.Fatalf("a URL without a SHA-256: %v", err)
	}
	sum := sha256.Sum256(data)
	res, err := fetcher(t).Fetch(context.Background(), "m", c.URLSource(u, hex.EncodeToString(sum[:])), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(res.Path); !bytes.Equal(got, data) {
		t.Fatal("file differs")
	}
}

func TestParseContentRange(t *testing.T) {
	for in, want := range map[string][2]int64{"bytes 10-99/100": {10, 100}, "bytes 0-0/*": {0, -1}} {
		s, tot, err := parseContentRange(in)
		if err != nil || s != want[0] || tot != want[1] {
			t.Errorf("%q: %d %d %v", in, s, tot, err)
		}
	}
	for _, in := range []string{"", "bytes 10-5/100", "items 0-1/2", "bytes x-1/2", "bytes 1-2", "bytes 0-0/-2", "bytes 0-9/9", "bytes 0-0/0"} {
		if _, _, err := parseContentRange(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}
