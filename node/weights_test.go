package node

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

// TestWeightsChangeRecord: a GGUF backend serves under a weights change
// record (mesh/1 §6.5). Its first load records its weights; a restart on
// the same file records nothing; a restart on a file whose bytes changed
// records the change from the old weights to the new; and every receipt
// is covered by the entry in effect when it was sealed.
func TestWeightsChangeRecord(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	state, models := t.TempDir(), t.TempDir()
	blob, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(models, "fortunes.gguf")
	if err := os.WriteFile(model, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: state, ModelsDir: models, Models: []string{"fortunes"}}

	serveOne := func(n *Node) *receipt.Receipt {
		t.Helper()
		resp := post(t, n, "/v1/completions", `{"model":"fortunes","prompt":"The","max_tokens":2}`)
		defer resp.Body.Close()
		var out struct {
			Usage struct {
				Energy struct {
					EnvelopeHex string `json:"envelope_hex"`
				} `json:"energy"`
			} `json:"usage"`
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		env, _ := hex.DecodeString(out.Usage.Energy.EnvelopeHex)
		sealed, err := receipt.Open(env, n.key.Public())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.steward.Coverage(&sealed.Receipt); err != nil {
			t.Fatalf("receipt %d not covered: %v", sealed.Receipt.Sequence, err)
		}
		return &sealed.Receipt
	}
	run := func(wantEntries int) *receipt.Receipt {
		t.Helper()
		n, stop := startNode(t, cfg)
		defer stop()
		r := serveOne(n)
		if got := len(n.steward.ChangeRecord("cpu:fortunes")); got != wantEntries {
			t.Fatalf("change record holds %d entries, want %d", got, wantEntries)
		}
		return r
	}

	first := run(1)
	again := run(1) // same file: nothing new to record
	if *again.Weights != *first.Weights {
		t.Fatalf("weights differ across a restart on the same file: %v, %v", first.Weights, again.Weights)
	}
	blob[len(blob)-1] ^= 0x01 // the last byte of the last tensor
	if err := os.WriteFile(model, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	changed := run(2)
	if changed.Weights.Digest == first.Weights.Digest {
		t.Fatal("a changed file gave the same weights digest")
	}
}
