package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// TestGrantCommands: key, issue (root to a caller, child to the steward
// the API names), present and show, as a person trying grants runs them;
// the presented body verifies at that steward.
func TestGrantCommands(t *testing.T) {
	steward := controltest.Key(t, controltest.SeedNode)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/mesh/steward", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"steward": steward.DIDKey()})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := newCLI(t, srv.URL)
	dir := t.TempDir()
	c.files = dir
	path := func(name string) string { return filepath.Join(dir, name) }

	owner := strings.Fields(c.ok("grant", "key"))[0]
	if again := strings.Fields(c.ok("grant", "key"))[0]; again != owner {
		t.Fatal("grant key made a second key")
	}
	// meshcli's randomness is fixed in tests, so a second generated key
	// would be the first again: the caller's key is written here.
	ck := controltest.Key(t, controltest.SeedNode+1)
	pem, err := ck.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path("caller.key"), pem, 0o600); err != nil {
		t.Fatal(err)
	}
	caller := strings.Fields(c.ok("grant", "key", "--key", path("caller.key")))[0]
	if caller != ck.DIDKey() || caller == owner {
		t.Fatalf("grant key on an existing key printed %s", caller)
	}
	c.ok("grant", "issue", "--subject", caller, "--budget-uj", "50000", "--max-cost-uj", "9000", "--out", path("root.json"))
	if msg := c.fail("grant", "issue", "--key", path("caller.key"), "--subject", "steward", "--budget-uj", "60000", "--parent", path("root.json")); !strings.Contains(msg, "budget") {
		t.Fatalf("a widening child: %s", msg)
	}
	out := c.ok("grant", "issue", "--key", path("caller.key"), "--subject", "steward", "--budget-uj", "20000", "--parent", path("root.json"), "--out", path("chain.json"))
	if !strings.Contains(out, "(a chain of 2) written to $FILES/chain.json") {
		t.Fatalf("issue said %q", out)
	}
	show := c.ok("grant", "show", path("chain.json"))
	for _, want := range []string{owner, caller, steward.DIDKey(), "50000 µJ", "20000 µJ", "MaxCostUj 9000 µJ", "infer on mesh:request:*"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}

	body := `{"model":"meshnode-fortunes-q8_0","messages":[{"role":"user","content":"a fortune"}],"max_tokens":8,"metadata":{"joule_ceiling_uj":"5000"}}`
	if err := os.WriteFile(path("body.json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	presented, errOut, code := c.run("grant", "present", "--key", path("caller.key"), "--chain", path("chain.json"), path("body.json"))
	if code != 0 || !strings.Contains(errOut, "for request ") {
		t.Fatalf("present: %d %s", code, errOut)
	}
	req, err := grant.GrantedServeRequest([]byte(presented))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := req.ID()
	p, err := grant.BodyPresentation([]byte(presented))
	if err != nil || p == nil {
		t.Fatalf("presentation: %v", err)
	}
	if _, err := grant.Verify(p, id, steward.DIDKey()); err != nil {
		t.Fatalf("the presented body does not verify at the steward: %v", err)
	}
	if msg := c.fail("grant", "present", "--chain", path("chain.json"), path("body.json")); !strings.Contains(msg, "leaf grant's issuer") {
		t.Fatalf("presenting as the owner: %s", msg)
	}
	if err := os.WriteFile(path("nobudget.json"), []byte(`{"prompt":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := c.fail("grant", "present", "--key", path("caller.key"), "--chain", path("chain.json"), path("nobudget.json")); !strings.Contains(msg, "joule_ceiling_uj") {
		t.Fatalf("a body without a ceiling: %s", msg)
	}
}
