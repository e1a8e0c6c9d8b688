// Package hfhub finds a model file on the Hugging Face hub, or a server
// that behaves like it, and serves it to modelfetch as a Source.
//
// It does what huggingface_hub's hf_hub_download does: a HEAD of the
// file's resolve URL (ENDPOINT/OWNER/REPO/resolve/REVISION/FILE), following
// only relative redirects (a renamed repo), never the one to the CDN, reads the commit (X-Repo-Commit), the ETag (X-Linked-Etag, else
// ETag: for an LFS file, its SHA-256), the size (X-Linked-Size, else
// Content-Length) and where the bytes are (Location). Where the ETag is no
// SHA-256, the hub API's tree listing (/api/models/OWNER/REPO/tree/COMMIT)
// gives the file's lfs.oid. The bytes are then fetched from the resolve URL
// pinned to that commit, redirects followed, with Range and If-Range to
// resume. A token (HF_TOKEN) goes as "Authorization: Bearer" to the hub
// only: Go's client drops it on a redirect to another host, the CDN's
// signed URL.
package hfhub

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/node/modelfetch"
)

// DefaultEndpoint is the hub, unless HF_ENDPOINT says otherwise.
const DefaultEndpoint = "https://huggingface.co"

// Ref names one file of a hub repo.
type Ref struct {
	Repo     string // "owner/name"
	Revision string // a branch, tag or commit; "main" by default
	File     string // the path in the repo: "model-q4_k_m.gguf", "gguf/x.gguf"
}

func (r Ref) String() string {
	if r.Revision == "main" {
		return r.Repo + "/" + r.File
	}
	return r.Repo + "@" + r.Revision + "/" + r.File
}

// ErrBadRef is a model reference that names no hub file.
var ErrBadRef = errors.New("not a hub file reference")

// ParseRef reads "owner/repo/file.gguf" (the file may sit in folders:
// "owner/repo/dir/file.gguf"), "owner/repo@rev/file.gguf", or a hub URL
// under endpoint: ENDPOINT/owner/repo/resolve/rev/file (or .../blob/...).
// A URL elsewhere is ErrBadRef: see URLSource.
func ParseRef(s, endpoint string) (Ref, error) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return Ref{}, fmt.Errorf("%q: %w: %v", s, ErrBadRef, err)
		}
		base, err := url.Parse(endpoint)
		if err != nil {
			return Ref{}, fmt.Errorf("hub endpoint %q: %w", endpoint, err)
		}
		if !strings.EqualFold(u.Host, base.Host) {
			return Ref{}, fmt.Errorf("%q: %w: not on the hub %s", s, ErrBadRef, endpoint)
		}
		parts := strings.SplitN(strings.TrimPrefix(u.EscapedPath(), strings.TrimSuffix(base.EscapedPath(), "/")+"/"), "/", 5)
		if len(parts) < 5 || (parts[2] != "resolve" && parts[2] != "blob") {
			return Ref{}, fmt.Errorf("%q: %w: a hub file URL is %s/OWNER/REPO/resolve/REVISION/FILE", s, ErrBadRef, endpoint)
		}
		for i, p := range parts {
			if parts[i], err = url.PathUnescape(p); err != nil {
				return Ref{}, fmt.Errorf("%q: %w: %v", s, ErrBadRef, err)
			}
		}
		if u.RawQuery != "" && u.RawQuery != "download=true" {
			return Ref{}, fmt.Errorf("%q: %w: a hub file URL has no query", s, ErrBadRef)
		}
		return checkRef(Ref{Repo: parts[0] + "/" + parts[1], Revision: parts[3], File: parts[4]}, s)
	}
	parts := strings.SplitN(s, "/", 3)
	if len(parts) < 3 {
		return Ref{}, fmt.Errorf("%q: %w: write OWNER/REPO/FILE.gguf, OWNER/REPO@REVISION/FILE.gguf, or a hub URL", s, ErrBadRef)
	}
	r := Ref{Repo: parts[0] + "/" + parts[1], Revision: "main", File: parts[2]}
	if name, rev, ok := strings.Cut(parts[1], "@"); ok {
		r.Repo, r.Revision = parts[0]+"/"+name, rev
	}
	return checkRef(r, s)
}

