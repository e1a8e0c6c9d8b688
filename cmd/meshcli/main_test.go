package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"math/rand/v2"
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
	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// cliEnv runs meshcli in-process with a fixed clock and randomness.
type cliEnv struct {
	t       *testing.T
	cfgDir  string
	files   string    // where test inputs live
	clock   time.Time // meshcli's now; controltest.T0 when zero
	api     string
	globals []string
}

// newCLI is meshcli for the node at api. The local node's control
// credential is controltest.Secret, found in $MESHNODE_STATE_DIR as
// meshcli finds a real node's; no other state dir is looked in.
func newCLI(t *testing.T, api string) *cliEnv {
	t.Helper()
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, control.SecretFile), []byte(controltest.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHNODE_STATE_DIR", state)
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	return &cliEnv{t: t, cfgDir: filepath.Join(t.TempDir(), "meshcli"), api: api}
}

// run runs meshcli with args after the global flags and returns stdout,
// stderr and the exit status.
func (c *cliEnv) run(args ...string) (string, string, int) {
	c.t.Helper()
	var stdout, stderr bytes.Buffer
	code := c.runWith(&stdout, &stderr, args...)
	return c.normalise(stdout.String()), c.normalise(stderr.String()), code
}

// normalise replaces what varies between runs: the temporary config dir
// and the API's address.
func (c *cliEnv) normalise(s string) string {
	s = strings.ReplaceAll(s, c.cfgDir, "$CONFIG")
	if c.files != "" {
		s = strings.ReplaceAll(s, c.files, "$FILES")
	}
	return strings.ReplaceAll(s, c.api, "$API")
}

func (c *cliEnv) now() time.Time {
	if c.clock.IsZero() {
		return controltest.T0
	}
	return c.clock
}

func (c *cliEnv) runWith(stdout, stderr io.Writer, args ...string) int {
	e := &env{
		stdout: stdout, stderr: stderr,
		now:  c.now,
		rand: rand.NewChaCha8([32]byte{'m', 'e', 's', 'h', 'c', 'l', 'i'}),
		http: &http.Client{Timeout: 10 * time.Second},
	}
	full := append([]string{"meshcli", "--api", c.api, "--config-dir", c.cfgDir}, c.globals...)
	return run(context.Background(), append(full, args...), e)
}

