package ggufengine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// BenchmarkSpeculativeBatch is make bench-spec-batch: BENCH_SERVES
// (default 4) concurrent greedy serves of 64 tokens on the built-in
// model speculating with a draft model, their drafts stepped together on
// the draft model's scheduler (batched) and each on its own session
// (unbatched), beside plain decoding: the serves' tokens per second
// altogether (prefill included), and how many sequences the draft's steps
// carried on average. The draft is meshnode-fortunes-draft from
// $MESHNODE_MODELS, else the built-in model itself; its windows are kept
// on (c 0.05, no threshold) so that every round drafts. Each side's
// fastest of BENCH_REPS (default 5) rounds, the three alternating.
func BenchmarkSpeculativeBatch(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_SPEC") == "" {
		b.Skip("set MESHNODE_BENCH_SPEC=1 (make bench-spec-batch)")
	}
	serves, reps := benchEnvInt("BENCH_SERVES", 4), benchEnvInt("BENCH_REPS", 5)
	draft, name := fortunesPath, "built-in Q8_0 (itself)"
	if d := os.Getenv("MESHNODE_MODELS"); d != "" {
		if p := filepath.Join(d, "meshnode-fortunes-draft-q8_0.gguf"); fileExists(p) {
			draft, name = p, "meshnode-fortunes-draft"
		}
	}
	m, err := Load(fortunesPath, Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Draft: draft, DraftMax: 4, DraftCost: 0.05, DraftThreshold: -1, Sessions: serves})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	e := m.Engine()
	batched := e.draftSched
	all, err := modeltest.ReadGreedyReference(referencePath)
	if err != nil {
		b.Fatal(err)
	}
	refs := slices.DeleteFunc(all, func(c modeltest.GreedyCase) bool { return !strings.Contains(c.File, "q8_0") })
	// round runs the serves at once and returns their tokens per second.
	round := func(speculate bool) float64 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		tokens := 0
		start := time.Now()
		for i := range serves {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := engine.WithSpeculation(context.Background(), speculate)
				req := request(64, nil)
				out, err := e.Serve(ctx, req, refs[i%len(refs)].Prompt, func(uint32) error { return nil })
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				tokens += int(out.TokensOut)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return float64(tokens) / time.Since(start).Seconds()
	}
	var plain, unbatched, withBatch float64
	before := e.DraftSchedStats()
	for r := range reps {
		sides := []func(){
			func() { plain = max(plain, round(false)) },
			func() { e.draftSched = nil; unbatched = max(unbatched, round(true)); e.draftSched = batched },
			func() { withBatch = max(withBatch, round(true)) },
		}
		for i := range sides {
			sides[(i+r)%len(sides)]()
		}
	}
	after := e.DraftSchedStats()
	perStep := float64(after.Tokens-before.Tokens) / float64(max(1, after.Steps-before.Steps))
	fmt.Printf("%d serves, draft %s: plain %.1f tok/s, speculative unbatched drafts %.1f tok/s (%.2f×), batched drafts %.1f tok/s (%.2f×; %.2f× unbatched); draft steps carried %.2f tokens on average, at most %d sequences\n",
		serves, name, plain, unbatched, unbatched/plain, withBatch, withBatch/plain, withBatch/unbatched, perStep, after.MaxSeqs)
}

func benchEnvInt(key string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(key), &v); err == nil && v > 0 {
		return v
	}
	return def
}
