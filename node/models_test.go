package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
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

// syncBuffer is a log sink the node writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logTo makes a test node log to buf at info and above.
func logTo(buf *syncBuffer) func(*Node) {
	return func(n *Node) { n.log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})) }
}

func getJSON(t *testing.T, n *Node, path string, out any) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// TestNoModel: a node with no model configured and no built-in model to
// find serves no model (never the reference engine in its place) and says
// how to get one: at WARN in its log, in /v1/models, in the 404 a request
// gets, and in /api/status. Once its owner loads a model the hint goes.
func TestNoModel(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	models := t.TempDir()
	var logs syncBuffer
	n, _ := startNodeWith(t, Config{ModelsDir: models}, logTo(&logs))

	if names := n.models.names(); len(names) != 0 {
		t.Fatalf("serving %v, want nothing", names)
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "meshcli load NAME") ||
		!strings.Contains(got, models) || !strings.Contains(got, BuiltinModelFile) {
		t.Fatalf("the log does not say at WARN how to get a model:\n%s", got)
	}
	var list struct {
		Data []any  `json:"data"`
		Hint string `json:"hint"`
	}
	getJSON(t, n, "/v1/models", &list)
	if len(list.Data) != 0 || !strings.Contains(list.Hint, "--model FILE") {
		t.Fatalf("/v1/models = %+v, want no model and the hint", list)
	}
	resp := post(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "model_not_found") ||
		!strings.Contains(string(b), "no model is available") || !strings.Contains(string(b), "meshcli load NAME") {
		t.Fatalf("a request: %d %s, want a 404 saying how to get a model", resp.StatusCode, b)
	}
	var st Status
	getJSON(t, n, "/api/status", &st)
	if !strings.Contains(st.NoModel, "meshcli load NAME") {
		t.Fatalf("/api/status no_model = %q", st.NoModel)
	}

	// A model dropped into the models dir and loaded by name is served,
	// and the hint goes.
	blob, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models, "fortunes.gguf"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	c := facadeOf(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "fortunes"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the loaded model to be served", func() bool { return slices.Contains(n.models.names(), "fortunes") })
	generate(t, n, "/v1/completions", `{"model":"fortunes","prompt":"Love is","max_tokens":2}`)
	list.Hint = ""
	getJSON(t, n, "/v1/models", &list)
	st = Status{}
	getJSON(t, n, "/api/status", &st)
	if list.Hint != "" || st.NoModel != "" {
		t.Fatalf("with a model served, the hint stays: %q, %q", list.Hint, st.NoModel)
	}
}

// TestBuiltinModelFound: the built-in model is found wherever a user's
// binary may be run from: in the models dir or the state dir, beside the
// executable (its dir, models/, ../models/ for a checkout's bin/, and
// ../share/meshnode/models for an install prefix), and in the checkout
// that built it, which is where a test binary (built in a temporary dir
// and run in its package's dir, where no models/ is) finds it.
func TestBuiltinModelFound(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "")
	state := t.TempDir()
	cfg := Config{StateDir: state, ModelsDir: filepath.Join(state, "models")}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	bin := filepath.Dir(exe)
	paths := cfg.builtinModelPaths()
	for _, dir := range []string{cfg.ModelsDir, state, bin, filepath.Join(bin, "models"), filepath.Join(bin, "..", "models"),
		filepath.Join(bin, "..", "share", "meshnode", "models"), filepath.Dir(fortunesPath(t)), "/usr/share/meshnode/models"} {
		if !slices.Contains(paths, filepath.Join(dir, BuiltinModelFile)) {
			t.Errorf("the built-in model is not looked for in %s (looked in %v)", dir, paths)
		}
	}

	b, ok := cfg.builtinSpec()
	if !ok || b.Path != fortunesPath(t) || b.Name != fortunesModel {
		t.Fatalf("from a test binary: %+v %v, want the checkout's %s", b, ok, fortunesPath(t))
	}
	// The models dir comes first: a copy there is the one served.
	blob, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.ModelsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(cfg.ModelsDir, BuiltinModelFile)
	if err := os.WriteFile(mine, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, ok := cfg.builtinSpec(); !ok || b.Path != mine {
		t.Fatalf("with a copy in the models dir: %+v", b)
	}

	// MESHNODE_DEFAULT_MODEL is the only place looked, and "none" is none.
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	if b, ok := cfg.builtinSpec(); ok {
		t.Fatalf("MESHNODE_DEFAULT_MODEL=none found %s", b.Path)
	}
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	if b, ok := cfg.builtinSpec(); !ok || b.Path != fortunesPath(t) {
		t.Fatalf("MESHNODE_DEFAULT_MODEL=path: %+v", b)
	}
}

// TestModelNames: a model is named by its file's base name, or its
// configured name, never by a path: --model takes a path, a name in the
// models dir (with or without .gguf), or the built-in default's name,
// and serves each under its base name; owner control loads the built-in
// model by name even when the node serves another, takes NAME.gguf as
// NAME, and answers a path with the name to use instead.
func TestModelNames(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	models := t.TempDir()
	blob, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	for _, p := range []string{filepath.Join(models, "fortunes-b.gguf"), filepath.Join(models, "fortunes-c.gguf"), filepath.Join(other, "by-path.gguf")} {
		if err := os.WriteFile(p, blob, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{ModelsDir: models, Models: []string{"fortunes-b", "fortunes-c.gguf", filepath.Join(other, "by-path.gguf")}}
	n, _ := startNode(t, cfg)
	want := []string{"fortunes-b", "fortunes-c", "by-path"}
	if got := n.models.names(); !slices.Equal(got, want) {
		t.Fatalf("served as %v, want %v", got, want)
	}
	for _, name := range want {
		generate(t, n, "/v1/completions", `{"model":"`+name+`","prompt":"Love is","max_tokens":1}`)
	}

	c := facadeOf(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	load := func(ref string) (control.Ack, error) {
		return c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: ref}})
	}
	if ack, err := load(fortunesModel); err != nil || ack.Target.GetCanonicalModelRef() != fortunesModel {
		t.Fatalf("load %s (the built-in model, by name): %+v %v", fortunesModel, ack, err)
	}
	waitFor(t, "the built-in model to be served", func() bool { return slices.Contains(n.models.names(), fortunesModel) })
	if _, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentUnload, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "fortunes-c"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fortunes-c to be unloaded", func() bool { return !slices.Contains(n.models.names(), "fortunes-c") })
	if ack, err := load("fortunes-c.gguf"); err != nil || ack.Target.GetCanonicalModelRef() != "fortunes-c" {
		t.Fatalf("load fortunes-c.gguf: %+v %v, want it loaded as fortunes-c", ack, err)
	}
	waitFor(t, "fortunes-c to be served again", func() bool { return slices.Contains(n.models.names(), "fortunes-c") })
	for _, name := range n.models.names() {
		if strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".gguf") {
			t.Errorf("a model is served as %q", name)
		}
	}
	_, err = load(filepath.Join(models, "fortunes-b.gguf"))
	if err == nil || !strings.Contains(err.Error(), `"fortunes-b"`) || !strings.Contains(err.Error(), "never by path") {
		t.Fatalf("load by path: %v, want a refusal naming fortunes-b", err)
	}
	_, err = load("nonesuch")
	if err == nil || !strings.Contains(err.Error(), "loadable here: ") || !strings.Contains(err.Error(), fortunesModel) {
		t.Fatalf("load nonesuch: %v, want what is loadable", err)
	}
}
