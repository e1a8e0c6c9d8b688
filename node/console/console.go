// Package console is meshnode's web console: a page the node serves on its
// API listener under /console/, made of plain HTML, CSS and JavaScript
// modules embedded in the binary (no framework, no build step, nothing
// fetched from elsewhere), and the live feed of requests it reads
// (/api/events, Events).
//
// The page shows the mesh (GET /api/status), per-model throughput and
// energy and a live request log (Events), the steward's latest receipts
// with their verification (GET /api/receipts), and a chat playground on
// /v1/chat/completions. Its files hold no data, so they are served
// without the API key (api.Config.Public); every call the page makes
// carries the key the user gives it, kept in the tab's sessionStorage.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed web
var web embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// SecurityPolicy is the Content-Security-Policy of every file: scripts,
// styles and fetches from the node itself only, no inline script or
// style, no frames, no forms.
const SecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the types of the files the console has, by extension,
// fixed here rather than taken from the system's MIME tables.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Files serves the console's files under Prefix: GET and HEAD only, each
// with its content type, an ETag of its content (answered 304 when the
// browser has it) and the security headers.
type Files struct {
	assets map[string]asset
}

// NewFiles reads the embedded files.
func NewFiles() (*Files, error) {
	f := &Files{assets: map[string]asset{}}
	err := fs.WalkDir(web, "web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := web.ReadFile(p)
		if err != nil {
			return err
		}
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			ctype = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		f.assets[strings.TrimPrefix(p, "web/")] = asset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return f, err
}

func (f *Files) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", SecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the console's files are read with GET", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if name == "" {
		name = "index.html"
	}
	a, ok := f.assets[name]
	if !ok {
		http.Error(w, "no such file in the console", http.StatusNotFound)
		return
	}
	h.Set("Content-Type", a.ctype)
	h.Set("ETag", a.etag)
	// Revalidated on every load (a 304 when unchanged), so a new binary's
	// files are never mixed with an old one's.
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
