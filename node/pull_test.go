package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// localHub is a server that behaves like the Hugging Face hub for repo
// owner/repo: HEAD and GET of /owner/repo/resolve/REV/FILE redirect (302)
// to /cdn/FILE with X-Repo-Commit, X-Linked-Etag (the SHA-256 it lists)
// and X-Linked-Size; /cdn serves the bytes with Range and If-Range. Its
// first GET of a file in cut breaks the connection halfway.
type localHub struct {
	*httptest.Server
	mu     sync.Mutex
	files  map[string][]byte
	listed map[string]string // SHA-256 listed, when not the bytes'
	cut    map[string]bool
	ranges []string
}

func newLocalHub(t *testing.T) *localHub {
	h := &localHub{files: map[string][]byte{}, listed: map[string]string{}, cut: map[string]bool{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *localHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rest, ok := strings.CutPrefix(r.URL.Path, "/owner/repo/resolve/"); ok {
		_, file, _ := strings.Cut(rest, "/")
		data, ok := h.files[file]
		if !ok {
			http.NotFound(w, r)
			return
		}
		sum := sha256.Sum256(data)
		listed := hex.EncodeToString(sum[:])
		if l := h.listed[file]; l != "" {
			listed = l
		}
		w.Header().Set("X-Repo-Commit", strings.Repeat("1f", 20))
		w.Header().Set("X-Linked-Etag", `"`+listed+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(data)))
		w.Header().Set("Location", "http://"+r.Host+"/cdn/"+file) // absolute, as the CDN is
		w.WriteHeader(http.StatusFound)
		return
	}
	file := strings.TrimPrefix(r.URL.Path, "/cdn/")
	data, ok := h.files[file]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.ranges = append(h.ranges, r.Header.Get("Range"))
	w.Header().Set("ETag", fmt.Sprintf(`"cdn-%x"`, sha256.Sum256(data)))
	if h.cut[file] && r.Method == http.MethodGet {
		delete(h.cut, file)
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(data))
}

// facadeClient is the owner's REST client of n.
func facadeClient(t *testing.T, n *Node) *control.HTTPClient {
	t.Helper()
	secret, err := control.ReadSecret(filepath.Join(n.cfg.StateDir, control.SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	return control.NewHTTPClient("http://"+n.HTTPAddr().String(), control.HTTPAuth{Secret: secret}, nil, control.ClientTimeouts{})
}

func inventoryNames(n *Node) []string {
	var names []string
	for _, e := range n.inventorySnapshot() {
		names = append(names, e.GetCanonicalModelRef())
	}
	return names
}

// TestPullFromHub: `meshcli pull` through the node's facade fetches a
// GGUF from a local hub — redirected, cut halfway and resumed with a
// Range — verifies it, places it in the models dir, where the inventory
// (and gossip) picks it up and the owner loads and serves it. A file
// whose bytes do not match the SHA-256 the hub lists is discarded and
// never listed.
func TestPullFromHub(t *testing.T) {
	model, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	hub := newLocalHub(t)
	hub.files["fortunes-pulled.gguf"] = model
	hub.cut["fortunes-pulled.gguf"] = true
	hub.files["bad.gguf"] = model
	hub.listed["bad.gguf"] = strings.Repeat("0a", 32)

	models := t.TempDir()
	// What the inventory holds is checked at each event as the node makes
	// it: the client reads the events later, by when the node may have
	// verified and listed the file.
	n, _ := startNodeWith(t, Config{ModelsDir: models, Models: []string{ReferenceModel}}, func(n *Node) {
		n.pullHook = func(e control.PullEvent) {
			if e.Phase != control.PullResolve && slices.Contains(inventoryNames(n), ModelName(e.File)) {
				t.Errorf("the inventory listed %s during %s, before it was verified", e.File, e.Phase)
			}
		}
	})
	c := facadeClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var phases []string
	done, err := c.Pull(ctx, control.PullRequest{Source: "owner/repo/fortunes-pulled.gguf", Endpoint: hub.URL}, func(e control.PullEvent) {
		if len(phases) == 0 || phases[len(phases)-1] != e.Phase {
			phases = append(phases, e.Phase)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(model)
	if done.Model != "fortunes-pulled" || done.SHA256 != hex.EncodeToString(sum[:]) || done.Total != int64(len(model)) {
		t.Fatalf("done event %+v", done)
	}
	if !slices.Equal(phases, []string{control.PullResolve, "download", "verify"}) {
		t.Fatalf("phases %v", phases)
	}
	hub.mu.Lock()
	ranges := slices.Clone(hub.ranges)
	hub.mu.Unlock()
	if len(ranges) != 2 || ranges[0] != "" || !strings.HasPrefix(ranges[1], "bytes=") {
		t.Fatalf("CDN ranges %q: want a whole GET cut halfway, then a resume", ranges)
	}
	if got, _ := os.ReadFile(filepath.Join(models, "fortunes-pulled.gguf")); !bytes.Equal(got, model) {
		t.Fatal("the pulled file differs from the hub's")
	}
	if !slices.Contains(inventoryNames(n), "fortunes-pulled") {
		t.Fatalf("inventory %v lacks the pulled model", inventoryNames(n))
	}
	if a := n.announcement(0); !slices.Contains(a.GetAvailableModels(), "fortunes-pulled") {
		t.Fatalf("gossip does not offer the pulled model: %v", a.GetAvailableModels())
	}
	if _, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "fortunes-pulled"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pulled model to load", func() bool { _, ok := n.models.get("fortunes-pulled"); return ok })
	resp := post(t, n, "/v1/completions", `{"model":"fortunes-pulled","prompt":"Love is","max_tokens":3}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("serving the pulled model: %d", resp.StatusCode)
	}

	// Again: the models dir has it, and the owner is told so.
	_, err = c.Pull(ctx, control.PullRequest{Source: "owner/repo/fortunes-pulled.gguf", Endpoint: hub.URL}, nil)
	if !errors.Is(err, control.ErrBadRequest) || !strings.Contains(err.Error(), "already has") {
		t.Fatalf("second pull: %v", err)
	}

	_, err = c.Pull(ctx, control.PullRequest{Source: "owner/repo/bad.gguf", Endpoint: hub.URL}, nil)
	if err == nil || !strings.Contains(err.Error(), "SHA-256") || !strings.Contains(err.Error(), strings.Repeat("0a", 32)) {
		t.Fatalf("pull with a wrong hash: %v", err)
	}
	if _, err := os.Stat(filepath.Join(models, "bad.gguf")); !os.IsNotExist(err) {
		t.Fatal("a file with the wrong hash reached the models dir")
	}
	if _, err := c.RefreshInventory(ctx); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(inventoryNames(n), "bad") {
		t.Fatal("the inventory lists the discarded file")
	}
	_, err = c.Pull(ctx, control.PullRequest{Source: "owner/repo/missing.gguf", Endpoint: hub.URL}, nil)
	if err == nil || !strings.Contains(err.Error(), "no such repo, revision or file") {
		t.Fatalf("pull of a missing file: %v", err)
	}
	_, err = c.Pull(ctx, control.PullRequest{Source: "not a ref"}, nil)
	if !errors.Is(err, control.ErrBadRequest) {
		t.Fatalf("pull of a bad ref: %v", err)
	}
}