// ok runs a command that must succeed and returns its stdout.
func (c *cliEnv) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("meshcli %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// fail runs a command that must fail and returns its one line of stderr.
func (c *cliEnv) fail(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code == 0 {
		c.t.Fatalf("meshcli %s succeeded: %s", strings.Join(args, " "), out)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "meshcli: ") {
		c.t.Fatalf("meshcli %s: error is not one line: %q", strings.Join(args, " "), errOut)
	}
	return errOut
}

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// transcript runs each command line and records its output, for one
// golden file per scenario.
func (c *cliEnv) transcript(lines ...[]string) string {
	c.t.Helper()
	var b strings.Builder
	for _, args := range lines {
		out, errOut, code := c.run(args...)
		b.WriteString(c.normalise("$ meshcli "+strings.Join(args, " ")) + "\n" + out + errOut)
		if code != 0 {
			b.WriteString("[exit " + string(rune('0'+code)) + "]\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fakeAPI serves the node API's read endpoints with canned answers, and
// the owner-control facade of n when given.
func fakeAPI(t *testing.T, n *controltest.Node) *httptest.Server {
	t.Helper()
	node, peer := controltest.Key(t, controltest.SeedNode), controltest.Key(t, controltest.SeedClient)
	status := map[string]any{
		"node_id": node.ID().String(), "did": node.DIDKey(), "version": "1.4.0", "uptime": "3h2m1s",
		"steward": map[string]any{"next_sequence": 42, "last_envelope": "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"},
		"models": []any{map[string]any{"name": "meshnode-fortunes-q8_0", "context": 2048, "size_bytes": 13_107_200, "draft": "lookup"},
			map[string]any{"name": "meshnode-fortunes-f16", "context": 256, "size_bytes": 27_721_728}},
		"peers": []any{
			map[string]any{"id": peer.ID().String(), "addrs": []string{"192.168.1.20:9338", "10.0.0.2:9338"}, "rtt_ms": 1.25,
				"models": []string{"qwen2-0.5b", "tinyllama"}, "admission": "accepting"},
			map[string]any{"id": controltest.Key(t, 30).ID().String(), "addrs": []string{"192.168.1.21:9338"}, "models": []string{},
				"admission": "INFERENCE_ADMISSION_STATE_REMOTE_PAUSED"}, // as an older node says it
		},
		"meter": map[string]any{"selected": "estimator", "why": "no energy counter on this machine", "forced": false},
		"grants": map[string]any{"honoured": true, "unresolved": []any{map[string]any{
			"record": 17, "request_id": "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00",
			"caller": "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw", "backend": "cpu:meshnode-fortunes-q8_0",
			"ceiling_uj": 5_000_000, "authorised_at": "2026-03-01T11:59:58Z"}}},
	}
	models := map[string]any{"object": "list", "data": []any{
		map[string]any{"id": "meshnode-fortunes-q8_0", "object": "model", "owned_by": node.ID().String(), "local": true},
		map[string]any{"id": "qwen2-0.5b", "object": "model", "owned_by": peer.ID().String(), "local": false,
			"hosts": []string{peer.ID().String()}},
	}}
	mux := http.NewServeMux()
	serveJSON := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(v)
		}
	}
	mux.HandleFunc("GET /api/status", serveJSON(status))
	mux.HandleFunc("GET /v1/models", serveJSON(models))
	mux.HandleFunc("GET /api/invite", serveJSON(map[string]string{"token": "eyJpZCI6Imludml0ZSJ9"}))
	if n != nil {
		mux.Handle(control.HTTPPrefix+"/", n.Server.HTTPHandler())
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"message":"no route for ` + r.Method + " " + r.URL.Path + `","type":"invalid_request_error","code":"unknown_url"}}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestReadCommands: status, peers, models and invite read the local
// node's API.
func TestReadCommands(t *testing.T) {
	n := controltest.Start(t, controltest.Options{})
	c := newCLI(t, fakeAPI(t, n).URL)
	golden(t, "read.txt", c.transcript(
		[]string{"status"},
		[]string{"peers"},
		[]string{"peers", "--json"},
		[]string{"models"},
		[]string{"models", "--no-scan", "--json"},
		[]string{"invite"},
	))
	var st map[string]any
	if err := json.Unmarshal([]byte(c.ok("status", "--json")), &st); err != nil || st["version"] != "1.4.0" {
		t.Fatalf("status --json: %v %v", st, err)
	}
}

// TestEndpointRefusedByAPIReaders: the commands that read a node's HTTP
// API refuse --endpoint (and MESHCLI_ENDPOINT), which they cannot honour,
// instead of reading the local node and answering about it.
func TestEndpointRefusedByAPIReaders(t *testing.T) {
	n := controltest.Start(t, controltest.Options{})
	c := newCLI(t, fakeAPI(t, n).URL)
	c.globals = []string{"--endpoint", n.Token(t)}
	for _, args := range [][]string{{"status"}, {"peers"}, {"models"}, {"invite"}, {"status", "--json"}} {
		msg := c.fail(args...)
		if !strings.Contains(msg, "`meshcli "+args[0]+"` reads a node's HTTP API") || !strings.Contains(msg, "does not reach") ||
			!strings.Contains(msg, "scan-refresh") {
			t.Errorf("meshcli --endpoint … %s: %q", strings.Join(args, " "), msg)
		}
	}
	c.globals = nil
	t.Setenv("MESHCLI_ENDPOINT", n.Token(t))
	if msg := c.fail("status"); !strings.Contains(msg, "MESHCLI_ENDPOINT") {
		t.Errorf("with MESHCLI_ENDPOINT: %q", msg)
	}
}

// TestOwnerCommandsLocal: owner control of the local node through its
// REST facade.
func TestOwnerCommandsLocal(t *testing.T) {
	n := controltest.Start(t, controltest.Options{})
	c := newCLI(t, fakeAPI(t, n).URL)
	golden(t, "owner-local.txt", ownerTranscript(t, c, n))
}

// TestLocalCredential: meshcli finds the local node's control credential
// in its state dir, or is told where with --control-secret; without one
// the node refuses, and meshcli says where it looked and what to do.
func TestLocalCredential(t *testing.T) {
	n := controltest.Start(t, controltest.Options{})
	c := newCLI(t, fakeAPI(t, n).URL)
	c.ok("config", "get")

	elsewhere := t.TempDir()
	t.Setenv("MESHNODE_STATE_DIR", elsewhere)
	msg := c.fail("config", "get")
	for _, want := range []string{"UNAUTHORIZED", "local credential", elsewhere, "--control-secret"} {
		if !strings.Contains(msg, want) {
			t.Errorf("without a credential: %q lacks %q", msg, want)
		}
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(controltest.Secret), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("--control-secret", file, "config", "get")
	// A credential others could read proves nothing: refused before use.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg := c.fail("--control-secret", file, "config", "get"); !strings.Contains(msg, "chmod 600") {
		t.Errorf("a 0644 credential: %q", msg)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte(strings.Repeat("0", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := c.fail("--control-secret", wrong, "load", "alpha"); !strings.Contains(msg, "not this node's") {
		t.Errorf("a wrong credential: %q", msg)
	}
}

// ownerTranscript runs ownerScript against n. The node loads a model in
// the background after acknowledging the load, so the script waits for
// alpha to be loaded before the ensure that must find it so (without the
// wait, a fast run answered "loading" and the golden file differed).
func ownerTranscript(t *testing.T, c *cliEnv, n *controltest.Node) string {
	t.Helper()
	script := ownerScript(t, c)
	i := slices.IndexFunc(script, func(l []string) bool { return slices.Equal(l, []string{"load", "alpha"}) })
	if i < 0 {
		t.Fatal("the owner script no longer loads alpha")
	}
	out := c.transcript(script[:i+1]...)
	deadline := time.Now().Add(10 * time.Second)
	for inst, _ := n.Runtime.State("alpha"); inst == ""; inst, _ = n.Runtime.State("alpha") {
		if time.Now().After(deadline) {
			t.Fatal("alpha not loaded 10s after meshcli load")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out + c.transcript(script[i+1:]...)
}

// ownerScript exercises every owner-control command; its output is the
// same whichever way meshcli reaches the node.
func ownerScript(t *testing.T, c *cliEnv) [][]string {
	dir := t.TempDir()
	c.files = dir
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	typo := filepath.Join(dir, "typo.json")
	os.WriteFile(good, []byte(`{"version": 2, "models": [{"model": "alpha", "ctx_size": 4096}]}`), 0o644)
	os.WriteFile(bad, []byte(`{"config_toml": "reject"}`), 0o644)
	os.WriteFile(typo, []byte(`{"modles": []}`), 0o644)
	return [][]string{
		{"scan-refresh"},
		{"config", "get"},
		{"config", "apply", good},
		{"config", "apply", "--revision", "0", good},
		{"config", "apply", bad},
		{"config", "apply", typo},
		{"config", "get", "--json"},
		{"load", "alpha"},
		{"ensure", "alpha"},
		{"unload", "zeta"},
		{"drain", "--timeout", "2s", "alpha"},
		{"load", "nonesuch"},
		{"load"},
		{"drain", "--timeout", "10ms", "alpha"},
	}
}

// TestOwnerCommandsOverEndpoint: meshcli on one machine drives a node it
// owns over mesh-llm-control/1, as its own client identity.
func TestOwnerCommandsOverEndpoint(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1") // no local node is needed
	c.ok("auth", "init", "--label", "test-laptop")
	ownerKey, err := ownerDirFor(c).OwnerKey()
	if err != nil {
		t.Fatal(err)
	}
	n := controltest.Start(t, controltest.Options{Config: trusting(ownerKey)})
	c.globals = []string{"--endpoint", n.Token(t)}
	golden(t, "owner-endpoint.txt", ownerTranscript(t, c, n))
}

// TestWatch: config watch prints the revisions applied while it runs,
// over either path.
func TestWatch(t *testing.T) {
	c := newCLI(t, "")
	c.ok("auth", "init", "--label", "test-laptop")
	ownerKey, err := ownerDirFor(c).OwnerKey()
	if err != nil {
		t.Fatal(err)
	}
	n := controltest.Start(t, controltest.Options{Config: trusting(ownerKey)})
	c.api = fakeAPI(t, n).URL
	for _, path := range []struct {
		name    string
		globals []string
	}{{"local", nil}, {"endpoint", []string{"--endpoint", n.Token(t)}}} {
		name, globals := path.name, path.globals
		t.Run(name, func(t *testing.T) {
			c.globals = globals
			out := &syncBuffer{}
			done := make(chan int, 1)
			go func() { done <- c.runWith(out, out, "config", "watch", "--snapshot", "--count", "2") }()
			controltest.WaitFor(t, "the watch to start", func() bool { return strings.Contains(out.String(), "(current)") })
			snap, err := n.Owned(t).GetConfig(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			cfg := &nodev1.NodeConfigSnapshot{Version: uint32(snap.GetRevision()) + 10}
			if _, err := n.Owned(t).ApplyConfig(context.Background(), snap.GetRevision(), cfg); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit %d: %s", code, out)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("watch did not end after one update")
			}
			golden(t, "watch-"+name+".txt", c.normalise(out.String()))
		})
	}
}

// TestWatchSnapshotCounts: config watch --snapshot --count 1 prints the
// current revision and exits (the snapshot is a revision printed; it used
// to wait for an update that might never come).
func TestWatchSnapshotCounts(t *testing.T) {
	n := controltest.Start(t, controltest.Options{})
	c := newCLI(t, fakeAPI(t, n).URL)
	done := make(chan struct{})
	var out, errOut string
	var code int
	go func() {
		defer close(done)
		out, errOut, code = c.run("config", "watch", "--snapshot", "--count", "1")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("config watch --snapshot --count 1 did not exit after the snapshot")
	}
	if code != 0 || strings.Count(out, "(current)") != 1 || strings.Contains(out, "(applied)") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
}

// syncBuffer is a buffer one goroutine writes while another reads.
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

func ownerDirFor(c *cliEnv) owner.Dir { return owner.Dir(c.cfgDir) }

// trusting makes a node trust meshcli's owner key k as well as
// controltest's owner.
func trusting(k *identity.Key) func(*control.Config) {
	return func(cfg *control.Config) {
		cfg.Trust = owner.NewTrust(append(cfg.Trust.Keys(), owner.KeyOf(k))...)
	}
}
