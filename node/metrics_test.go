package node

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/metrics/metricstest"
	"github.com/meshnode/meshnode/node/receipt"
)

// scrapeMetrics GETs n's /metrics, with extra headers (name, value, …),
// and parses it strictly.
func scrapeMetrics(t *testing.T, n *Node, header ...string) *metricstest.Scrape {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.HTTPAddr().String()+"/metrics", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	s, err := metricstest.Parse(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return s
}

// metricValue is a series' value, 0 when the node has not written it.
func metricValue(s *metricstest.Scrape, name string, labels ...string) float64 {
	v, _ := s.Value(name, labels...)
	return v
}

// servedChat is a non-streamed chat answer's usage, as the test reads it.
type servedChat struct {
	PromptTokens, CompletionTokens int
	Provenance                     string
	Receipt                        *receipt.Receipt
}

// chatFor posts a non-streamed fortunes chat to n and reads its usage and
// receipt, which key must have sealed.
func chatFor(t *testing.T, n *Node, key *Node) servedChat {
	t.Helper()
	resp := post(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":8,"messages":[{"role":"user","content":"Love is"}]}`)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			Energy           struct {
				EnvelopeHex string `json:"envelope_hex"`
				Provenance  string `json:"energy_provenance"`
			} `json:"energy"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	env, _ := hex.DecodeString(out.Usage.Energy.EnvelopeHex)
	sealed, err := receipt.Open(env, key.key.Public())
	if err != nil {
		t.Fatalf("the answer's receipt: %v", err)
	}
	return servedChat{out.Usage.PromptTokens, out.Usage.CompletionTokens, out.Usage.Energy.Provenance, &sealed.Receipt}
}

func status(t *testing.T, resp *http.Response) int {
	t.Helper()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestMetricsServe: a node with the built-in model serves a chat, and
// /metrics, read by a strict parser before and after, counts exactly that
// request under its model, route and status, the tokens its usage says,
// one time to first token and a gap between each two of its tokens, its
// receipt's energy under its grade, the journal's fsyncs, and the model's
// load time. A 400 (its model unread: no model label), a 404 for a model
// nobody serves, a 429 and a stream its client left (499) are counted
// under their status, and the queue gauges show a generation holding the
// only slot.
func TestMetricsServe(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	// The gate holds the stream below after its first token, so that the
	// client leaves before its answer ends however fast the model is.
	g := newStreamGate()
	g.armed.Store(false)
	n, _ := startNodeWith(t, Config{API: APIConfig{Concurrency: 1, QueueDepth: -1}}, func(n *Node) {
		n.wrapModel = func(m localModel) localModel { return gatedModel{m, g} }
	})

	before := scrapeMetrics(t, n)
	if v := metricValue(before, "meshnode_model_load_seconds", "model", fortunesModel); v <= 0 || v > 60 {
		t.Fatalf("model load time %v s, want the time the built-in model took", v)
	}
	if v, ok := before.Value("meshnode_build_info", "version", Version); !ok || v != 1 {
		t.Fatalf("meshnode_build_info{version=%q} = %v, %v", Version, v, ok)
	}
	if v, ok := before.Value("meshnode_peers"); !ok || v != 0 {
		t.Fatalf("meshnode_peers = %v, %v; want 0", v, ok)
	}

	chat := chatFor(t, n, n)
	after := scrapeMetrics(t, n)
	delta := func(name string, labels ...string) float64 {
		return metricValue(after, name, labels...) - metricValue(before, name, labels...)
	}
	ok200 := []string{"model", fortunesModel, "route", "local", "status", "200"}
	if d := delta("meshnode_requests_total", ok200...); d != 1 {
		t.Errorf("requests_total%v moved by %v, want 1", ok200, d)
	}
	if d := after.Sum("meshnode_requests_total") - before.Sum("meshnode_requests_total"); d != 1 {
		t.Errorf("requests_total moved by %v over every label, want 1", d)
	}
	if d := delta("meshnode_prompt_tokens_total", "model", fortunesModel); d != float64(chat.PromptTokens) || d == 0 {
		t.Errorf("prompt tokens moved by %v, usage says %d", d, chat.PromptTokens)
	}
	if d := delta("meshnode_completion_tokens_total", "model", fortunesModel); d != float64(chat.CompletionTokens) || d == 0 {
		t.Errorf("completion tokens moved by %v, usage says %d", d, chat.CompletionTokens)
	}
	if d := delta("meshnode_time_to_first_token_seconds_count", "model", fortunesModel); d != 1 {
		t.Errorf("TTFT count moved by %v, want 1", d)
	}
	if d := delta("meshnode_time_to_first_token_seconds_sum", "model", fortunesModel); d <= 0 {
		t.Errorf("TTFT sum moved by %v, want more than 0", d)
	}
	if d := delta("meshnode_inter_token_latency_seconds_count", "model", fortunesModel); d != float64(chat.CompletionTokens-1) {
		t.Errorf("inter-token count moved by %v, want %d (a gap between each two of %d tokens)", d, chat.CompletionTokens-1, chat.CompletionTokens)
	}
	// Energy: exactly the receipt's, under its grade.
	prov := []string{"provenance", chat.Provenance}
	uj := chat.Receipt.Energy.UJ()
	if d := delta("meshnode_receipts_total", prov...); d != 1 {
		t.Errorf("receipts_total%v moved by %v, want 1", prov, d)
	}
	if d := delta("meshnode_energy_joules_total", prov...); math.Abs(d-float64(uj)/1e6) > 1e-9 || uj == 0 {
		t.Errorf("joules moved by %v, the receipt says %d µJ", d, uj)
	}
	perToken := float64(uj) / float64(chat.Receipt.TokensAccepted) / 1e6
	if d := delta("meshnode_energy_per_token_joules_count", prov...); d != 1 {
		t.Errorf("energy per token count moved by %v, want 1", d)
	}
	if d := delta("meshnode_energy_per_token_joules_sum", prov...); math.Abs(d-perToken) > 1e-9*math.Max(1, perToken) {
		t.Errorf("energy per token sum moved by %v, the receipt says %v J/token", d, perToken)
	}
	// The serve's journal records were made durable: fsyncs of the
	// journal and of its checkpoint.
	for _, file := range []string{"journal", "checkpoint"} {
		if d := delta("meshnode_journal_fsync_seconds_count", "file", file); d < 1 {
			t.Errorf("fsyncs of the %s moved by %v, want at least 1", file, d)
		}
	}
	if v, ok := after.Value("meshnode_queue_depth", "model", fortunesModel); !ok || v != 0 {
		t.Errorf("queue depth %v, %v; want 0", v, ok)
	}

	// Refusals, under their status.
	if s := status(t, post(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`)); s != http.StatusBadRequest {
		t.Fatalf("max_tokens 0: %d, want 400", s)
	}
	if s := status(t, post(t, n, "/v1/completions", `{"model":"no-such-model","prompt":"x"}`)); s != http.StatusNotFound {
		t.Fatalf("unknown model: %d, want 404", s)
	}
	// A stream holds the only slot, with no queue: the next request is
	// refused with 429.
	g.armed.Store(true)
	held := post(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":"Love is","max_tokens":200,"stream":true}`)
	if held.StatusCode != http.StatusOK {
		t.Fatalf("held stream: %d", status(t, held))
	}
	if _, err := bufio.NewReader(held.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	busy := scrapeMetrics(t, n)
	if v := metricValue(busy, "meshnode_generations_running", "model", fortunesModel); v != 1 {
		t.Errorf("generations running %v while a stream holds the slot, want 1", v)
	}
	if s := status(t, post(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","messages":[{"role":"user","content":"x"}]}`)); s != http.StatusTooManyRequests {
		t.Fatalf("second request with the slot taken: %d, want 429", s)
	}
	held.Body.Close() // the client leaves before its answer ended: 499
	gone := []string{"model", fortunesModel, "route", "local", "status", "499"}
	waitFor(t, "the held stream to be counted", func() bool {
		return metricValue(scrapeMetrics(t, n), "meshnode_requests_total", gone...) == metricValue(before, "meshnode_requests_total", gone...)+1
	})
	final := scrapeMetrics(t, n)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"model", "", "route", "local", "status", "400"}, 1}, // refused while its body was read
		{[]string{"model", "", "route", "local", "status", "404"}, 1},
		{[]string{"model", fortunesModel, "route", "local", "status", "429"}, 1},
		{ok200, 1},
	} {
		if d := metricValue(final, "meshnode_requests_total", c.labels...) - metricValue(before, "meshnode_requests_total", c.labels...); d != c.want {
			t.Errorf("requests_total%v moved by %v, want %v", c.labels, d, c.want)
		}
	}
	if d := final.Sum("meshnode_requests_total") - before.Sum("meshnode_requests_total"); d != 5 {
		t.Errorf("requests_total moved by %v over every label, want 5", d)
	}
	if v := metricValue(final, "meshnode_generations_running", "model", fortunesModel); v != 0 {
		t.Errorf("generations running %v once every request ended, want 0", v)
	}
}

