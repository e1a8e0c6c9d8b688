package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// facadeOf is a client of n's REST facade holding the credential n wrote
// to its state dir, as meshcli run as the node's user has it.
func facadeOf(t *testing.T, n *Node) *control.HTTPClient {
	t.Helper()
	secret, err := control.ReadSecret(filepath.Join(n.cfg.StateDir, control.SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	return control.NewHTTPClient("http://"+n.HTTPAddr().String(), control.HTTPAuth{Secret: secret}, nil, control.ClientTimeouts{})
}

// TestAttackLocalTakeover: an unowned node took config and lifecycle
// writes from any local process: a staged config naming the attacker as
// owner, and models loaded from any path. Now the REST facade requires
// the credential only the node's user can read; and even with it, owner
// control cannot stage who controls the node, where its state lives,
// unbounded values, or a model outside the models dir.
func TestAttackLocalTakeover(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	state, models, outside := t.TempDir(), t.TempDir(), t.TempDir()
	blob, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(models, "fortunes.gguf"), filepath.Join(outside, "private.gguf")} {
		if err := os.WriteFile(p, blob, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "private.gguf"), filepath.Join(models, "escape.gguf")); err != nil {
		t.Fatal(err)
	}
	n, _ := startNode(t, Config{StateDir: state, ModelsDir: models, Models: []string{ReferenceModel}})
	base := "http://" + n.HTTPAddr().String() + control.HTTPPrefix
	staged := OwnerConfigPath(state)

	// Any local process: no credential, no write, no read.
	for _, tc := range []struct{ path, body string }{
		{"/config", `{"expected_revision":"0","config":{"version":1,"config_toml":"[control]\nowner_keys = [\"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\"]\n"}}`},
		{"/models/load", `{"model":{"canonical_model_ref":"/etc/passwd"}}`},
		{"/models/unload", `{"model":{"canonical_model_ref":"mesh-reference"}}`},
	} {
		resp, err := http.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "local credential") {
			t.Fatalf("POST %s without the credential: %d %s", tc.path, resp.StatusCode, b)
		}
	}
	if resp, err := http.Get(base + "/config"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET /config without the credential: %v %v", resp, err)
	}
	if _, err := os.Stat(staged); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a config was staged: %v", err)
	}

	// The node's own user: bounded by what owner control may do.
	c := facadeOf(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, toml := range []string{
		"[control]\nowner_keys = [\"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\"]\n",
		"[control]\nownership = \"/tmp/planted.ownership\"\n",
		"state_dir = \"/tmp/elsewhere\"\n",
		"models_dir = \"/\"\n",
		"models = [\"/etc/passwd\"]\n",
		"[[model]]\npath = \"../../../../etc/hostname\"\n",
		"[api]\nmax_body_bytes = 9223372036854775807\n",
		"[api]\nqueue_depth = 100000000\n",
	} {
		res, err := c.ApplyConfig(ctx, 0, &nodev1.NodeConfigSnapshot{Version: 1, ConfigToml: proto.String(toml)})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetSuccess() {
			t.Fatalf("staged %q", toml)
		}
	}
	if _, err := os.Stat(staged); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a config was staged: %v", err)
	}
	// What it may change, it can.
	res, err := c.ApplyConfig(ctx, 0, &nodev1.NodeConfigSnapshot{Version: 1, Models: []*nodev1.NodeModelEntry{{Model: "mesh-reference"}},
		ConfigToml: proto.String("log_level = \"debug\"\n[api]\nqueue_depth = 32\n")})
	if err != nil || !res.GetSuccess() {
		t.Fatalf("a valid config: %v %v", res, err)
	}

	for _, ref := range []string{"/etc/passwd", "../../../../etc/hostname", filepath.Join(outside, "private.gguf"), "escape", "escape.gguf", "."} {
		_, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: ref}})
		if !errors.Is(err, control.ErrBadRequest) {
			t.Errorf("load %q: %v, want BAD_REQUEST", ref, err)
		}
	}
	if _, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "fortunes"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fortunes to load", func() bool { _, ok := n.models.get("fortunes"); return ok })
	a := n.announcement(0)
	for _, m := range append(a.GetHostedModels(), a.GetAvailableModels()...) {
		if strings.ContainsAny(m, `/\`) {
			t.Errorf("a path is advertised: %q", m)
		}
	}
}

// TestAttackPlantedStagedConfig: a staged config that names owners or a
// state dir — written before owner control checked what it stages, or by
// hand — stops the node from starting, naming the key.
func TestAttackPlantedStagedConfig(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(OwnerConfigPath(state), []byte("[control]\nowner_keys = [\"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfigFiles("", state)
	if !errors.Is(err, ErrNotStageable) || !strings.Contains(err.Error(), "control.owner_keys") {
		t.Fatalf("LoadConfigFiles: %v", err)
	}
}

// TestConfigRoundTrip: what `config get` shows of a node serving a model
// given by path (--model) applies back unchanged.
func TestConfigRoundTrip(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	n, _ := startNode(t, Config{Models: []string{fortunesPath(t)}})
	c := facadeOf(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err := c.GetConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.ApplyConfig(ctx, snap.GetRevision(), snap.GetConfig())
	if err != nil || !res.GetSuccess() {
		t.Fatalf("applying back %v: %v %v", snap.GetConfig(), res, err)
	}
}

// TestAttackDiskFull: a serve whose receipt the journal cannot record
// because the disk is full is answered 503 journal_unavailable, as
// docs/api.md promises (it was 500 internal_error), and once there is
// room again the node serves, its journal intact. The state dir is a
// small tmpfs, so the test needs root.
func TestAttackDiskFull(t *testing.T) {
	state := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", state).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", state).Run() })
	n, stop := startNode(t, Config{StateDir: state, Models: []string{ReferenceModel}})
	generate(t, n, "/v1/completions", `{"model":"mesh-reference","prompt":"Love is","max_tokens":2}`)

	filler, err := os.Create(filepath.Join(state, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	filler.Close()
	// The journal's last page still holds a few dozen records.
	full := false
	for i := 0; i < 200 && !full; i++ {
		resp := post(t, n, "/v1/completions", `{"model":"mesh-reference","prompt":"Love is","max_tokens":2}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
		case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), `"code":"journal_unavailable"`) && resp.Header.Get("Retry-After") != "":
			full = true
		default:
			t.Fatalf("serve on a full disk: %d %s", resp.StatusCode, b)
		}
	}
	if !full {
		t.Fatal("200 serves on a full disk all succeeded")
	}
	if err := os.Remove(filepath.Join(state, "filler")); err != nil {
		t.Fatal(err)
	}
	generate(t, n, "/v1/completions", `{"model":"mesh-reference","prompt":"Love is","max_tokens":2}`)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	startNode(t, Config{StateDir: state, Models: []string{ReferenceModel}}) // the journal replays whole
}
