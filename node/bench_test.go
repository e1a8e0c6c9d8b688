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
// reference-engine serve called directly, and reports the overhead.
func BenchmarkServeOverhead(b *testing.B) {
	b.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	eng := engine.NewReference(engine.ReferenceConfig{Fidelity: DefaultFidelity, UJPerToken: referenceUJPerToken})
	req := receipt.ServeRequest{PromptHash: receipt.PromptHash([]byte("hi")), PromptTokens: 2, MaxTokens: benchTokens,
		FidelityFloor: 0, JouleCeilingUJ: DefaultJouleCeilingUJ}
	// The engine alone, timed by hand: testing.Benchmark cannot nest.
	const directRuns = 200
	start := time.Now()
	for range directRuns {
		if _, err := eng.Serve(context.Background(), req, []uint32{'h', 'i'}, func(uint32) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	directMs := float64(time.Since(start).Microseconds()) / directRuns / 1000

	n, _ := startNode(b, Config{})
	client := &http.Client{}
	body := fmt.Sprintf(`{"model":"mesh-reference","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, benchTokens)
	url := "http://" + n.HTTPAddr().String() + "/v1/chat/completions"
	b.ResetTimer()
	for range b.N {
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
	b.StopTimer()
	perReq := float64(b.Elapsed().Microseconds()) / float64(b.N) / 1000
	b.ReportMetric(perReq, "node_ms/req")
	b.ReportMetric(directMs, "engine_ms/req")
	b.ReportMetric(perReq-directMs, "overhead_ms/req")
	b.ReportMetric(100*(perReq-directMs)/directMs, "overhead_%")
}

// BenchmarkRequestsPerSecond drives the node with the reference engine at
// several client concurrencies.
func BenchmarkRequestsPerSecond(b *testing.B) {
	b.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	for _, conc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			n, _ := startNode(b, Config{API: APIConfig{Concurrency: 8, QueueDepth: 128}})
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
