package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/statedir"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// refusedStart runs a node on cfg as startNode would and returns the error
// Serve fails with; a node that starts serving fails the test.
func refusedStart(t *testing.T, cfg Config) error {
	t.Helper()
	cfg.HTTPAddr, cfg.QUICAddr, cfg.Discovery = "127.0.0.1:0", "127.0.0.1:0", "none"
	n, err := New(cfg, testLogger(t))
	if err != nil {
		return err
	}
	n.meterConfig = meters.Config{Meter: "estimator", EstimatorWatts: 10}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve returned nil without serving")
		}
		return err
	case <-n.Ready():
		cancel()
		<-done
		t.Fatal("the node started")
	case <-time.After(30 * time.Second):
		t.Fatal("the node neither started nor failed in 30s")
	}
	return nil
}

// TestAttackJournalRollbackRefusesStart: the node serves a granted request
// and an ungranted one, stops, and its journal is cut at a line boundary
// back to before the grant was spent. Restarting is refused with a
// *journal.RollbackError that says what to run; without that, the spent
// presentation would be served again and a second receipt 0 handed out.
// After `meshnode journal accept-rollback` the node starts, and does just
// that, as the command warns.
func TestAttackJournalRollbackRefusesStart(t *testing.T) {
	dir := t.TempDir()
	n, stop := startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
	caller, chain := issueGrant(t, n)
	presented, _, err := grant.PresentBody([]byte(`{"model":"mesh-reference","max_tokens":4,
		"messages":[{"role":"user","content":"hi"}],"metadata":{"joule_ceiling_uj":"1000000"}}`), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(n *Node, body string) (int, string) {
		t.Helper()
		resp := post(t, n, "/v1/chat/completions", body)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := serve(n, string(presented)); code != http.StatusOK || !strings.Contains(b, `"sequence":0`) {
		t.Fatalf("granted serve: %d %s", code, b)
	}
	if code, b := serve(n, `{"model":"mesh-reference","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`); code != http.StatusOK ||
		!strings.Contains(b, `"sequence":1`) {
		t.Fatalf("ungranted serve: %d %s", code, b)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	path := JournalPath(dir)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))
	cut := 0
	for cut < len(lines) && !bytes.Contains(lines[cut], []byte(`"authorised"`)) {
		cut++
	}
	if cut == len(lines) {
		t.Fatal("no authorisation in the journal")
	}
	if err := os.WriteFile(path, bytes.Join(lines[:cut], nil), 0o600); err != nil {
		t.Fatal(err)
	}

	err = refusedStart(t, Config{StateDir: dir})
	var re *journal.RollbackError
	if !errors.Is(err, journal.ErrRolledBack) || !errors.As(err, &re) {
		t.Fatalf("restart on a cut journal: %v, want a *journal.RollbackError", err)
	}
	if re.Journal.Records != uint64(cut) || re.Checkpoint.Records != uint64(len(lines)-1) {
		t.Fatalf("the error names %d records against a checkpoint of %d; want %d and %d", re.Journal.Records, re.Checkpoint.Records, cut, len(lines)-1)
	}
	if want := "meshnode journal accept-rollback --state-dir " + dir; !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not say what to run (%q): %v", want, err)
	}
	// Refused every time, not only once.
	if err := refusedStart(t, Config{StateDir: dir}); !errors.Is(err, journal.ErrRolledBack) {
		t.Fatalf("second restart: %v", err)
	}

	// The owner decides to serve from the journal as it stands.
	if _, err := journal.AcceptRollback(path, journal.Options{}); err != nil {
		t.Fatal(err)
	}
	n, _ = startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
	if got := n.steward.Head().Next; got != 0 {
		t.Fatalf("after accepting the cut the chain continues at %d, want 0 (the cut receipts are forgotten)", got)
	}
	if code, b := serve(n, string(presented)); code != http.StatusOK {
		t.Fatalf("after accepting the cut the forgotten presentation is served again, as accept-rollback warns: %d %s", code, b)
	}
}

// TestAttackWeakPermissionsRefuseStart: a node does not start on a state
// dir others can write, with a journal others can write, or with an
// ownership certificate another user planted; each refusal names the
// path and the command that fixes it.
func TestAttackWeakPermissionsRefuseStart(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	// prepared is a state dir a node has run on: key, journal, checkpoint.
	prepared := func(t *testing.T) string {
		dir := t.TempDir()
		_, stop := startNode(t, Config{StateDir: dir})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	refused := func(t *testing.T, dir string, sentinel error, path, fix string) {
		t.Helper()
		err := refusedStart(t, Config{StateDir: dir})
		var ie *statedir.InsecureError
		if !errors.Is(err, sentinel) || !errors.As(err, &ie) || ie.Path != path {
			t.Fatalf("got %v, want %v for %s", err, sentinel, path)
		}
		if !strings.Contains(err.Error(), "run `"+fix+"`") {
			t.Fatalf("the error does not give the fix %q: %v", fix, err)
		}
	}

	t.Run("state dir 0777", func(t *testing.T) {
		dir := prepared(t)
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, statedir.ErrPermissions, dir, "chmod 755 "+dir)
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		startNode(t, Config{StateDir: dir})
	})
	t.Run("journal 0666", func(t *testing.T) {
		dir := prepared(t)
		path := JournalPath(dir)
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, statedir.ErrPermissions, path, "chmod 644 "+path)
	})
	t.Run("node key 0644", func(t *testing.T) {
		dir := prepared(t)
		path := filepath.Join(dir, identity.KeyFile)
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, statedir.ErrPermissions, path, "chmod 600 "+path)
	})
	t.Run("config file group-writable", func(t *testing.T) {
		dir := prepared(t)
		cfgPath := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(cfgPath, []byte("state_dir = \""+dir+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cfgPath, 0o664); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfigFiles(cfgPath, "")
		if err != nil {
			t.Fatal(err)
		}
		err = refusedStart(t, cfg)
		if !errors.Is(err, statedir.ErrPermissions) || !strings.Contains(err.Error(), "chmod 644 "+cfgPath) {
			t.Fatalf("got %v, want the config file refused", err)
		}
	})
	t.Run("node.ownership planted by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("giving a file to another user needs root (chown); statedir's own tests check the rule with a stand-in uid")
		}
		dir := prepared(t)
		key, err := identity.LoadKey(filepath.Join(dir, identity.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		// Mallory issues herself ownership of the node and plants it.
		mallory, _ := identity.GenerateKey(nil)
		now := time.Now()
		cert, err := owner.Issue(mallory, owner.Options{Endpoint: key.ID(), IssuedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "node.ownership")
		if err := owner.Save(path, cert); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, statedir.ErrOwner, path, "chown root "+path)
	})
}
