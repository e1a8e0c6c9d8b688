package node

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// TestGrantedServeAndRestart: a request riding on a grant issued to the
// node's steward is served and debited; the same presentation shown again
// is refused (spent once); a restarted node on the same state dir
// continues the receipt chain and remembers the spend.
func TestGrantedServeAndRestart(t *testing.T) {
	dir := t.TempDir()
	n, stop := startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})

	caller, chain := issueGrant(t, n)
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

	n2, _ := startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
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

// TestGrantedRefusals: over the whole node, a presentation that does not
// authenticate its caller is answered 401, and once the witness endpoint
// has been shown a receipt the journal does not hold (409), every grant is
// answered 503 while ungranted serves go on (mesh/1 §2.2, §2.3).
func TestGrantedRefusals(t *testing.T) {
	dir := t.TempDir()
	journalPath := filepath.Join(dir, "journal", "steward.jsonl")

	// A journal from before any serve, with its checkpoint, to restore
	// later as an operator restoring an old backup of the state dir would:
	// a rollback the checkpoint cannot see, since it was rolled back too.
	_, stop := startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(journalPath)
	if err != nil {
		t.Fatal(err)
	}
	headBackup, err := os.ReadFile(journal.HeadPath(journalPath))
	if err != nil {
		t.Fatal(err)
	}

	n, stop := startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
	caller, chain := issueGrant(t, n)
	stranger, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"model":"mesh-reference","max_tokens":4,"messages":[{"role":"user","content":"hi"}],
		"metadata":{"joule_ceiling_uj":"1000000"}}`
	present := func() []byte {
		t.Helper()
		out, _, err := grant.PresentBody([]byte(body), chain, caller, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// edit rewrites one field of a presented body.
	edit := func(presented []byte, change func(fields map[string]any)) string {
		t.Helper()
		var fields map[string]any
		if err := json.Unmarshal(presented, &fields); err != nil {
			t.Fatal(err)
		}
		change(fields)
		out, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	answer := func(n *Node, path, body string) (int, string) {
		t.Helper()
		resp := post(t, n, path, body)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	for _, tc := range []struct {
		name, body, code string
	}{
		{"caller is not the leaf's issuer", edit(present(), func(f map[string]any) {
			f["jcp_presentation"].(map[string]any)["caller"] = stranger.DIDKey()
		}), "caller-not-issuer"},
		{"presentation signed for another request", edit(present(), func(f map[string]any) {
			f["messages"] = []any{map[string]any{"role": "user", "content": "hello"}}
		}), "presentation-invalid"},
	} {
		status, b := answer(n, "/v1/chat/completions", tc.body)
		if status != http.StatusUnauthorized || !strings.Contains(b, `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s, want 401 %s", tc.name, status, b, tc.code)
		}
	}
	if t.Failed() {
		return
	}
	// Neither refusal spent anything: an honest presentation is served.
	status, b := answer(n, "/v1/chat/completions", string(present()))
	if status != http.StatusOK {
		t.Fatalf("granted request: %d %s", status, b)
	}
	var answered struct {
		Usage struct {
			Energy json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(b), &answered); err != nil || len(answered.Usage.Energy) == 0 {
		t.Fatalf("no usage.energy in %s (%v)", b, err)
	}
	if status, b := answer(n, "/v1/mesh/witness", string(answered.Usage.Energy)); status != http.StatusOK {
		t.Fatalf("witness of a receipt the journal holds: %d %s", status, b)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// The journal loses the records behind that receipt.
	if err := os.WriteFile(journalPath, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(journal.HeadPath(journalPath), headBackup, 0o600); err != nil {
		t.Fatal(err)
	}
	n, _ = startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
	if status, b := answer(n, "/v1/mesh/witness", string(answered.Usage.Energy)); status != http.StatusConflict {
		t.Fatalf("witness of a receipt the restored journal lacks: %d %s, want 409", status, b)
	}
	if status, b := answer(n, "/v1/chat/completions", string(present())); status != http.StatusServiceUnavailable ||
		!strings.Contains(b, `"code":"suspended"`) {
		t.Fatalf("granted request after the 409: %d %s, want 503 suspended", status, b)
	}
	if status, b := answer(n, "/v1/chat/completions", body); status != http.StatusOK {
		t.Fatalf("ungranted request after the 409: %d %s, want 200", status, b)
	}
}

// issueGrant makes a caller and a grant of 10 J it issues to n's steward,
// for an hour.
func issueGrant(t *testing.T, n *Node) (*identity.Key, grant.Chain) {
	t.Helper()
	caller, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := grant.Issue(grant.Issuance{Issuer: caller, Subject: n.steward.DID(), BudgetUJ: 10_000_000,
		Expiry: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return caller, chain
}

// TestRevocationWithoutRestart: a revocation written to the state dir's
// revocation file while the node runs is enforced within the poll, with
// no restart; it is journaled, so the restarted node still refuses the
// grant and replays the journal (a backdated revocation takes effect from
// when the node learned it, never reaching back past served requests).
// A revocation removed from the file stays in effect.
func TestRevocationWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	n, stop := startNodeWith(t, Config{StateDir: dir, Models: []string{ReferenceModel}}, func(n *Node) { n.revocationPoll = 20 * time.Millisecond })
	caller, chain := issueGrant(t, n)
	present := func() []byte {
		t.Helper()
		body := []byte(`{"model":"mesh-reference","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"metadata":{"joule_ceiling_uj":"1000000"}}`)
		b, _, err := grant.PresentBody(body, chain, caller, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	status := func(n *Node) int {
		t.Helper()
		resp := post(t, n, "/v1/chat/completions", string(present()))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(n); got != http.StatusOK {
		t.Fatalf("before the revocation: %d", got)
	}
	// Dated an hour back: before the serve just made.
	line := chain.Leaf().ID.String() + " " + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) + "\n"
	if err := os.MkdirAll(filepath.Join(dir, "grants"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "grants", "revoked"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the revocation to be enforced", func() bool { return status(n) == http.StatusForbidden })
	if err := os.WriteFile(filepath.Join(dir, "grants", "revoked"), []byte("# emptied\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // several polls
	if got := status(n); got != http.StatusForbidden {
		t.Fatalf("after the revocation was removed from the file: %d, want 403 still", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	n2, _ := startNode(t, Config{StateDir: dir, Models: []string{ReferenceModel}})
	if got := status(n2); got != http.StatusForbidden {
		t.Fatalf("after a restart: %d, want 403", got)
	}
}
