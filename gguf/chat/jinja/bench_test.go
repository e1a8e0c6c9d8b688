package jinja

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	published "github.com/ardanlabs/jinja"
)

// BenchmarkRender times rendering a 100-turn, 207 KB conversation with
// three of the chat templates gguf/chat renders, within DefaultLimits,
// against the engine as published (ardanlabs/jinja v1.8.0, which charges
// nothing) in the same run: x_ref is the published engine's time over
// this one's, so the budget's cost is what x_ref falls short of 1.
func BenchmarkRender(b *testing.B) {
	var msgs []any
	for i := range 100 {
		msgs = append(msgs, map[string]any{
			"role":    []string{"user", "assistant"}[i%2],
			"content": strings.Repeat(fmt.Sprintf("turn %d says a few words. ", i), 80),
		})
	}
	data := map[string]any{"messages": msgs, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}
	for _, name := range []string{"llama-3.1", "qwen3", "gemma-4"} {
		src, err := os.ReadFile(filepath.Join("..", "testdata", "templates", name+".jinja"))
		if err != nil {
			b.Fatal(err)
		}
		ours, err := Compile(string(src))
		if err != nil {
			b.Fatal(err)
		}
		ref, err := published.Compile(string(src))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			want, err := ref.Render(data)
			if err != nil {
				b.Fatal(err)
			}
			if got, err := ours.Render(data); err != nil || got != want {
				b.Fatalf("renders %d bytes, %v; the published engine %d", len(got), err, len(want))
			}
			refNs := bestNanos(func() { _, _ = ref.Render(data) })
			ourNs := bestNanos(func() { _, _ = ours.Render(data) })
			for b.Loop() {
				_, _ = ours.Render(data)
			}
			b.ReportMetric(refNs/ourNs, "x_ref")
			b.ReportMetric(ourNs/1e6, "ms")
		})
	}
}

// bestNanos is f's time in nanoseconds, the least of five rounds of 10
// calls each (a loaded machine only ever adds time).
func bestNanos(f func()) float64 {
	best := math.Inf(1)
	for range 5 {
		start := time.Now()
		for range 10 {
			f()
		}
		best = min(best, float64(time.Since(start).Nanoseconds())/10)
	}
	return best
}