func checkRef(r Ref, s string) (Ref, error) {
	owner, name, _ := strings.Cut(r.Repo, "/")
	for _, p := range []string{owner, name} {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/?#\\@") {
			return Ref{}, fmt.Errorf("%q: %w: bad owner or repo %q", s, ErrBadRef, p)
		}
	}
	// A revision is a branch, tag or commit: "refs/pr/1" has slashes.
	if rv := r.Revision; rv == "" || path.Clean(rv) != rv || strings.HasPrefix(rv, "/") || rv == ".." || strings.HasPrefix(rv, "../") || strings.ContainsAny(rv, "?#\\") {
		return Ref{}, fmt.Errorf("%q: %w: bad revision %q", s, ErrBadRef, rv)
	}
	if r.File == "" || path.Clean(r.File) != r.File || strings.HasPrefix(r.File, "../") || r.File == ".." || strings.HasPrefix(r.File, "/") || strings.ContainsAny(r.File, "?#\\") {
		return Ref{}, fmt.Errorf("%q: %w: bad file path %q", s, ErrBadRef, r.File)
	}
	return r, nil
}

// Client reaches the hub.
type Client struct {
	// Endpoint is the hub (DefaultEndpoint); HF_ENDPOINT sets it.
	Endpoint string
	// Token, when set, is sent as a bearer token to the hub (HF_TOKEN).
	Token string
	// HTTP is the client used (http.DefaultClient).
	HTTP *http.Client
	// UserAgent is sent with every request.
	UserAgent string
}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimRight(c.Endpoint, "/")
}

func (c *Client) http() *http.Client {
	if c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

func (c *Client) resolveURL(repo, rev, file string) string {
	return c.endpoint() + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + escapePath(file)
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func (c *Client) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	// The size and ETag are those of the file's bytes, never of a
	// compressed rendering of them.
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

// FileInfo is what the hub says of a file.
type FileInfo struct {
	Commit   string   // X-Repo-Commit: the revision resolved
	ETag     string   // normalised: no quotes, no W/
	Size     int64    // bytes
	SHA256   [32]byte // from the ETag (LFS), or the tree listing
	Location string   // where the HEAD redirected to (the CDN), if it did
}

// Stat resolves ref on the hub. sha256Hex, when set, is the SHA-256 the
// owner expects: a hub that lists another is an error, and a file the hub
// lists none for (not stored in LFS) is checked against it.
func (c *Client) Stat(ctx context.Context, ref Ref, sha256Hex string) (FileInfo, error) {
	u := c.resolveURL(ref.Repo, ref.Revision, ref.File)
	resp, err := c.head(ctx, u)
	if err != nil {
		return FileInfo{}, err
	}
	resp.Body.Close()
	if err := statusError(resp, ref.String()); err != nil {
		return FileInfo{}, err
	}
	h := resp.Header
	info := FileInfo{Commit: h.Get("X-Repo-Commit"), ETag: normalizeETag(h.Get("X-Linked-Etag"))}
	if info.ETag == "" {
		info.ETag = normalizeETag(h.Get("ETag"))
	}
	size := h.Get("X-Linked-Size")
	if size == "" {
		size = h.Get("Content-Length")
	}
	if info.Size, err = strconv.ParseInt(size, 10, 64); err != nil || info.Size < 0 {
		return FileInfo{}, fmt.Errorf("hub: %s: the hub gave no size for the file (X-Linked-Size %q, Content-Length %q)", ref, h.Get("X-Linked-Size"), h.Get("Content-Length"))
	}
	if loc := h.Get("Location"); loc != "" {
		if l, err := resp.Request.URL.Parse(loc); err == nil {
			info.Location = l.String()
		}
	}
	listed, ok := parseSHA256(info.ETag)
	if !ok {
		rev := info.Commit
		if rev == "" {
			rev = ref.Revision
		}
		if listed, ok, err = c.treeSHA256(ctx, ref, rev); err != nil {
			return FileInfo{}, err
		}
	}
	if sha256Hex != "" {
		want, valid := parseSHA256(sha256Hex)
		if !valid {
			return FileInfo{}, modelfetch.Permanent(fmt.Errorf("--sha256 %q is not 64 hex digits", sha256Hex))
		}
		if ok && want != listed {
			return FileInfo{}, modelfetch.Permanent(fmt.Errorf("hub: %s: the hub lists SHA-256 %x, not the %s asked for", ref, listed, sha256Hex))
		}
		listed, ok = want, true
	}
	if !ok {
		return FileInfo{}, modelfetch.Permanent(fmt.Errorf("hub: %s: the hub lists no SHA-256 for the file (it is not stored in LFS), so it cannot be verified: give the expected one (--sha256)", ref))
	}
	info.SHA256 = listed
	return info, nil
}

// head sends a HEAD, following relative redirects (a renamed repo) but
// not absolute ones (the CDN): where the bytes live is the answer's
// Location.
func (c *Client) head(ctx context.Context, u string) (*http.Response, error) {
	hc := *c.http()
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("more than 10 redirects")
		}
		// Only a relative Location is the hub's own (a renamed repo), as
		// huggingface_hub's follow_relative_redirects has it; an absolute
		// one is where the bytes are.
		if loc, err := url.Parse(req.Response.Header.Get("Location")); err != nil || loc.IsAbs() || loc.Host != "" {
			return http.ErrUseLastResponse
		}
		return nil
	}
	req, err := c.newRequest(ctx, http.MethodHead, u)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("hub: HEAD %s: %w", u, err)
	}
	return resp, nil
}

