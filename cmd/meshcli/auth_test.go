package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/control/owner"
)

// TestAuth: init, status and sign-node, with a fixed clock and fixed
// randomness so that keys and certificates are golden.
func TestAuth(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1")
	node := controltest.Key(t, controltest.SeedNode)
	out := filepath.Join(filepath.Dir(c.cfgDir), "node.ownership")
	c.files = filepath.Dir(c.cfgDir)
	golden(t, "auth.txt", c.transcript(
		[]string{"auth", "status"},
		[]string{"auth", "init", "--label", "test-laptop"},
		[]string{"auth", "init"},
		[]string{"auth", "status"},
		[]string{"auth", "sign-node", "--label", "bench-1", "--ttl", "720h", node.ID().String()},
		[]string{"auth", "sign-node", "-o", out, node.DIDKey()},
		[]string{"auth", "sign-node", "not-a-node-id"},
		[]string{"auth", "sign-node"},
	))
	cert, err := owner.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	ownerKey, err := ownerDirFor(c).OwnerKey()
	if err != nil {
		t.Fatal(err)
	}
	trust := owner.NewTrust(owner.KeyOf(ownerKey))
	if _, err := trust.Authorize(cert, node.ID(), controltest.T0.Add(time.Hour)); err != nil {
		t.Fatalf("the signed certificate does not authorise the node: %v", err)
	}
	st, err := os.Stat(ownerDirFor(c).Path(owner.OwnerKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("owner key mode %v, %v", st.Mode(), err)
	}
}

// TestEndpointRefusals: what goes wrong on the way to a node is one
// clear line and a non-zero exit.
func TestEndpointRefusals(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1")
	n := controltest.Start(t, controltest.Options{}) // trusts controltest's owner, not this CLI's

	c.globals = []string{"--endpoint", n.Token(t)}
	if msg := c.fail("config", "get"); !strings.Contains(msg, "no client identity") || !strings.Contains(msg, "meshcli auth init") {
		t.Fatalf("before auth init: %s", msg)
	}
	c.ok("auth", "init")
	if msg := c.fail("config", "get"); !strings.Contains(msg, "UNAUTHORIZED") || !strings.Contains(msg, "not trusted") {
		t.Fatalf("foreign owner: %s", msg)
	}
	c.globals = []string{"--endpoint", "eyJpZCI6IngifQ"}
	if msg := c.fail("load", "alpha"); !strings.Contains(msg, "control endpoint token starts") {
		t.Fatalf("bad token: %s", msg)
	}
	// Past its expiry the client certificate is refused before dialling.
	later := newCLI(t, "http://127.0.0.1:1")
	later.cfgDir = c.cfgDir
	later.globals = []string{"--endpoint", n.Token(t)}
	later.clock = controltest.T0.Add(2 * owner.DefaultTTL)
	if msg := later.fail("config", "get"); !strings.Contains(msg, "expired") || !strings.Contains(msg, "auth init") {
		t.Fatalf("expired client certificate: %s", msg)
	}
}
