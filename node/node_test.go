package node

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
)

// startNode runs a node on loopback with ephemeral ports, no mDNS and
// the estimator meter, and returns it once it serves, with a stop that
// cancels it and returns what Serve returned.
func startNode(t testing.TB, cfg Config) (*Node, func() error) {
	t.Helper()
	return startNodeWith(t, cfg, nil)
}

// startNodeWith is startNode with setup run on the node before it serves.
// A QUICAddr cfg sets is kept (a node in a network namespace).
func startNodeWith(t testing.TB, cfg Config, setup func(*Node)) (*Node, func() error) {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	if cfg.QUICAddr == "" {
		cfg.QUICAddr = "127.0.0.1:0"
	}
	cfg.Discovery = "none"
	if cfg.DrainTimeout.Duration == 0 {
		cfg.DrainTimeout.Duration = 5 * time.Second
	}
	n, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	n.meterConfig = meters.Config{Meter: "estimator", EstimatorWatts: 10}
	n.meshTuning = func(c *mesh.Config) {
		c.GossipInterval = 200 * time.Millisecond
		c.Timeouts.Confirm = 500 * time.Millisecond
	}
	// A fixed bandwidth: the real probe copies 128 MiB per node.
	n.memProbe = func(context.Context) (float64, error) { return 10e9, nil }
	if setup != nil {
		setup(n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	select {
	case <-n.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("node stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("node not ready after 30s")
	}
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-done:
			case <-time.After(15 * time.Second):
				t.Error("node did not stop")
			}
		})
		return serveErr
	}
	t.Cleanup(func() { stop() })
	return n, stop
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func post(t *testing.T, n *Node, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post("http://"+n.HTTPAddr().String()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// generate posts a non-streamed generation to n's path and returns its
// one choice's text (a completion's, or a chat answer's content) and its
// usage.energy; anything but a 200 with both fails the test.
func generate(t *testing.T, n *Node, path, body string) (string, json.RawMessage) {
	t.Helper()
	resp := post(t, n, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var answer struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Energy json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &answer); resp.StatusCode != http.StatusOK || err != nil || len(answer.Choices) != 1 || len(answer.Usage.Energy) == 0 {
		t.Fatalf("%s %s: %d %s", path, body, resp.StatusCode, b)
	}
	c := answer.Choices[0]
	return c.Text + c.Message.Content, answer.Usage.Energy
}

// TestReferenceServeWithReceipt: a node configured with the reference
// engine (models = ["mesh-reference"]) serves it as mesh-reference, and
// the receipt in usage.energy verifies under the node's key, chains, and
// is held by the witness endpoint.
func TestReferenceServeWithReceipt(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}})

	resp, err := http.Get("http://" + n.HTTPAddr().String() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID    string `json:"id"`
			Local bool   `json:"local"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "mesh-reference" || !models.Data[0].Local {
		t.Fatalf("/v1/models = %+v", models)
	}

	var envelopes [][]byte
	for i := 0; i < 2; i++ {
		resp := post(t, n, "/v1/chat/completions", `{"model":"mesh-reference","max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var raw struct {
			Usage struct {
				Energy json.RawMessage `json:"energy"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &raw); err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
				Energy           struct {
					EnvelopeHex        string         `json:"envelope_hex"`
					Receipt            map[string]any `json:"receipt"`
					Provenance         string         `json:"energy_provenance"`
					UJPerAcceptedToken uint64         `json:"uj_per_accepted_token"`
				} `json:"energy"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		if out.Usage.CompletionTokens != 5 || len(strings.Fields(out.Choices[0].Message.Content)) != 5 {
			t.Fatalf("answer %q with %d tokens", out.Choices[0].Message.Content, out.Usage.CompletionTokens)
		}
		if out.Usage.Energy.Provenance != "Estimator" || out.Usage.Energy.UJPerAcceptedToken == 0 {
			t.Fatalf("energy = %+v", out.Usage.Energy)
		}
		env, err := hex.DecodeString(out.Usage.Energy.EnvelopeHex)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := receipt.Open(env, n.key.Public())
		if err != nil {
			t.Fatalf("receipt does not verify under the node key: %v", err)
		}
		if sealed.Receipt.Sequence != uint64(i) || sealed.Receipt.Recipe != "mesh-reference" {
			t.Fatalf("receipt %d: sequence %d recipe %s", i, sealed.Receipt.Sequence, sealed.Receipt.Recipe)
		}
		envelopes = append(envelopes, env)

		witness := post(t, n, "/v1/mesh/witness", string(raw.Usage.Energy))
		witness.Body.Close()
		if witness.StatusCode != 200 {
			t.Fatalf("witness of a receipt the node sealed: %d", witness.StatusCode)
		}
	}
	if i, err := receipt.VerifyLog(envelopes, receipt.Head{}, n.key.Public()); err != nil {
		t.Fatalf("receipt chain broken at %d: %v", i, err)
	}
}

// TestShutdownDrains: a cancelled node finishes the request in flight and
// then Serve returns nil.
func TestShutdownDrains(t *testing.T) {
	n, stop := startNode(t, Config{Models: []string{ReferenceModel}})
	resp := post(t, n, "/v1/completions", `{"model":"mesh-reference","prompt":"x","max_tokens":400,"stream":true}`)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil { // the stream has started
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("in-flight stream cut: %v", err)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]") {
		t.Fatalf("in-flight stream did not finish: ...%q", tail(string(rest)))
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Serve after shutdown: %v", err)
	}
	if _, err := http.Get("http://" + n.HTTPAddr().String() + "/health"); err == nil {
		t.Fatal("API still accepting after shutdown")
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}

const fortunesModel = "meshnode-fortunes-q8_0"

func fortunesPath(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "models", BuiltinModelFile))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBuiltinModelStreams: with no model configured the node serves the
// built-in fortunes model; a streamed chat completion passes a strict SSE
// reader, says what llama.cpp says for the prompt, and its receipt binds
// the model's weights.
func TestBuiltinModelStreams(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	resp := post(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","stream":true,"stream_options":{"include_usage":true},
		"max_tokens":12,"messages":[{"role":"user","content":"A man walks into a bar"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	text, energy := readChatStream(t, resp.Body)
	// llama.cpp's greedy continuation (models/reference-greedy.txt).
	if want := ", and a man who has a little to be a man who"; !strings.HasPrefix(want, text) || len(text) < 20 {
		t.Fatalf("streamed %q, want a prefix of %q", text, want)
	}
	env, _ := hex.DecodeString(energy.EnvelopeHex)
	sealed, err := receipt.Open(env, n.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	r := sealed.Receipt
	if r.Weights == nil || r.Weights.Precision != "int8" || r.TokensOut != 12 || r.Recipe != fortunesModel {
		t.Fatalf("receipt = %+v", r)
	}
}

type streamEnergy struct {
	EnvelopeHex string `json:"envelope_hex"`
}

// readChatStream reads a chat completion stream strictly and returns its
// text and the usage.energy of its final usage chunk.
func readChatStream(t *testing.T, r io.Reader) (string, streamEnergy) {
	t.Helper()
	text, energy := readChatEvents(t, r)
	if energy.EnvelopeHex == "" {
		t.Fatal("stream incomplete: no usage chunk with the receipt")
	}
	return text, energy
}

// readChatEvents is readChatStream for a stream that need not end with
// a usage chunk (its client asked for none): the energy is then empty.
func readChatEvents(t *testing.T, r io.Reader) (string, streamEnergy) {
	t.Helper()
	sc := bufio.NewScanner(r)
	var text strings.Builder
	var energy streamEnergy
	sawDone, sawRole, blank := false, false, true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if blank {
				t.Fatal("SSE: two blank lines in a row")
			}
			blank = true
			continue
		}
		if !blank || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("SSE: unexpected line %q", line)
		}
		blank = false
		data := strings.TrimPrefix(line, "data: ")
		if sawDone {
			t.Fatalf("SSE: data after [DONE]: %q", data)
		}
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Energy streamEnergy `json:"energy"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("SSE chunk %q: %v", data, err)
		}
		if len(c.Choices) > 0 {
			if c.Choices[0].Delta.Role == "assistant" {
				sawRole = true
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Usage != nil {
			energy = c.Usage.Energy
		}
	}
	if !sawDone || !sawRole {
		t.Fatalf("stream incomplete: done %v, role %v", sawDone, sawRole)
	}
	return text.String(), energy
}

// TestRelayAcrossMesh: node B serves the fortunes model, node A none (it
// has no model and finds no built-in one); A joins B with B's invite
// token, and a streamed request to A for B's model is answered by B
// through the mesh tunnel, with B's receipt.
func TestRelayAcrossMesh(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	b, _ := startNode(t, Config{})
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	a, _ := startNode(t, Config{Join: []string{b.invite}})
	if names := a.models.names(); len(names) != 0 {
		t.Fatalf("A serves %v, want no model", names)
	}
	waitFor(t, "A to list B", func() bool { return len(a.Status().Peers) == 1 })
	if got := a.Status().Peers[0].Admission; got != "accepting" {
		t.Fatalf("B's admission in A's status: %q, want accepting", got)
	}

	deadline := time.Now().Add(20 * time.Second)
	for len(a.mesh.PeersHosting(fortunesModel)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("A never learned that B hosts the fortunes model")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp := post(t, a, "/v1/chat/completions", `{"model":"`+fortunesModel+`","stream":true,"stream_options":{"include_usage":true},
		"max_tokens":8,"messages":[{"role":"user","content":"Love is"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	text, energy := readChatStream(t, resp.Body)
	if want := " a man who has a good idea."; !strings.HasPrefix(want, text) || text == "" {
		t.Fatalf("relayed %q, want a prefix of %q", text, want)
	}
	env, _ := hex.DecodeString(energy.EnvelopeHex)
	if _, err := receipt.Open(env, b.key.Public()); err != nil {
		t.Fatalf("the relayed answer's receipt is not B's: %v", err)
	}

	// A's model list shows B's model with B as its host.
	r, err := http.Get("http://" + a.HTTPAddr().String() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var models struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
			Local   bool   `json:"local"`
		} `json:"data"`
	}
	json.NewDecoder(r.Body).Decode(&models)
	found := false
	for _, m := range models.Data {
		if m.ID == fortunesModel && !m.Local && m.OwnedBy == b.key.ID().String() {
			found = true
		}
	}
	if !found {
		t.Fatalf("A's /v1/models = %+v, want %s hosted by B", models.Data, fortunesModel)
	}

	// Logprobs, embeddings and the tokenizer pass through the tunnel as
	// B answers them.
	for _, c := range []struct{ path, body, field string }{
		{"/v1/chat/completions", `{"model":"` + fortunesModel + `","max_tokens":6,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"Love is"}]}`, "choices"},
		{"/v1/embeddings", `{"model":"` + fortunesModel + `","input":["Love is","a bar"]}`, "data"},
		{"/tokenize", `{"model":"` + fortunesModel + `","content":"Love is a bar, and a man walks into it","with_pieces":true}`, "tokens"},
		{"/detokenize", `{"model":"` + fortunesModel + `","tokens":[1,319,767,17042,2039,964,263,2594,29892,322,263,767,1058,756,263,2217,304,367,263,767,1058,13,29893,483,29876,29915,29873,505,263,2217,304,437,29889,13,12,12,489,5122,13337,28548]}`, "content"},
	} {
		var relayed, direct map[string]json.RawMessage
		postJSON(t, a, c.path, c.body, &relayed)
		postJSON(t, b, c.path, c.body, &direct)
		if len(relayed[c.field]) < 100 || string(relayed[c.field]) != string(direct[c.field]) {
			t.Fatalf("%s relayed through A: %s\nB's own answer: %s", c.path, relayed[c.field], direct[c.field])
		}
	}
	// A GET too: the tokenizer's description.
	var infos [2]string
	for i, n := range []*Node{a, b} {
		resp, err := http.Get("http://" + n.HTTPAddr().String() + "/tokenizer_info?model=" + fortunesModel)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("tokenizer_info: %d %s", resp.StatusCode, body)
		}
		infos[i] = string(body)
	}
	if infos[0] != infos[1] || !strings.Contains(infos[0], `"eos_token":"</s>"`) {
		t.Fatalf("tokenizer_info relayed through A: %s\nB's own: %s", infos[0], infos[1])
	}
}

// TestConcurrentClientsNoLeak: 50 clients at once against the small model
// each get an answer or a 429, and once the node stops no goroutine it
// started is left behind.
func TestConcurrentClientsNoLeak(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	before := runtime.NumGoroutine()
	n, stop := startNode(t, Config{API: APIConfig{Concurrency: 2, QueueDepth: 8}})
	client := &http.Client{Transport: &http.Transport{}}
	var wg sync.WaitGroup
	codes := make(chan int, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"%s","stream":%v,"max_tokens":4,"messages":[{"role":"user","content":"The %d"}]}`, fortunesModel, i%2 == 0, i)
			resp, err := client.Post("http://"+n.HTTPAddr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	var ok, busy int
	for c := range codes {
		switch c {
		case 200:
			ok++
		case 429:
			busy++
		default:
			t.Errorf("status %d, want 200 or 429", c)
		}
	}
	t.Logf("%d answered, %d told to retry", ok, busy)
	if ok < 10 {
		t.Fatalf("only %d of 50 answered; the queue admits 10 at once", ok)
	}
	client.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before the node, %d after it stopped\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLANOnlyMesh: with lan_only the mesh itself talks to LAN addresses
// alone, whoever names the address, not only the joiner's offers.
func TestLANOnlyMesh(t *testing.T) {
	for _, lanOnly := range []bool{false, true} {
		var allow func(netip.AddrPort) bool
		_, stop := startNodeWith(t, Config{LANOnly: lanOnly}, func(n *Node) {
			tune := n.meshTuning
			n.meshTuning = func(c *mesh.Config) {
				tune(c)
				allow = c.AllowAddr
			}
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if !lanOnly {
			if allow != nil {
				t.Fatal("without lan_only the mesh was given an address filter")
			}
			continue
		}
		if allow == nil {
			t.Fatal("lan_only did not reach the mesh")
		}
		for addr, want := range map[string]bool{
			"127.0.0.1:9338": true, "192.168.1.20:9338": true, "[fe80::1]:9338": true,
			"8.8.8.8:9338": false, "[2001:4860:4860::8888]:9338": false,
		} {
			if got := allow(netip.MustParseAddrPort(addr)); got != want {
				t.Errorf("lan_only allows %s: %v, want %v", addr, got, want)
			}
		}
	}
}

// failingListener accepts until fail is closed, then fails for good.
type failingListener struct {
	net.Listener
	fail chan struct{}
}

func (l failingListener) Accept() (net.Conn, error) {
	<-l.fail
	return nil, errors.New("accept: too many open files")
}

// TestTunnelAPIFailureStopsNode: if the mesh tunnel's API stops while the
// node runs, every tunnel to it would be refused; the node stops with an
// error naming it instead (its service manager restarts it).
func TestTunnelAPIFailureStopsNode(t *testing.T) {
	fail := make(chan struct{})
	n, stop := startNodeWith(t, Config{}, func(n *Node) {
		n.wrapTunnel = func(l net.Listener) net.Listener { return failingListener{l, fail} }
	})
	close(fail)
	health := "http://" + n.HTTPAddr().String() + "/health"
	waitFor(t, "the node to stop by itself", func() bool {
		resp, err := http.Get(health)
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	err := stop()
	if err == nil || !strings.Contains(err.Error(), "mesh tunnel API stopped") || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("Serve returned %v, want the tunnel API's failure", err)
	}
}