// TestMetricsAccess: /metrics is held to the API's rules: with an API key
// it needs the key as a bearer token, a Host a page could rebind is
// refused before that, and it answers GET only.
func TestMetricsAccess(t *testing.T) {
	n, _ := startNode(t, Config{APIKey: "sekrit", Models: []string{ReferenceModel}})
	url := "http://" + n.HTTPAddr().String() + "/metrics"
	for _, c := range []struct {
		name   string
		method string
		header []string
		want   int
	}{
		{"no key", http.MethodGet, nil, http.StatusUnauthorized},
		{"wrong key", http.MethodGet, []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
		{"rebound Host", http.MethodGet, []string{"Authorization", "Bearer sekrit", "Host", "evil.example"}, http.StatusForbidden},
		{"cross-origin page", http.MethodGet, []string{"Authorization", "Bearer sekrit", "Origin", "http://evil.example"}, http.StatusForbidden},
		{"POST", http.MethodPost, []string{"Authorization", "Bearer sekrit"}, http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(c.method, url, nil)
		for i := 0; i+1 < len(c.header); i += 2 {
			if c.header[i] == "Host" {
				req.Host = c.header[i+1]
			} else {
				req.Header.Set(c.header[i], c.header[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := status(t, resp); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	s := scrapeMetrics(t, n, "Authorization", "Bearer sekrit")
	if _, ok := s.Value("meshnode_build_info", "version", Version); !ok {
		t.Fatal("no meshnode_build_info with the key")
	}
}

// TestMetricsMesh: node A relays a chat to node B, which serves it. A's
// /metrics counts it routed to a peer, B's served for the mesh; each
// counts the other as its one peer with a measured RTT, and the bytes
// one's tunnel sent are the bytes the other's received. B does not serve
// /metrics to a mesh peer.
func TestMetricsMesh(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	b, _ := startNode(t, Config{})
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	a, _ := startNode(t, Config{Join: []string{b.invite}})
	waitFor(t, "A to learn that B hosts the fortunes model", func() bool { return len(a.mesh.PeersHosting(fortunesModel)) > 0 })
	for _, p := range []struct{ n, peer *Node }{{a, b}, {b, a}} {
		waitFor(t, "an RTT to the peer", func() bool {
			return metricValue(scrapeMetrics(t, p.n), "meshnode_peer_rtt_seconds", "peer", p.peer.key.ID().Short()) > 0
		})
		s := scrapeMetrics(t, p.n)
		if v := metricValue(s, "meshnode_peers"); v != 1 {
			t.Fatalf("meshnode_peers = %v, want 1", v)
		}
		if rtts := s.Series("meshnode_peer_rtt_seconds"); len(rtts) != 1 {
			t.Fatalf("RTT gauges %v, want the one peer's", rtts)
		}
	}

	chat := chatFor(t, a, b)
	sa, sb := scrapeMetrics(t, a), scrapeMetrics(t, b)
	if v := metricValue(sa, "meshnode_requests_total", "model", fortunesModel, "route", "peer", "status", "200"); v != 1 || sa.Sum("meshnode_requests_total") != 1 {
		t.Errorf("A: requests_total routed to a peer %v (%v in all), want 1", v, sa.Sum("meshnode_requests_total"))
	}
	if v := metricValue(sb, "meshnode_requests_total", "model", fortunesModel, "route", "mesh", "status", "200"); v != 1 || sb.Sum("meshnode_requests_total") != 1 {
		t.Errorf("B: requests_total served for the mesh %v (%v in all), want 1", v, sb.Sum("meshnode_requests_total"))
	}
	if v := metricValue(sb, "meshnode_completion_tokens_total", "model", fortunesModel); v != float64(chat.CompletionTokens) {
		t.Errorf("B: completion tokens %v, usage says %d", v, chat.CompletionTokens)
	}
	if len(sa.Series("meshnode_completion_tokens_total")) != 0 || sa.Sum("meshnode_receipts_total") != 0 {
		t.Error("A counts tokens or receipts of a serve B ran")
	}
	// What one end of the tunnel sent, the other received, once both
	// have finished with it.
	waitFor(t, "the tunnel's bytes to agree at both ends", func() bool {
		sa, sb := scrapeMetrics(t, a), scrapeMetrics(t, b)
		aIn, aOut := metricValue(sa, "meshnode_tunnel_bytes_total", "direction", "in"), metricValue(sa, "meshnode_tunnel_bytes_total", "direction", "out")
		bIn, bOut := metricValue(sb, "meshnode_tunnel_bytes_total", "direction", "in"), metricValue(sb, "meshnode_tunnel_bytes_total", "direction", "out")
		return aOut > 0 && aIn > 0 && aOut == bIn && aIn == bOut
	})

	// A peer that asks B's tunnel for /metrics gets no answer of it.
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return a.mesh.DialHTTP(ctx, b.key.ID()) },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://meshnode.internal/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if s := status(t, resp); s != http.StatusNotFound {
		t.Fatalf("/metrics through the mesh: %d, want 404", s)
	}
}
