package node

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
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
func startNode(t *testing.T, cfg Config) (*Node, func() error) {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.QUICAddr = "127.0.0.1:0"
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

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

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

// TestReferenceServeWithReceipt: with no model and no built-in model file,
// the node serves mesh-reference, and the receipt in usage.energy verifies
// under the node's key, chains, and is held by the witness endpoint.
func TestReferenceServeWithReceipt(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", "")
	n, _ := startNode(t, Config{})

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
	t.Setenv("MESHNODE_DEFAULT_MODEL", "")
	n, stop := startNode(t, Config{})
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
