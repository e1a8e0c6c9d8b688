package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// TestOwnerDrivesNode: an owner with a certificate for the node manages
// it over mesh-llm-control/1 from a client identity of its own: reads the
// config, rescans the models dir, loads a model from it (which the node
// then serves and advertises), drains it, and is refused as a stranger.
func TestOwnerDrivesNode(t *testing.T) {
	state, models := t.TempDir(), t.TempDir()
	blob, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models, "fortunes.gguf"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	nodeKey, _, err := identity.LoadOrCreateKey(state)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ownerKey, _ := identity.GenerateKey(nil)
	clientKey, _ := identity.GenerateKey(nil)
	nodeCert, err := owner.Issue(ownerKey, owner.Options{Endpoint: nodeKey.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), Label: "bench-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Save(filepath.Join(state, "node.ownership"), nodeCert); err != nil {
		t.Fatal(err)
	}
	clientCert, err := owner.Issue(ownerKey, owner.Options{Endpoint: clientKey.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	n, _ := startNode(t, Config{StateDir: state, ModelsDir: models, Models: []string{ReferenceModel}})
	tok, err := os.ReadFile(filepath.Join(state, "control.token"))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := control.ParseEndpoint(strings.TrimSpace(string(tok)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, addr, control.ClientConfig{Key: clientKey, Ownership: clientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	snap, err := c.GetConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetRevision() != 0 || len(snap.GetConfig().GetModels()) != 1 || snap.GetConfig().GetModels()[0].GetModel() != "mesh-reference" {
		t.Fatalf("initial config = %v", snap)
	}
	inv, err := c.RefreshInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if es := inv.GetInventory().GetEntries(); len(es) != 1 || es[0].GetCanonicalModelRef() != "fortunes" || es[0].GetMetadata().GetArchitecture() != "llama" {
		t.Fatalf("inventory = %v", inv)
	}

	ack, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "fortunes"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the loaded model to serve", func() bool { _, ok := n.models.get("fortunes"); return ok })
	resp := post(t, n, "/v1/completions", `{"model":"fortunes","prompt":"Love is","max_tokens":3}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("serving the loaded model: %d (ack %+v)", resp.StatusCode, ack)
	}
	if a := n.announcement(0); !contains(a.GetHostedModels(), "fortunes") || a.GetOwnerAttestation() == nil {
		t.Fatalf("announcement after load: hosted %v, attested %v", a.GetHostedModels(), a.GetOwnerAttestation() != nil)
	}

	if _, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentDrain, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "fortunes"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the drained model to be gone", func() bool { _, ok := n.models.get("fortunes"); return !ok })

	// A stranger's certificate, from another owner, is refused.
	stranger, _ := identity.GenerateKey(nil)
	strangerCert, _ := owner.Issue(stranger, owner.Options{Endpoint: stranger.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	sc, err := control.Dial(ctx, addr, control.ClientConfig{Key: stranger, Ownership: strangerCert})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if _, err := sc.GetConfig(ctx); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("stranger's get_config: %v, want UNAUTHORIZED", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestOwnershipTakenLive: a node started without an owner takes the
// ownership certificate put in its state dir while it runs (meshcli auth
// sign-node -o …), with no restart: owner control then answers its owner,
// and the node announces the certificate. One that others could change is
// not taken; one removed leaves the node unowned again.
func TestOwnershipTakenLive(t *testing.T) {
	state := t.TempDir()
	var logs syncBuffer
	n, _ := startNodeWith(t, Config{StateDir: state, Models: []string{ReferenceModel}}, func(n *Node) {
		n.ownershipPoll = 20 * time.Millisecond
		logTo(&logs)(n)
	})
	if !strings.Contains(logs.String(), "meshcli auth sign-node "+n.key.ID().String()+" -o "+filepath.Join(state, "node.ownership")) {
		t.Errorf("an unowned node does not say how to own it:\n%s", logs.String())
	}
	tok, err := os.ReadFile(filepath.Join(state, "control.token"))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := control.ParseEndpoint(strings.TrimSpace(string(tok)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ownerKey, _ := identity.GenerateKey(nil)
	clientKey, _ := identity.GenerateKey(nil)
	clientCert, err := owner.Issue(ownerKey, owner.Options{Endpoint: clientKey.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	getConfig := func() error {
		c, err := control.Dial(ctx, addr, control.ClientConfig{Key: clientKey, Ownership: clientCert})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.GetConfig(ctx)
		return err
	}
	if err := getConfig(); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") || !strings.Contains(err.Error(), "where it is taken at once") {
		t.Fatalf("before the certificate: %v, want UNAUTHORIZED saying how to own the node", err)
	}

	nodeCert, err := owner.Issue(ownerKey, owner.Options{Endpoint: n.key.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, "node.ownership")
	// Written where others could change it first: not taken. It is made
	// so beside the state dir's file and renamed into place, so that the
	// node's poll never sees it with safe permissions.
	loose := filepath.Join(t.TempDir(), "node.ownership")
	if err := owner.Save(loose, nodeCert); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(loose, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node to refuse the certificate others could change", func() bool {
		return strings.Contains(logs.String(), "ownership certificate not loaded: the file could be changed by others")
	})
	if err := getConfig(); err == nil {
		t.Fatal("a certificate others could change was taken")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "owner control to answer the owner", func() bool { return getConfig() == nil })
	if a := n.announcement(0); a.GetOwnerAttestation() == nil {
		t.Fatal("the node does not announce the certificate it took")
	}
	// The reload logs after it hands owner control the new owner, so the
	// owner's first answer can come before the line.
	waitFor(t, "the node to print its control token once owned", func() bool {
		return strings.Contains(logs.String(), "manage this node with: meshcli --endpoint "+strings.TrimSpace(string(tok)))
	})

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node to drop its owner", func() bool {
		err := getConfig()
		return err != nil && strings.Contains(err.Error(), "UNAUTHORIZED")
	})
	if a := n.announcement(0); a.GetOwnerAttestation() != nil {
		t.Fatal("the node still announces a removed certificate")
	}
}

// TestOwnershipTakenOnFirstUse: owner control looks at the certificate
// before it refuses a handshake, so the owner's first command after
// writing it succeeds, before the node's next poll.
func TestOwnershipTakenOnFirstUse(t *testing.T) {
	state := t.TempDir()
	n, _ := startNodeWith(t, Config{StateDir: state, Models: []string{ReferenceModel}}, func(n *Node) { n.ownershipPoll = time.Hour })
	tok, err := os.ReadFile(filepath.Join(state, "control.token"))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := control.ParseEndpoint(strings.TrimSpace(string(tok)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ownerKey, _ := identity.GenerateKey(nil)
	clientKey, _ := identity.GenerateKey(nil)
	clientCert, _ := owner.Issue(ownerKey, owner.Options{Endpoint: clientKey.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	nodeCert, _ := owner.Issue(ownerKey, owner.Options{Endpoint: n.key.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err := owner.Save(filepath.Join(state, "node.ownership"), nodeCert); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, addr, control.ClientConfig{Key: clientKey, Ownership: clientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetConfig(ctx); err != nil {
		t.Fatalf("the owner's first command after writing the certificate: %v", err)
	}
}
