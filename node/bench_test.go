package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

const benchTokens = 16

// BenchmarkServeOverhead compares a chat completion through the whole
// node (HTTP, JSON, steward: route, meter, seal, chain) with the same
// reference-engine serve called directly, and reports the overhead. The
// two alternate, one of each per iteration, so that warm-up and the
// machine's other load fall on both alike.
func BenchmarkServeOverhead(b *testing.B) {
	eng := engine.NewReference(engine.ReferenceConfig{Fidelity: DefaultFidelity, UJPerToken: referenceUJPerToken})
	req := receipt.ServeRequest{PromptHash: receipt.PromptHash([]byte("hi")), PromptTokens: 2, MaxTokens: benchTokens,
		FidelityFloor: 0, JouleCeilingUJ: DefaultJouleCeilingUJ}
	direct := func() {
		if _, err := eng.Serve(context.Background(), req, []uint32{'h', 'i'}, func(uint32) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}

	n, _ := startNode(b, Config{Models: []string{ReferenceModel}})
	client := &http.Client{}
	body := fmt.Sprintf(`{"model":"mesh-reference","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, benchTokens)
	url := "http://" + n.HTTPAddr().String() + "/v1/chat/completions"
	viaNode := func() {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	direct() // warm both paths: the first request dials, the first serve pages code in
	viaNode()

	var engineTime, nodeTime time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		direct()
		t1 := time.Now()
		viaNode()
		engineTime += t1.Sub(t0)
		nodeTime += time.Since(t1)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
	b.ReportMetric(ms(nodeTime), "node_ms/req")
	b.ReportMetric(ms(engineTime), "engine_ms/req")
	b.ReportMetric(ms(nodeTime-engineTime), "overhead_ms/req")
	b.ReportMetric(100*float64(nodeTime-engineTime)/float64(engineTime), "overhead_%")
}

// BenchmarkRequestsPerSecond drives the node with the reference engine at
// several client concurrencies.
func BenchmarkRequestsPerSecond(b *testing.B) {
	for _, conc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			n, _ := startNode(b, Config{API: APIConfig{Concurrency: 8, QueueDepth: 128}, Models: []string{ReferenceModel}})
			url := "http://" + n.HTTPAddr().String() + "/v1/chat/completions"
			body := fmt.Sprintf(`{"model":"mesh-reference","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, benchTokens)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
			var wg sync.WaitGroup
			var refused atomic.Int64
			work := make(chan struct{})
			start := time.Now()
			for range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						resp, err := client.Post(url, "application/json", strings.NewReader(body))
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusTooManyRequests {
							refused.Add(1)
						} else if resp.StatusCode != http.StatusOK {
							b.Errorf("status %d", resp.StatusCode)
						}
					}
				}()
			}
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
			b.ReportMetric(float64(int64(b.N)-refused.Load())/time.Since(start).Seconds(), "answered/s")
			b.ReportMetric(float64(refused.Load()), "429s")
		})
	}
}

// hugePromptBody is a chat completion whose one message fills the API's
// 4 MiB body cap with ordinary English: far more tokens than the built-in
// model's context.
func hugePromptBody() string {
	const head, tail = `{"model":"` + fortunesModel + `","max_tokens":8,"messages":[{"role":"user","content":"`, `"}]}`
	sentence := "The quick brown fox jumps over the lazy dog. "
	n := (4<<20 - len(head) - len(tail)) / len(sentence)
	return head + strings.Repeat(sentence, n) + tail
}

// BenchmarkRejectHugePrompt measures how long the node takes to refuse a
// prompt that cannot fit the built-in model's context, and (B/op, with
// the node in this process) what refusing it allocates.
func BenchmarkRejectHugePrompt(b *testing.B) {
	b.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(b))
	n, _ := startNode(b, Config{})
	url := "http://" + n.HTTPAddr().String() + "/v1/chat/completions"
	body := hugePromptBody()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			b.Fatalf("status %d, want 400", resp.StatusCode)
		}
	}
}

// BenchmarkChoices compares, on the built-in model, a request for k
// choices with the same k requests sent one after another (choice j is
// the request with seed+j alone: the same tokens). The choices share the
// model's slots, so the batched engine decodes them together; the
// speedup is what that is worth for k. The two alternate, one of each per
// iteration.
func BenchmarkChoices(b *testing.B) {
	b.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(b))
	n, _ := startNode(b, Config{})
	url := "http://" + n.HTTPAddr().String() + "/v1/completions"
	post := func(body string) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if out, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
			b.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	request := func(choices, seed int) string {
		return fmt.Sprintf(`{"model":%q,"prompt":"A man walks into a bar","max_tokens":64,"temperature":0.8,"seed":%d,"n":%d}`, fortunesModel, seed, choices)
	}
	for _, k := range []int{2, 4} {
		b.Run(fmt.Sprintf("n%d", k), func(b *testing.B) {
			var together, apart time.Duration
			for i := range b.N {
				t0 := time.Now()
				post(request(k, i*k))
				t1 := time.Now()
				for j := range k {
					post(request(1, i*k+j))
				}
				together, apart = together+t1.Sub(t0), apart+time.Since(t1)
			}
			b.ReportMetric(float64(together.Milliseconds())/float64(b.N), "choices_ms/req")
			b.ReportMetric(float64(apart.Milliseconds())/float64(b.N), "one_by_one_ms")
			b.ReportMetric(float64(apart)/float64(together), "speedup")
		})
	}
}
