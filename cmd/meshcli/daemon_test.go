package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/identity"
)

// startDaemon runs a real meshnode in-process on loopback with cfg (its
// state dir, models, owners) and returns it once it serves.
func startDaemon(t *testing.T, cfg node.Config) *node.Node {
	t.Helper()
	cfg.HTTPAddr, cfg.QUICAddr, cfg.Discovery = "127.0.0.1:0", "127.0.0.1:0", "none"
	cfg.Energy = node.EnergyConfig{Meter: "estimator", EstimatorWatts: 5}
	n, err := node.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-n.Ready():
	case err := <-done:
		t.Fatalf("node stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("node not ready")
	}
	return n
}

// TestAgainstRunningNode drives a real meshnode (started in-process, on
// loopback) with meshcli: it reads the node's status, models and invite
// through the API, and then, as the node's owner, drives it over
// mesh-llm-control/1 with the endpoint token the node wrote.
func TestAgainstRunningNode(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	state := t.TempDir()
	nodeKey, _, err := identity.LoadOrCreateKey(state)
	if err != nil {
		t.Fatal(err)
	}
	// The owner: meshcli's own keys, and a certificate for the node.
	c := newCLI(t, "http://127.0.0.1:1") // the node's address comes once it runs
	c.clock = time.Now()
	c.ok("auth", "init")
	ownerID := strings.TrimSpace(firstField(c.ok("auth", "status"), "did:key:"))
	c.ok("auth", "sign-node", "-o", filepath.Join(state, "node.ownership"), nodeKey.ID().String())

	n := startDaemon(t, node.Config{StateDir: state, Models: []string{node.ReferenceModel},
		Control: node.ControlConfig{OwnerKeys: []string{ownerID}}})
	c.api = "http://" + n.HTTPAddr().String()

	if out := c.ok("status"); !strings.Contains(out, nodeKey.ID().String()[:12]) || !strings.Contains(out, "mesh-reference") {
		t.Fatalf("status:\n%s", out)
	}
	if out := c.ok("models"); !strings.Contains(out, "mesh-reference") {
		t.Fatalf("models:\n%s", out)
	}
	if out := strings.TrimSpace(c.ok("invite")); !strings.HasPrefix(out, "ey") {
		t.Fatalf("invite: %q", out)
	}
	tok, err := os.ReadFile(filepath.Join(state, "control.token"))
	if err != nil {
		t.Fatal(err)
	}
	ep := []string{"--endpoint", strings.TrimSpace(string(tok))}
	if out := c.ok(append(ep, "config", "get")...); !strings.Contains(out, "mesh-reference") {
		t.Fatalf("config get over the control lane:\n%s", out)
	}
	c.ok(append(ep, "drain", "mesh-reference")...)
	deadline := time.Now().Add(20 * time.Second)
	for strings.Contains(c.ok("models"), "mesh-reference") {
		if time.Now().After(deadline) {
			t.Fatal("the drained model is still served")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.ok(append(ep, "load", "mesh-reference")...)
	for !strings.Contains(c.ok("models"), "mesh-reference") {
		if time.Now().After(deadline) {
			t.Fatal("the loaded model is not served")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstField returns the first whitespace-separated field of text that
// starts with prefix.
func firstField(text, prefix string) string {
	for _, f := range strings.Fields(text) {
		if strings.HasPrefix(f, prefix) {
			return f
		}
	}
	return ""
}

// TestStatusNoModel: meshcli status of a node that serves no model says
// so, and how to get one.
func TestStatusNoModel(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	n := startDaemon(t, node.Config{StateDir: t.TempDir()})
	c := newCLI(t, "http://"+n.HTTPAddr().String())
	out := c.ok("status")
	if !strings.Contains(out, "Serving nothing: this node serves no model") || !strings.Contains(out, "meshcli load NAME") {
		t.Fatalf("status of a node without a model:\n%s", out)
	}
}

// TestReceiptsAgainstNode: a stream saved as curl saves it verifies as it
// is (meshcli takes its final usage chunk), and `meshcli receipt log`
// exports the node's receipt log in the form `receipt verify --log` reads,
// in which that receipt is found, every link verified from genesis.
func TestReceiptsAgainstNode(t *testing.T) {
	n := startDaemon(t, node.Config{StateDir: t.TempDir(), Models: []string{node.ReferenceModel}})
	api := "http://" + n.HTTPAddr().String()
	c := newCLI(t, api)
	dir := t.TempDir()
	c.files = dir
	var stream string
	for _, body := range []string{
		`{"model":"mesh-reference","max_tokens":3,"prompt":"one"}`,
		`{"model":"mesh-reference","max_tokens":3,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"two"}]}`,
		`{"model":"mesh-reference","max_tokens":3,"prompt":"three"}`,
	} {
		path := "/v1/completions"
		if strings.Contains(body, "messages") {
			path = "/v1/chat/completions"
		}
		resp, err := http.Post(api+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		if strings.Contains(body, "stream") {
			stream = filepath.Join(dir, "stream.txt")
			if err := os.WriteFile(stream, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out := c.ok("receipt", "verify", stream); !strings.Contains(out, "Sequence   1, prev") {
		t.Fatalf("verify a saved stream:\n%s", out)
	}
	logFile := filepath.Join(dir, "receipts.jsonl")
	_, errOut, code := c.run("receipt", "log", "-o", logFile)
	if code != 0 || !strings.Contains(errOut, "3 receipts (sequences 0…2) of steward "+n.Status().DID) {
		t.Fatalf("receipt log: exit %d: %s", code, errOut)
	}
	out := c.ok("receipt", "verify", "--log", logFile, stream)
	if !strings.Contains(out, "entry 1 of 3 in $FILES/receipts.jsonl; every link verifies from genesis") {
		t.Fatalf("verify --log with the exported log:\n%s", out)
	}
	if out := c.ok("receipt", "log", "--from", "2"); strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, `{"sequence":2,"envelope_hex":"`) {
		t.Fatalf("receipt log --from 2 to stdout: %q", out)
	}
}