// statusError turns a refusal into an error that says what to do.
func statusError(resp *http.Response, what string) error {
	switch {
	case resp.StatusCode < 400:
		return nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		msg := resp.Header.Get("X-Error-Message")
		return modelfetch.Permanent(fmt.Errorf("hub: %s: %s%s: the repo is private or gated; set HF_TOKEN to a token that may read it", what, resp.Status, orBlank(msg)))
	case resp.StatusCode == http.StatusNotFound:
		return modelfetch.Permanent(fmt.Errorf("hub: %s: %s%s: no such repo, revision or file", what, resp.Status, orBlank(resp.Header.Get("X-Error-Message"))))
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("hub: %s: %s", what, resp.Status)
	}
	return modelfetch.Permanent(fmt.Errorf("hub: %s: %s", what, resp.Status))
}

func orBlank(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// normalizeETag strips a weak marker and quotes: `W/"abc"` is abc.
func normalizeETag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.Trim(s, `"`)
}

func parseSHA256(s string) ([32]byte, bool) {
	var out [32]byte
	if len(s) != 64 {
		return out, false
	}
	if _, err := hex.Decode(out[:], []byte(strings.ToLower(s))); err != nil {
		return out, false
	}
	return out, true
}

// maxTree bounds the tree listing read: a folder of a model repo lists
// some hundreds of files.
const maxTree = 16 << 20

// treeSHA256 finds the file's LFS SHA-256 in the hub API's listing of its
// folder at rev.
func (c *Client) treeSHA256(ctx context.Context, ref Ref, rev string) ([32]byte, bool, error) {
	u := c.endpoint() + "/api/models/" + ref.Repo + "/tree/" + url.PathEscape(rev)
	if dir := path.Dir(ref.File); dir != "." {
		u += "/" + escapePath(dir)
	}
	req, err := c.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return [32]byte{}, false, fmt.Errorf("hub: %w", err)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return [32]byte{}, false, fmt.Errorf("hub: GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp, ref.String()+" (tree listing)"); err != nil {
		return [32]byte{}, false, err
	}
	sum, ok, err := listedSHA256(io.LimitReader(resp.Body, maxTree), ref.File)
	if err != nil {
		return [32]byte{}, false, fmt.Errorf("hub: %s: %w", ref, err)
	}
	return sum, ok, nil
}

