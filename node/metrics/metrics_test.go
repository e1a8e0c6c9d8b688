package metrics

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/metrics/metricstest"
)

func scrape(t *testing.T, m *Metrics) *metricstest.Scrape {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ContentType {
		t.Fatalf("GET /metrics: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	s, err := metricstest.Parse(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, rec.Body.String())
	}
	return s
}

func want(t *testing.T, s *metricstest.Scrape, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := s.Value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	if math.Abs(got-v) > 1e-12*math.Max(1, math.Abs(v)) {
		t.Fatalf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// TestExposition: every kind of observation comes out as the family the
// table says, under HELP and TYPE, in an exposition the strict parser
// takes, with the values observed.
func TestExposition(t *testing.T) {
	m := New("1.2.3")
	m.ObserveRequest("tiny", RouteLocal, 200)
	m.ObserveRequest("tiny", RouteLocal, 200)
	m.ObserveRequest("tiny", RoutePeer, 429)
	m.ObserveRequest("", RouteLocal, 400)
	m.ObserveTokens("tiny", 7, 3)
	m.ObserveSpeculation("tiny", 8, 5)
	m.ObserveSpeculation("tiny", 4, 0)
	m.ObserveTTFT("tiny", 30*time.Millisecond)
	m.ObserveInterToken("tiny", 2*time.Millisecond)
	m.ObserveInterToken("tiny", 20*time.Millisecond)
	m.ObserveEnergy("Estimator", 1_500_000, 3)
	m.ObserveEnergy("Estimator", 500_000, 0)
	m.ObserveEnergy("HwShunt", 42, 42)
	m.ObserveSync("journal", 300*time.Microsecond)
	m.ObserveSync("checkpoint", 2*time.Second)
	m.ObserveModelLoad("tiny", 1500*time.Millisecond)
	m.ObserveModelLoad("tiny", 250*time.Millisecond) // the last load counts
	m.SetSources(Sources{
		Queues: func() []Queue { return []Queue{{Model: "tiny", Running: 2, Waiting: 5}} },
		Peers:  func() []Peer { return []Peer{{ID: "bbbb", RTT: 3 * time.Millisecond}, {ID: "aaaa"}} },
		Tunnel: func() (uint64, uint64) { return 1000, 2000 },
	})
	s := scrape(t, m)

	want(t, s, 2, "meshnode_requests_total", "model", "tiny", "route", "local", "status", "200")
	want(t, s, 1, "meshnode_requests_total", "model", "tiny", "route", "peer", "status", "429")
	want(t, s, 1, "meshnode_requests_total", "model", "", "route", "local", "status", "400")
	want(t, s, 7, "meshnode_prompt_tokens_total", "model", "tiny")
	want(t, s, 3, "meshnode_completion_tokens_total", "model", "tiny")
	want(t, s, 12, "meshnode_spec_draft_tokens_total", "model", "tiny")
	want(t, s, 5, "meshnode_spec_accepted_tokens_total", "model", "tiny")
	want(t, s, 1, "meshnode_time_to_first_token_seconds_count", "model", "tiny")
	want(t, s, 0.03, "meshnode_time_to_first_token_seconds_sum", "model", "tiny")
	want(t, s, 0, "meshnode_time_to_first_token_seconds_bucket", "model", "tiny", "le", "0.025")
	want(t, s, 1, "meshnode_time_to_first_token_seconds_bucket", "model", "tiny", "le", "0.05")
	want(t, s, 2, "meshnode_inter_token_latency_seconds_count", "model", "tiny")
	want(t, s, 1, "meshnode_inter_token_latency_seconds_bucket", "model", "tiny", "le", "0.0025")
	want(t, s, 2, "meshnode_inter_token_latency_seconds_bucket", "model", "tiny", "le", "0.025")
	want(t, s, 2, "meshnode_receipts_total", "provenance", "Estimator")
	want(t, s, 2, "meshnode_energy_joules_total", "provenance", "Estimator")
	want(t, s, 42e-6, "meshnode_energy_joules_total", "provenance", "HwShunt")
	// The receipt with no accepted token has no energy per token.
	want(t, s, 1, "meshnode_energy_per_token_joules_count", "provenance", "Estimator")
	want(t, s, 0.5, "meshnode_energy_per_token_joules_sum", "provenance", "Estimator")
	want(t, s, 1e-6, "meshnode_energy_per_token_joules_sum", "provenance", "HwShunt")
	want(t, s, 1, "meshnode_journal_fsync_seconds_bucket", "file", "journal", "le", "0.0005")
	want(t, s, 0, "meshnode_journal_fsync_seconds_bucket", "file", "checkpoint", "le", "1")
	want(t, s, 1, "meshnode_journal_fsync_seconds_bucket", "file", "checkpoint", "le", "+Inf")
	want(t, s, 0.25, "meshnode_model_load_seconds", "model", "tiny")
	want(t, s, 5, "meshnode_queue_depth", "model", "tiny")
	want(t, s, 2, "meshnode_generations_running", "model", "tiny")
	want(t, s, 2, "meshnode_peers")
	want(t, s, 0.003, "meshnode_peer_rtt_seconds", "peer", "bbbb")
	if _, ok := s.Value("meshnode_peer_rtt_seconds", "peer", "aaaa"); ok {
		t.Fatal("a peer whose RTT is not measured yet has an RTT gauge")
	}
	want(t, s, 1000, "meshnode_tunnel_bytes_total", "direction", "in")
	want(t, s, 2000, "meshnode_tunnel_bytes_total", "direction", "out")
	want(t, s, 1, "meshnode_build_info", "version", "1.2.3")

	for _, f := range families {
		if got := s.Types[f.name]; got != f.typ {
			t.Errorf("TYPE of %s = %q, want %q", f.name, got, f.typ)
		}
		if s.Help[f.name] != f.help || f.help == "" {
			t.Errorf("HELP of %s = %q, want %q", f.name, s.Help[f.name], f.help)
		}
	}
	// The Go runtime and the process come along.
	if len(s.Series("go_goroutines")) != 1 {
		t.Error("no go_goroutines")
	}
}

// TestLabelsEscaped: a model name with a quote, a backslash and a newline
// comes back whole through the strict parser.
func TestLabelsEscaped(t *testing.T) {
	m := New("v")
	odd := "we\"ird\\name\nx"
	m.ObserveRequest(odd, RouteLocal, 200)
	want(t, scrape(t, m), 1, "meshnode_requests_total", "model", odd, "route", "local", "status", "200")
}

// TestCardinalityBounded: models past MaxModels share OtherModel, and only
// the first MaxPeers peers by id get an RTT gauge, while the peer count
// counts them all.
func TestCardinalityBounded(t *testing.T) {
	m := New("v")
	for i := range MaxModels + 6 {
		m.ObserveRequest(fmt.Sprintf("model-%03d", i), RouteLocal, 200)
	}
	var peers []Peer
	for i := range MaxPeers + 8 {
		peers = append(peers, Peer{ID: fmt.Sprintf("%012x", MaxPeers+8-i), RTT: time.Millisecond})
	}
	m.SetSources(Sources{Peers: func() []Peer { return peers }})
	s := scrape(t, m)
	if got := len(s.Series("meshnode_requests_total")); got != MaxModels+1 {
		t.Fatalf("%d request series, want %d models and %s", got, MaxModels, OtherModel)
	}
	want(t, s, 6, "meshnode_requests_total", "model", OtherModel, "route", "local", "status", "200")
	want(t, s, 1, "meshnode_requests_total", "model", fmt.Sprintf("model-%03d", MaxModels-1), "route", "local", "status", "200")
	want(t, s, MaxPeers+8, "meshnode_peers")
	rtts := s.Series("meshnode_peer_rtt_seconds")
	if len(rtts) != MaxPeers {
		t.Fatalf("%d RTT gauges, want %d", len(rtts), MaxPeers)
	}
	for i, r := range rtts {
		if id := fmt.Sprintf("%012x", i+1); r.Labels["peer"] != id {
			t.Fatalf("RTT gauge %d is peer %s, want %s (the first by id)", i, r.Labels["peer"], id)
		}
	}
}

// TestSetsApart: two nodes' metrics in one process count apart.
func TestSetsApart(t *testing.T) {
	a, b := New("v"), New("v")
	a.ObserveRequest("m", RouteLocal, 200)
	if _, ok := scrape(t, b).Value("meshnode_requests_total", "model", "m", "route", "local", "status", "200"); ok {
		t.Fatal("b shows a's request")
	}
	want(t, scrape(t, a), 1, "meshnode_requests_total", "model", "m", "route", "local", "status", "200")
}

// TestFamiliesDocumented: docs/metrics.md has a row for each family, with
// its type.
func TestFamiliesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(f.name) + "` \\| " + f.typ + " \\|")
		if !row.Match(doc) {
			t.Errorf("docs/metrics.md has no row \"| `%s` | %s | …\"", f.name, f.typ)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(meshnode_[a-z_]+)` \\|").FindAllSubmatch(doc, -1) {
		if _, ok := lookup(string(m[1])); !ok {
			t.Errorf("docs/metrics.md lists %s, which the node does not write", m[1])
		}
	}
	if !strings.Contains(string(doc), "bearer") {
		t.Error("docs/metrics.md does not say how a scraper sends the API key")
	}
}
