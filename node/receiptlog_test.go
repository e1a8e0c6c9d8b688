package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
)

// receiptsPage is GET /v1/mesh/receipts's answer.
type receiptsPage struct {
	Steward  string `json:"steward"`
	First    uint64 `json:"first_sequence"`
	Next     uint64 `json:"next_sequence"`
	Receipts []struct {
		Sequence    uint64 `json:"sequence"`
		EnvelopeHex string `json:"envelope_hex"`
	} `json:"receipts"`
}

func (p receiptsPage) envelopes(t *testing.T) [][]byte {
	t.Helper()
	var envs [][]byte
	for _, r := range p.Receipts {
		env, err := hex.DecodeString(r.EnvelopeHex)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	return envs
}

// TestReceiptExport: GET /v1/mesh/receipts lists every receipt the
// steward sealed, from genesis, as a log that verifies link by link and
// holds the very envelopes the answers carried; it pages with from and
// limit, refuses what it does not take, and continues across a restart.
func TestReceiptExport(t *testing.T) {
	state := t.TempDir()
	n, stop := startNode(t, Config{StateDir: state, Models: []string{ReferenceModel}})
	var handed []string
	serveOne := func(n *Node) {
		_, raw := generate(t, n, "/v1/completions", `{"model":"mesh-reference","prompt":"hi","max_tokens":2}`)
		var e struct {
			EnvelopeHex string `json:"envelope_hex"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		handed = append(handed, e.EnvelopeHex)
	}
	for range 3 {
		serveOne(n)
	}
	check := func(n *Node, want int) receiptsPage {
		t.Helper()
		var p receiptsPage
		getJSON(t, n, "/v1/mesh/receipts", &p)
		if p.Steward != n.key.DIDKey() || p.First != 0 || p.Next != uint64(want) || len(p.Receipts) != want {
			t.Fatalf("export: steward %s, sequences %d…%d, %d receipts; want %d from genesis", p.Steward, p.First, p.Next, len(p.Receipts), want)
		}
		for i, r := range p.Receipts {
			if r.Sequence != uint64(i) || r.EnvelopeHex != handed[i] {
				t.Fatalf("receipt %d: sequence %d, envelope is not the one handed out", i, r.Sequence)
			}
		}
		if _, err := receipt.VerifyLog(p.envelopes(t), receipt.Head{}, n.key.Public()); err != nil {
			t.Fatalf("the exported log does not verify: %v", err)
		}
		return p
	}
	check(n, 3)

	var p receiptsPage
	getJSON(t, n, "/v1/mesh/receipts?from=1&limit=1", &p)
	if len(p.Receipts) != 1 || p.Receipts[0].Sequence != 1 || p.Next != 3 {
		t.Fatalf("from=1&limit=1: %+v", p)
	}
	for _, q := range []string{"from=x", "limit=0", "limit=1001", "since=2"} {
		resp, err := http.Get("http://" + n.HTTPAddr().String() + "/v1/mesh/receipts?" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid_request") {
			t.Errorf("?%s: %d %s, want 400", q, resp.StatusCode, b)
		}
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	n, _ = startNode(t, Config{StateDir: state, Models: []string{ReferenceModel}})
	serveOne(n)
	check(n, 4)
}

// sealChain seals n receipts with a steward over the reference engine,
// archiving them in l (opened at the steward's head).
func sealChain(t testing.TB, key *identity.Key, l *receiptLog, n int) []*receipt.Sealed {
	t.Helper()
	st, err := steward.New(steward.Config{Key: key, Meter: hw.NewEstimatorMeter(hw.PowerModel{Watts: 1}, hw.SystemClock{}),
		Backends: []steward.Backend{{Name: "cpu:ref", Engine: engine.NewReference(engine.ReferenceConfig{Fidelity: 2, UJPerToken: 1})}},
		Archive:  l, Journal: &memJournal{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.open(st.Head()); err != nil {
		t.Fatal(err)
	}
	var out []*receipt.Sealed
	for range n {
		req := receipt.ServeRequest{PromptHash: receipt.PromptHash([]byte("x")), PromptTokens: 1, MaxTokens: 2, JouleCeilingUJ: 1 << 40}
		served, err := st.Serve(context.Background(), req, []uint32{'x'}, func(uint32) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, served.Receipt)
	}
	return out
}

// memJournal is a journal that keeps nothing.
type memJournal struct{}

func (memJournal) Sealed(*receipt.Sealed) error { return nil }

func testReceiptLog(t *testing.T, max int64) (*receiptLog, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "receipts.jsonl")
	return newReceiptLog(path, max, slog.New(slog.NewTextHandler(io.Discard, nil))), path
}

// TestReceiptLogRecovery: the log is cut back to the journal's chain head
// at start (a receipt the journal never recorded, a line cut short); a log
// that cannot continue the chain (it lacks receipts, or holds another
// one) is set aside and a new one starts at the head; a receipt replacing
// one the journal refused takes its place.
func TestReceiptLogRecovery(t *testing.T) {
	key, _ := identity.GenerateKey(nil)
	l, path := testReceiptLog(t, DefaultReceiptLogBytes)
	sealed := sealChain(t, key, l, 3)
	l.Close()
	head := receipt.Head{}
	for _, s := range sealed {
		head = head.Advance(s)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(whole), "\n")[:3]
	reopen := func(content string, h receipt.Head) *receiptLog {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		l := newReceiptLog(path, DefaultReceiptLogBytes, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := l.open(h); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	// The journal ends one receipt earlier: the third was archived, then
	// its journal record failed (or the node died between the two).
	two := receipt.Head{}.Advance(sealed[0]).Advance(sealed[1])
	if l := reopen(string(whole), two); len(l.offsets) != 2 {
		t.Fatalf("a receipt past the head: the log holds %d, want 2", len(l.offsets))
	}
	// A torn last line.
	if l := reopen(string(whole)+`{"sequence":3,"envel`, head); len(l.offsets) != 3 || l.size != int64(len(whole)) {
		t.Fatalf("a torn line: %d lines, %d bytes", len(l.offsets), l.size)
	}
	// A log that lacks the journal's last receipt cannot continue: set
	// aside, and a new log starts at the head.
	if l := reopen(lines[0]+lines[1], head); len(l.offsets) != 0 || l.first != 3 {
		t.Fatalf("a log short of the head: first %d, %d lines", l.first, len(l.offsets))
	}
	aside, _ := filepath.Glob(path + ".*.old")
	if len(aside) != 1 {
		t.Fatalf("the old log was not kept aside: %v", aside)
	}
	// A line past a receipt's bound (a damaged log): the same, without
	// reading it whole.
	damaged := lines[0] + lines[1] + lines[2] + strings.Repeat("x", 3*maxLogLine) + "\n"
	if err := os.WriteFile(path, []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dl := newReceiptLog(path, DefaultReceiptLogBytes, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := dl.open(head); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	dl.Close()
	if len(dl.offsets) != 0 || dl.first != 3 {
		t.Fatalf("a log with an over-long line: first %d, %d lines", dl.first, len(dl.offsets))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8*maxLogLine { // read whole, piece by piece: 174 MB
		t.Errorf("reading a log with a %d-byte line allocated %d bytes", 3*maxLogLine, got)
	}
	if aside, _ := filepath.Glob(path + ".*.old"); len(aside) != 2 {
		t.Fatalf("the log with an over-long line was not kept aside: %v", aside)
	}
	// Another chain's receipt at the head's sequence: the same.
	other := sealChain(t, key, func() *receiptLog { l, _ := testReceiptLog(t, DefaultReceiptLogBytes); return l }(), 3)
	forged, _ := json.Marshal(receiptLine{Sequence: 2, EnvelopeHex: hex.EncodeToString(other[2].Envelope)})
	if l := reopen(lines[0]+lines[1]+string(forged)+"\n", head); len(l.offsets) != 0 || l.first != 3 {
		t.Fatalf("a log holding another receipt 2: first %d, %d lines", l.first, len(l.offsets))
	}

	// Archiving a sequence the log holds replaces that receipt.
	l = reopen(string(whole), head)
	if err := l.Archive(other[2]); err != nil {
		t.Fatal(err)
	}
	lines2, first, next, err := l.page(0, 10)
	if err != nil || first != 0 || next != 3 || !strings.Contains(string(lines2[2]), hex.EncodeToString(other[2].Envelope)) {
		t.Fatalf("after replacing receipt 2: %d…%d %v", first, next, err)
	}
	// Any other sequence is out of the chain.
	if err := l.Archive(other[0]); err == nil || !strings.Contains(err.Error(), "receipt 0 where 3 comes next") {
		t.Fatalf("archiving receipt 0 at the end of the log: %v", err)
	}
}

// TestReceiptLogBound: past its bound the log drops its older half, and
// then begins past genesis; what it keeps still verifies from its first
// receipt on, and a page from genesis starts there.
func TestReceiptLogBound(t *testing.T) {
	key, _ := identity.GenerateKey(nil)
	l, _ := testReceiptLog(t, 8<<10) // a few receipts' worth
	sealed := sealChain(t, key, l, 20)
	defer l.Close()
	lines, first, next, err := l.page(0, api.MaxReceiptPage)
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 || next != 20 || len(lines) != int(next-first) || l.size > 8<<10 {
		t.Fatalf("after 20 receipts: %d…%d, %d lines, %d bytes", first, next, len(lines), l.size)
	}
	var envs [][]byte
	for _, line := range lines {
		var rl receiptLine
		if err := json.Unmarshal(line, &rl); err != nil {
			t.Fatal(err)
		}
		env, _ := hex.DecodeString(rl.EnvelopeHex)
		envs = append(envs, env)
	}
	start := receipt.Head{}
	for _, s := range sealed[:first] {
		start = start.Advance(s)
	}
	if _, err := receipt.VerifyLog(envs, start, key.Public()); err != nil {
		t.Fatalf("the kept receipts do not verify from %d: %v", first, err)
	}
}

// BenchmarkReceiptLogArchive times what the receipt log adds to a serve:
// one synced append (here the same receipt again, which replaces itself).
func BenchmarkReceiptLogArchive(b *testing.B) {
	key, _ := identity.GenerateKey(nil)
	path := filepath.Join(b.TempDir(), "receipts.jsonl")
	l := newReceiptLog(path, DefaultReceiptLogBytes, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sealed := sealChain(b, key, l, 1)
	defer l.Close()
	b.ResetTimer()
	for range b.N {
		if err := l.Archive(sealed[0]); err != nil {
			b.Fatal(err)
		}
	}
}
