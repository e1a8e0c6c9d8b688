package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func filesServer(t *testing.T) *httptest.Server {
	t.Helper()
	f, err := NewFiles()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, f)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

// TestFilesServed: every embedded file is served under Prefix with its
// content type, the strict security policy and an ETag, which answers a
// revalidation with 304; the index is the page.
func TestFilesServed(t *testing.T) {
	hs := filesServer(t)
	f, _ := NewFiles()
	if len(f.assets) < 5 {
		t.Fatalf("%d files embedded", len(f.assets))
	}
	for name, a := range f.assets {
		resp, err := http.Get(hs.URL + Prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != string(a.body) {
			t.Fatalf("%s: %d, %d bytes", name, resp.StatusCode, len(body))
		}
		want := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
			".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}[name[strings.LastIndex(name, "."):]]
		if want == "" || resp.Header.Get("Content-Type") != want {
			t.Errorf("%s: Content-Type %q, want %q", name, resp.Header.Get("Content-Type"), want)
		}
		if resp.Header.Get("Content-Security-Policy") != SecurityPolicy || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: security headers %v", name, resp.Header)
		}
		etag := resp.Header.Get("ETag")
		if !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(etag) {
			t.Fatalf("%s: ETag %q", name, etag)
		}
		req, _ := http.NewRequest(http.MethodGet, hs.URL+Prefix+name, nil)
		req.Header.Set("If-None-Match", etag)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s revalidated with its ETag: %d, want 304", name, resp.StatusCode)
		}
	}
	resp, err := http.Get(hs.URL + Prefix)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `<script type="module" src="js/main.js">`) {
		t.Fatalf("%s is not the page: %.200s", Prefix, body)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, Prefix + "nope.js", http.StatusNotFound},
		{http.MethodGet, Prefix + "../console.go", http.StatusNotFound},
		{http.MethodPost, Prefix + "index.html", http.StatusMethodNotAllowed},
		{http.MethodHead, Prefix + "style.css", http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
	}
}

// TestFilesSelfContained: the page runs under its policy as written:
// no inline script, style or event handler, and nothing loaded from
// another site (no CDN).
func TestFilesSelfContained(t *testing.T) {
	f, err := NewFiles()
	if err != nil {
		t.Fatal(err)
	}
	inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>\s*[^<\s]|<style|\sstyle=|\son[a-z]+=|javascript:`)
	remote := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for name, a := range f.assets {
		body := string(a.body)
		if strings.HasSuffix(name, ".html") {
			if m := inline.FindString(body); m != "" {
				t.Errorf("%s: inline code %q, which the policy refuses", name, m)
			}
			if strings.Count(body, "<script") != strings.Count(body, `<script type="module" src="`) {
				t.Errorf("%s: a script that is not a module from the node", name)
			}
		}
		for _, m := range remote.FindAllString(body, -1) {
			if m != "http://www.w3.org" { // the SVG namespace, a name rather than a fetch
				t.Errorf("%s: names %q: the console loads nothing from elsewhere", name, m)
			}
		}
		if strings.HasSuffix(name, ".js") && strings.Contains(body, "innerHTML") {
			t.Errorf("%s: sets innerHTML; the console sets text only (peers' names come from gossip)", name)
		}
	}
}