// listedSHA256 reads a tree listing (the hub API's JSON) for file's LFS
// SHA-256, and whether the listing gives one.
func listedSHA256(listing io.Reader, file string) ([32]byte, bool, error) {
	var entries []struct {
		Type string `json:"type"`
		Path string `json:"path"`
		LFS  *struct {
			OID    string `json:"oid"`
			SHA256 string `json:"sha256"`
		} `json:"lfs"`
	}
	if err := json.NewDecoder(listing).Decode(&entries); err != nil {
		return [32]byte{}, false, fmt.Errorf("the tree listing does not decode: %w", err)
	}
	for _, e := range entries {
		if e.Path != file || e.LFS == nil {
			continue
		}
		for _, s := range []string{e.LFS.SHA256, e.LFS.OID} {
			if sum, ok := parseSHA256(s); ok {
				return sum, true, nil
			}
		}
	}
	return [32]byte{}, false, nil
}

// Source is ref as a modelfetch.Source.
func (c *Client) Source(ref Ref, sha256Hex string) modelfetch.Source {
	return &hubSource{c: c, ref: ref, sha: sha256Hex}
}

type hubSource struct {
	c    *Client
	ref  Ref
	sha  string
	info FileInfo
}

func (s *hubSource) Origin() string {
	host := s.c.endpoint()
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	return host + "/" + s.ref.String()
}

func (s *hubSource) Describe(ctx context.Context) (modelfetch.Meta, error) {
	info, err := s.c.Stat(ctx, s.ref, s.sha)
	if err != nil {
		return modelfetch.Meta{}, err
	}
	s.info = info
	version := info.ETag
	if version == "" {
		version = hex.EncodeToString(info.SHA256[:])
	}
	return modelfetch.Meta{Size: info.Size, SHA256: info.SHA256, Version: version}, nil
}

func (s *hubSource) Open(ctx context.Context, offset int64, m modelfetch.Meta, validator string) (modelfetch.Chunk, error) {
	rev := s.info.Commit
	if rev == "" {
		rev = s.ref.Revision
	}
	return s.c.get(ctx, s.c.resolveURL(s.ref.Repo, rev, s.ref.File), s.ref.String(), offset, m.Size, validator)
}

