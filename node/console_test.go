package node

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/console"
	"github.com/meshnode/meshnode/node/receipt"
)

// servedReceipt serves one completion on n and returns its receipt's
// envelope id and energy.
func servedReceipt(t *testing.T, n *Node) (string, uint64) {
	t.Helper()
	_, raw := generate(t, n, "/v1/completions", `{"model":"mesh-reference","prompt":"hi","max_tokens":3}`)
	var e struct {
		EnvelopeHex string `json:"envelope_hex"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	env, err := hex.DecodeString(e.EnvelopeHex)
	if err != nil {
		t.Fatal(err)
	}
	s, err := receipt.Open(env, n.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return s.ID.String(), s.Receipt.Energy.UJ()
}

// TestRecentReceipts: GET /api/receipts shows the latest receipts newest
// first, the very envelopes the answers carried, each verified under the
// node's key and linked to the one before; a receipt altered in the log
// fails its check, and so does the link of the one after it.
func TestRecentReceipts(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}})
	var ids []string
	for range 3 {
		id, _ := servedReceipt(t, n)
		ids = append(ids, id)
	}
	var page api.RecentReceipts
	getJSON(t, n, "/api/receipts?limit=2", &page)
	if page.NextSequence != 3 || page.Steward != n.key.DIDKey() || len(page.Receipts) != 2 {
		t.Fatalf("page %+v", page)
	}
	for i, r := range page.Receipts {
		want := uint64(2 - i)
		if r.Sequence != want || r.ID != ids[want] || !r.Verified || !strings.Contains(r.Verification, "links to receipt") ||
			r.Recipe != ReferenceModel || r.TokensOut != 3 || r.EnergyUJ == 0 || r.UJPerToken == nil {
			t.Fatalf("receipt %d: %+v", i, r)
		}
	}
	getJSON(t, n, "/api/receipts", &page)
	if len(page.Receipts) != 3 || page.Receipts[2].Sequence != 0 || !page.Receipts[2].Verified || !strings.Contains(page.Receipts[2].Verification, "genesis") {
		t.Fatalf("from genesis: %+v", page.Receipts)
	}

	// Alter receipt 1's envelope in the log, in place.
	path := ReceiptLogPath(n.cfg.StateDir)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	off := len(lines[0]) + len(lines[1])/2
	c := byte('0')
	if b[off] == '0' {
		c = '1'
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{c}, int64(off)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	getJSON(t, n, "/api/receipts", &page)
	got := map[uint64]api.ReceiptSummary{}
	for _, r := range page.Receipts {
		got[r.Sequence] = r
	}
	if r := got[1]; r.Verified || r.Verification == "" {
		t.Fatalf("the altered receipt: %+v", r)
	}
	if r := got[2]; r.Verified || !strings.Contains(r.Verification, "unchecked") {
		t.Fatalf("the receipt after the altered one: %+v", r)
	}
	if r := got[0]; !r.Verified {
		t.Fatalf("receipt 0, untouched: %+v", r)
	}
}

// TestRequestEvents: a serve reaches GET /api/events with its tokens, its
// receipt's id and energy, and its model's totals.
func TestRequestEvents(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}})
	id, uj := servedReceipt(t, n)
	var snap console.Snapshot
	waitFor(t, "the serve in the live log", func() bool {
		resp, err := http.Get("http://" + n.HTTPAddr().String() + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading /api/events: %v", err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				if err := json.Unmarshal([]byte(data), &snap); err != nil {
					t.Fatal(err)
				}
				return len(snap.Recent) == 1
			}
		}
	})
	ev := snap.Recent[0]
	if ev.Receipt != id || ev.EnergyUJ != uj || ev.Route != "local" || ev.CompletionTokens != 3 || ev.Status != 200 || ev.Stats == nil || ev.Stats.Served != 1 ||
		ev.GenerationMS <= 0 || ev.GenerationMS > ev.DurationMS {
		t.Fatalf("event %+v, want receipt %s with %d µJ", ev, id, uj)
	}
	if len(snap.Models) != 1 || snap.Models[0].Model != ReferenceModel || snap.Models[0].UJPerToken != float64(uj)/3 {
		t.Fatalf("model totals %+v", snap.Models)
	}
}

// TestStatusPeerFacts: /api/status shows what each peer's gossip says of
// it: its role, hostname, memory and GPUs.
func TestStatusPeerFacts(t *testing.T) {
	b, _ := startNode(t, Config{Models: []string{ReferenceModel}})
	a, _ := startNode(t, Config{Join: []string{b.invite}, Models: []string{ReferenceModel}})
	var ps PeerStatus
	waitFor(t, "A to hear B's announcement", func() bool {
		for _, p := range a.Status().Peers {
			if p.ID == b.key.ID().String() && p.Role != "" {
				ps = p
				return true
			}
		}
		return false
	})
	f := b.hardware
	if ps.Role != "host" || ps.Hostname != f.Hostname || ps.MemoryBytes != f.Memory.TotalBytes || len(ps.GPUs) != len(f.GPUs) {
		t.Fatalf("peer status %+v, B's facts %+v", ps, f)
	}
}

func TestConsoleURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9337":   "http://127.0.0.1:9337/console/",
		"0.0.0.0:9337":     "http://127.0.0.1:9337/console/",
		"[::]:9337":        "http://[::1]:9337/console/",
		"192.168.1.4:9337": "http://192.168.1.4:9337/console/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := consoleURL(a); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}

// TestAttackConsole: the web console opens no way around the API's
// rules. A page that rebinds its name to the node, or runs on another
// site, gets neither the console nor its feeds; on a node with an API key
// the console's files, which hold nothing of the node, are all it gets
// without the key; and the console cannot be framed (clickjacking).
func TestAttackConsole(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}, APIKey: "console-secret"})
	base := "http://" + n.HTTPAddr().String()
	do := func(path string, header ...string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			if header[i] == "Host" {
				req.Host = header[i+1]
			} else {
				req.Header.Set(header[i], header[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	key := []string{"Authorization", "Bearer console-secret"}
	for _, tc := range []struct {
		name   string
		path   string
		header []string
		want   int
	}{
		{"rebound console", "/console/", []string{"Host", "evil.example"}, http.StatusForbidden},
		{"rebound feed", "/api/events", append([]string{"Host", "evil.example"}, key...), http.StatusForbidden},
		{"feed from another site", "/api/events", append([]string{"Origin", "https://evil.example"}, key...), http.StatusForbidden},
		{"receipts from another site", "/api/receipts", append([]string{"Sec-Fetch-Site", "cross-site"}, key...), http.StatusForbidden},
		{"console script from another site", "/console/js/main.js", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"feed without the key", "/api/events", nil, http.StatusUnauthorized},
		{"receipts without the key", "/api/receipts", nil, http.StatusUnauthorized},
		{"status without the key", "/api/status", nil, http.StatusUnauthorized},
	} {
		if code, _, body := do(tc.path, tc.header...); code != tc.want {
			t.Errorf("%s: %d %.200s, want %d", tc.name, code, body, tc.want)
		}
	}
	code, hdr, page := do("/console/")
	if code != http.StatusOK || strings.Contains(page, n.key.ID().String()) || strings.Contains(page, n.key.DIDKey()) {
		t.Fatalf("the console without the key: %d, or it names the node", code)
	}
	if hdr.Get("X-Frame-Options") != "DENY" || !strings.Contains(hdr.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("the console may be framed: %v", hdr)
	}
}
