package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
)

// puller pulls "owner/repo/m.gguf" of 3 MiB in three steps and refuses
// anything else.
type puller struct {
	got   control.PullRequest
	model string // the model the file is served as ("m")
}

func (p *puller) Pull(_ context.Context, req control.PullRequest, progress func(control.PullEvent)) (control.PullEvent, error) {
	p.got = req
	if req.Source != "owner/repo/m.gguf" {
		return control.PullEvent{}, control.ErrBadPull
	}
	progress(control.PullEvent{Phase: control.PullResolve, File: "m.gguf", Source: "hub/owner/repo/m.gguf"})
	for i := int64(1); i <= 3; i++ {
		progress(control.PullEvent{Phase: "download", File: "m.gguf", Done: i << 20, Total: 3 << 20, Rate: 1 << 20, ETASeconds: float64(3 - i)})
	}
	model := p.model
	if model == "" {
		model = "m"
	}
	return control.PullEvent{File: model + ".gguf", Model: model, Source: "hub/owner/repo/m.gguf", Total: 3 << 20, Resumed: 1 << 20,
		SHA256: strings.Repeat("ab", 32), WeightsDigest: strings.Repeat("cd", 32)}, nil
}

// TestPullCommand: pull passes the source, the hub token and endpoint
// from HF_TOKEN and HF_ENDPOINT, and prints where the model came from
// and how to load it; --endpoint is refused.
func TestPullCommand(t *testing.T) {
	p := &puller{}
	n := controltest.Start(t, controltest.Options{Config: func(c *control.Config) { c.Pulls = p }})
	c := newCLI(t, n.HTTP(t).URL)
	t.Setenv("HF_TOKEN", "hf_abc")
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:9")
	out := c.ok("pull", "owner/repo/m.gguf")
	for _, want := range []string{"Pulled m.gguf (3.0 MiB, 1.0 MiB of it from an earlier pull)", strings.Repeat("ab", 32), "meshcli load m"} {
		if !strings.Contains(out, want) {
			t.Errorf("pull output lacks %q:\n%s", want, out)
		}
	}
	if p.got.Token != "hf_abc" || p.got.Endpoint != "http://127.0.0.1:9" {
		t.Fatalf("request %+v: want HF_TOKEN and HF_ENDPOINT passed", p.got)
	}
	if msg := c.fail("pull", "owner/repo/other.gguf"); !strings.Contains(msg, "BAD_REQUEST") {
		t.Errorf("refused pull: %s", msg)
	}
	if msg := c.fail("--endpoint", "ctl1.x", "pull", "owner/repo/m.gguf"); !strings.Contains(msg, "local node only") {
		t.Errorf("--endpoint: %s", msg)
	}
	// --load loads what was pulled, by the name the node gives it.
	p.model = "alpha"
	out = c.ok("pull", "--load", "owner/repo/m.gguf")
	if strings.Contains(out, "Load it with") {
		t.Errorf("pull --load still says how to load:\n%s", out)
	}
	controltest.WaitFor(t, "the pulled model to load", func() bool { inst, _ := n.Runtime.State("alpha"); return inst != "" })
}

// TestProgressLine: on a terminal every event redraws one line; elsewhere
// a line is printed at each phase and then every few seconds.
func TestProgressLine(t *testing.T) {
	ev := func(phase string, done int64) control.PullEvent {
		return control.PullEvent{Phase: phase, File: "m.gguf", Done: done, Total: 4 << 20, Rate: 1 << 20, ETASeconds: float64(4<<20-done) / (1 << 20)}
	}
	var term bytes.Buffer
	p := newProgressLine(&term, true, time.Now)
	p.show(ev("download", 1<<20))
	p.show(ev("download", 2<<20))
	p.end()
	if got := term.String(); strings.Count(got, "\r") != 2 || strings.Count(got, "\n") != 1 ||
		!strings.Contains(got, "m.gguf: download 2.0 MiB / 4.0 MiB (50%) at 1.0 MiB/s, 2s left") {
		t.Fatalf("terminal output %q", got)
	}
	var plain bytes.Buffer
	now := time.Unix(0, 0)
	p = newProgressLine(&plain, false, func() time.Time { return now })
	for i := range 12 { // an event a second for 12 s
		now = time.Unix(int64(i), 0)
		p.show(ev("download", int64(i)<<18))
	}
	now = now.Add(time.Second)
	p.show(ev("verify", 0))
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 4 || strings.Contains(plain.String(), "\r") || !strings.Contains(lines[3], "verify") {
		t.Fatalf("plain output: %q (want lines at 0s, 5s, 10s and the verify phase)", lines)
	}
}

