package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNodeLoad is the load generator of scripts/node-batch-bench.sh (make
// bench-node-batch), not a test: against the node at MESHNODE_LOAD_URL
// serving MESHNODE_LOAD_MODEL, for each concurrency C in MESHNODE_LOAD_C
// (default 1,4,8,32), C clients each send MESHNODE_LOAD_REQUESTS (default
// 2) streamed completions one after another, every prompt distinct (no
// cache reuse), MESHNODE_LOAD_TOKENS (default 32) tokens each. It prints
// per C the aggregate completion tokens per second over the level's wall
// time, and the p50 and p99 time to first token.
func TestNodeLoad(t *testing.T) {
	url := os.Getenv("MESHNODE_LOAD_URL")
	if url == "" {
		t.Skip("the load generator of scripts/node-batch-bench.sh: set MESHNODE_LOAD_URL")
	}
	model := os.Getenv("MESHNODE_LOAD_MODEL")
	levels := []int{1, 4, 8, 32}
	if v := os.Getenv("MESHNODE_LOAD_C"); v != "" {
		levels = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("MESHNODE_LOAD_C %q", v)
			}
			levels = append(levels, n)
		}
	}
	perClient := loadEnvInt("MESHNODE_LOAD_REQUESTS", 2)
	tokens := loadEnvInt("MESHNODE_LOAD_TOKENS", 32)
	label := os.Getenv("MESHNODE_LOAD_LABEL")
	seq := 0
	var mu sync.Mutex
	prompt := func() string {
		mu.Lock()
		defer mu.Unlock()
		seq++
		// Distinct from the first word on, so that no request reuses
		// another's cached prefix; about 40 tokens.
		return fmt.Sprintf("Request %d asks: tell me, in plain words and at some length, what the river said to the mountain when the long winter finally ended and the first birds came back to the valley", seq)
	}
	for _, c := range levels {
		var (
			ttfts  []time.Duration
			total  int
			failed int
			wg     sync.WaitGroup
		)
		start := time.Now()
		for range c {
			wg.Go(func() {
				for range perClient {
					ttft, n, err := streamOnce(url, model, prompt(), tokens)
					mu.Lock()
					if err != nil {
						failed++
						t.Logf("C=%d: %v", c, err)
					} else {
						ttfts = append(ttfts, ttft)
						total += n
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		wall := time.Since(start)
		slices.Sort(ttfts)
		pct := func(p float64) time.Duration {
			if len(ttfts) == 0 {
				return 0
			}
			return ttfts[min(len(ttfts)-1, int(p*float64(len(ttfts))))]
		}
		fmt.Printf("load %s C=%d requests=%d failed=%d tokens=%d wall=%.1fs aggregate=%.1f tok/s ttft_p50=%.0fms ttft_p99=%.0fms\n",
			label, c, len(ttfts), failed, total, wall.Seconds(), float64(total)/wall.Seconds(),
			float64(pct(0.50).Microseconds())/1e3, float64(pct(0.99).Microseconds())/1e3)
	}
}

func loadEnvInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// streamOnce sends one streamed completion and returns the time to its
// first text and the completion tokens its usage reports.
func streamOnce(url, model, prompt string, maxTokens int) (time.Duration, int, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(b.String()))
	}
	var ttft time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return 0, 0, fmt.Errorf("event %q: %w", data, err)
		}
		if ttft == 0 && len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			ttft = time.Since(start)
		}
		if ev.Usage != nil {
			n = ev.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if ttft == 0 {
		ttft = time.Since(start) // no text at all: the whole request
	}
	return ttft, n, nil
}
