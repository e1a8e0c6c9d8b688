package node

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// TestGrantedServeAndRestart: a request riding on a grant issued to the
// node's steward is served and debited; the same presentation shown again
// is refused (spent once); a restarted node on the same state dir
// continues the receipt chain and remembers the spend.
func TestGrantedServeAndRestart(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	dir := t.TempDir()
	n, stop := startNode(t, Config{StateDir: dir})

	caller, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := grant.Issue(grant.Issuance{Issuer: caller, Subject: n.steward.DID(), BudgetUJ: 10_000_000,
		Expiry: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"mesh-reference","max_tokens":4,"messages":[{"role":"user","content":"hi"}],
		"metadata":{"joule_ceiling_uj":"1000000"}}`)
	presented, _, err := grant.PresentBody(body, chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}

	answer := func(n *Node, body []byte) (int, map[string]any) {
		t.Helper()
		resp := post(t, n, "/v1/chat/completions", string(body))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("status %d, body %s", resp.StatusCode, b)
		}
		return resp.StatusCode, v
	}
	code, v := answer(n, presented)
	if code != http.StatusOK {
		t.Fatalf("granted request: %d %v", code, v)
	}
	rec := v["usage"].(map[string]any)["energy"].(map[string]any)["receipt"].(map[string]any)
	if rec["grant_id"] != chain.Leaf().ID.String() || rec["sequence"] != float64(0) {
		t.Fatalf("receipt does not name the grant: %v", rec)
	}
	if code, v = answer(n, presented); code != http.StatusForbidden {
		t.Fatalf("the same presentation again: %d %v, want 403", code, v)
	}
	// A granted request must name its own joule ceiling (§2.3).
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(presented, &fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "metadata")
	noCeiling, _ := json.Marshal(fields)
	if code, v = answer(n, noCeiling); code != http.StatusBadRequest {
		t.Fatalf("granted request without a ceiling: %d %v, want 400", code, v)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	n2, _ := startNode(t, Config{StateDir: dir})
	if got := n2.steward.Head().Next; got != 1 {
		t.Fatalf("restarted steward continues at sequence %d, want 1", got)
	}
	if code, v = answer(n2, presented); code != http.StatusForbidden {
		t.Fatalf("a presentation spent before the restart: %d %v, want 403", code, v)
	}
	resp := post(t, n2, "/v1/completions", `{"model":"mesh-reference","prompt":"x","max_tokens":2}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"sequence":1`) {
		t.Fatalf("first receipt after the restart: %s", b)
	}
}