// get fetches u from offset, resuming with Range and, when the bytes
// already fetched came with a strong validator, If-Range: a server whose
// file changed answers the whole of it (200), and the fetch restarts.
func (c *Client) get(ctx context.Context, u, what string, offset, size int64, validator string) (modelfetch.Chunk, error) {
	req, err := c.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return modelfetch.Chunk{}, fmt.Errorf("hub: %w", err)
	}
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
		if validator != "" && !strings.HasPrefix(validator, "W/") {
			req.Header.Set("If-Range", validator)
		}
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return modelfetch.Chunk{}, fmt.Errorf("GET %s: %w", what, err)
	}
	v := resp.Header.Get("ETag")
	switch resp.StatusCode {
	case http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength != size {
			resp.Body.Close()
			return modelfetch.Chunk{}, fmt.Errorf("%s: %w: %d bytes sent for a file of %d", what, modelfetch.ErrSource, resp.ContentLength, size)
		}
		return modelfetch.Chunk{Body: resp.Body, Start: 0, Validator: v}, nil
	case http.StatusPartialContent:
		start, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || (total >= 0 && total != size) {
			resp.Body.Close()
			return modelfetch.Chunk{}, fmt.Errorf("%s: %w: Content-Range %q for a file of %d bytes", what, modelfetch.ErrSource, resp.Header.Get("Content-Range"), size)
		}
		return modelfetch.Chunk{Body: resp.Body, Start: start, Validator: v}, nil
	case http.StatusRequestedRangeNotSatisfiable:
		resp.Body.Close()
		if offset == size {
			return modelfetch.Chunk{Body: http.NoBody, Start: offset, Validator: validator}, nil
		}
		return modelfetch.Chunk{}, fmt.Errorf("%s: %w: range from %d refused (416) for a file of %d bytes", what, modelfetch.ErrSource, offset, size)
	}
	resp.Body.Close()
	if err := statusError(resp, what); err != nil {
		return modelfetch.Chunk{}, err
	}
	return modelfetch.Chunk{}, fmt.Errorf("GET %s: %s", what, resp.Status)
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*": -1).
func parseContentRange(s string) (start, total int64, err error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, fmt.Errorf("not a byte range")
	}
	span, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, fmt.Errorf("no total")
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return 0, 0, fmt.Errorf("no span")
	}
	if start, err = strconv.ParseInt(a, 10, 64); err != nil || start < 0 {
		return 0, 0, fmt.Errorf("bad start")
	}
	end, err := strconv.ParseInt(b, 10, 64)
	if err != nil || end < start {
		return 0, 0, fmt.Errorf("bad end")
	}
	if tot == "*" {
		return start, -1, nil
	}
	// RFC 9110 §14.4: the last byte lies inside the complete length, so a
	// negative total (or one the span runs past) is a broken header.
	if total, err = strconv.ParseInt(tot, 10, 64); err != nil || total <= end {
		return 0, 0, fmt.Errorf("bad total %q for a span ending at %d", tot, end)
	}
	return start, total, nil
}

// URLSource is a file at a plain HTTP(S) URL, off the hub: it resumes as
// a hub file does, and is checked against the SHA-256 the owner gives
// (or one the server lists in X-Linked-Etag).
func (c *Client) URLSource(u, sha256Hex string) modelfetch.Source {
	return &urlSource{c: c, u: u, sha: sha256Hex}
}

type urlSource struct {
	c   *Client
	u   string
	sha string
}

func (s *urlSource) Origin() string { return s.u }

func (s *urlSource) Describe(ctx context.Context) (modelfetch.Meta, error) {
	hc := *s.c.http()
	req, err := s.c.newRequest(ctx, http.MethodHead, s.u)
	if err != nil {
		return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("%s: %w", s.u, err))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return modelfetch.Meta{}, fmt.Errorf("HEAD %s: %w", s.u, err)
	}
	resp.Body.Close()
	if err := statusError(resp, s.u); err != nil {
		return modelfetch.Meta{}, err
	}
	m := modelfetch.Meta{Size: resp.ContentLength}
	if l := resp.Header.Get("X-Linked-Size"); l != "" {
		m.Size, _ = strconv.ParseInt(l, 10, 64)
	}
	if m.Size < 0 {
		return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("%s: the server gives no size for the file", s.u))
	}
	listed, ok := parseSHA256(normalizeETag(resp.Header.Get("X-Linked-Etag")))
	if s.sha != "" {
		want, valid := parseSHA256(s.sha)
		if !valid {
			return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("--sha256 %q is not 64 hex digits", s.sha))
		}
		if ok && want != listed {
			return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("%s: the server lists SHA-256 %x, not the %s asked for", s.u, listed, s.sha))
		}
		listed, ok = want, true
	}
	if !ok {
		return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("%s: a URL off the hub lists no SHA-256 to verify the file by: give it (--sha256)", s.u))
	}
	m.SHA256 = listed
	m.Version = normalizeETag(resp.Header.Get("ETag"))
	if m.Version == "" {
		m.Version = hex.EncodeToString(listed[:])
	}
	return m, nil
}

func (s *urlSource) Open(ctx context.Context, offset int64, m modelfetch.Meta, validator string) (modelfetch.Chunk, error) {
	return s.c.get(ctx, s.u, s.u, offset, m.Size, validator)
}
