package hfhub

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzParseContentRange: no header makes parseContentRange panic, and
// what it reads writes back the same. Seeded from the headers net/http's
// ServeContent (the fake hub's server, and a CDN's like it) writes for
// ranges from the start, the middle and the last byte of a file.
func FuzzParseContentRange(f *testing.F) {
	data := bytes.Repeat([]byte("gguf"), 64)
	for _, rng := range []string{"bytes=0-", "bytes=100-199", "bytes=255-"} {
		req := httptest.NewRequest(http.MethodGet, "/f.gguf", nil)
		req.Header.Set("Range", rng)
		rec := httptest.NewRecorder()
		http.ServeContent(rec, req, "f.gguf", time.Time{}, bytes.NewReader(data))
		cr := rec.Header().Get("Content-Range")
		if cr == "" {
			f.Fatalf("ServeContent answered %q with no Content-Range", rng)
		}
		f.Add(cr)
	}
	f.Add("bytes 5-9/*")
	f.Fuzz(func(t *testing.T, s string) {
		start, total, err := parseContentRange(s)
		if err != nil {
			return
		}
		if start < 0 || total < -1 {
			t.Fatalf("%q: start %d, total %d", s, start, total)
		}
		tot := "*"
		if total >= 0 {
			tot = fmt.Sprint(total)
		}
		again, againTotal, err := parseContentRange(fmt.Sprintf("bytes %d-%d/%s", start, start, tot))
		if err != nil || again != start || againTotal != total {
			t.Fatalf("%q read as %d of %d, which reads back as %d of %d, %v", s, start, total, again, againTotal, err)
		}
	})
}

// FuzzListedSHA256: no tree listing makes listedSHA256 panic, and a
// SHA-256 it finds is the file's entry's, in either of the hub's fields.
// Seeded from the fake hub's listing (the hub API's shape) of a folder
// with the file and another.
func FuzzListedSHA256(f *testing.F) {
	h := newFakeHub(f)
	h.files["q/model.gguf"] = []byte("gguf one")
	h.files["q/other.gguf"] = []byte("gguf two")
	resp, err := http.Get(h.hub.URL + "/api/models/owner/repo/tree/main/q")
	if err != nil {
		f.Fatal(err)
	}
	listing, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(listing, "q/model.gguf")
	f.Add([]byte(`[{"type":"file","path":"a","lfs":{"sha256":"`+strings.Repeat("ab", 32)+`"}}]`), "a")
	f.Fuzz(func(t *testing.T, listing []byte, file string) {
		sum, ok, err := listedSHA256(bytes.NewReader(listing), file)
		if err != nil || !ok {
			return
		}
		hexSum := hex.EncodeToString(sum[:])
		if !strings.Contains(strings.ToLower(string(listing)), hexSum) {
			t.Fatalf("%x is not in the listing", sum)
		}
	})
}