// holdingPuller also lists what the mesh holds.
type holdingPuller struct{ puller }

func (holdingPuller) Holders(context.Context) (control.Holdings, error) {
	return control.Holdings{ServeFiles: true, Models: []control.HeldModel{
		{Model: "qwen2-0.5b", SizeBytes: 400 << 20, Holders: []string{strings.Repeat("ab", 32), strings.Repeat("cd", 32)}}}}, nil
}

// TestModelsShowsHolders: `meshcli models` lists what mesh peers hold for
// others to pull, and which peers; a node without the list shows none.
func TestModelsShowsHolders(t *testing.T) {
	n := controltest.Start(t, controltest.Options{Config: func(c *control.Config) { c.Pulls = &holdingPuller{} }})
	c := newCLI(t, fakeAPI(t, n).URL)
	out := c.ok("models")
	for _, want := range []string{"Held in the mesh, to pull with `meshcli pull mesh:MODEL`", "qwen2-0.5b", "400.0 MiB", short(strings.Repeat("ab", 32)) + ", " + short(strings.Repeat("cd", 32))} {
		if !strings.Contains(out, want) {
			t.Errorf("models lacks %q:\n%s", want, out)
		}
	}
	if out := c.ok("models", "--json"); !strings.Contains(out, `"held_in_mesh"`) || !strings.Contains(out, `"size_bytes": 419430400`) {
		t.Errorf("models --json:\n%s", out)
	}
	plain := controltest.Start(t, controltest.Options{})
	if out := newCLI(t, fakeAPI(t, plain).URL).ok("models"); strings.Contains(out, "Held in the mesh") {
		t.Errorf("a node without holders shows a section:\n%s", out)
	}
}

// TestPullAgainstNode: `meshcli pull --load` against a real node, from a
// local server that answers as the hub does: the node fetches and
// verifies the file, meshcli prints plain progress lines (stderr is no
// terminal) and the result, and the model is loaded and served.
func TestPullAgainstNode(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	model, err := os.ReadFile(filepath.Join("..", "..", "models", node.BuiltinModelFile))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(model)
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/owner/repo/resolve/") || !strings.HasSuffix(r.URL.Path, "/fortunes-hub.gguf") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", strings.Repeat("ab", 20))
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(model)))
		http.ServeContent(w, r, "fortunes-hub.gguf", time.Time{}, bytes.NewReader(model))
	}))
	defer hub.Close()

	c := newCLI(t, "http://127.0.0.1:1")
	models := t.TempDir()
	n := startDaemon(t, node.Config{StateDir: os.Getenv("MESHNODE_STATE_DIR"), ModelsDir: models, Models: []string{node.ReferenceModel}})
	c.api = "http://" + n.HTTPAddr().String()
	t.Setenv("HF_ENDPOINT", hub.URL)
	stdout, stderr, code := c.run("pull", "--load", "owner/repo/fortunes-hub.gguf")
	if code != 0 {
		t.Fatalf("pull: %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "Pulled fortunes-hub.gguf (14.8 MiB) from") || !strings.Contains(stdout, hex.EncodeToString(sum[:])) {
		t.Fatalf("pull output:\n%s", stdout)
	}
	if !strings.Contains(stderr, "fortunes-hub.gguf: from ") || !strings.Contains(stderr, "fortunes-hub.gguf: download ") ||
		!strings.Contains(stderr, "fortunes-hub.gguf: verify ") || strings.Contains(stderr, "\r") || !strings.Contains(stderr, "load fortunes-hub: ") {
		t.Fatalf("progress on a non-terminal:\n%s", stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(models, "fortunes-hub.gguf")); !bytes.Equal(got, model) {
		t.Fatal("the pulled file differs")
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(c.ok("models", "--no-scan"), "fortunes-hub") {
		if time.Now().After(deadline) {
			t.Fatal("the pulled model is not served")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
