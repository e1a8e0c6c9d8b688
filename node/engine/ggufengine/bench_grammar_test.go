package ggufengine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/node/receipt"
)

// benchSchema is a realistic structured output: strings, an enum, a
// number, an array of objects.
const benchSchema = `{"type":"object","properties":{"title":{"type":"string","maxLength":40},"kind":{"enum":["quote","joke","fact"]},"score":{"type":"number"},"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":4},"refs":{"type":"array","items":{"type":"object","properties":{"who":{"type":"string","maxLength":20},"year":{"type":"integer"}},"required":["who","year"],"additionalProperties":false},"maxItems":2}},"required":["title","kind","score","tags"],"additionalProperties":false}`

// grammarBenchModel is the 1B-shaped Q8_0 file bench-engine makes (in
// $BENCH_CACHE or the user cache's meshnode-bench) under
// MESHNODE_BENCH_GRAMMAR=1 when present, else the built-in model, with the
// reason.
func grammarBenchModel(b *testing.B) string {
	if os.Getenv("MESHNODE_BENCH_GRAMMAR") == "" {
		b.Log("the built-in model (MESHNODE_BENCH_GRAMMAR=1, as make bench-grammar sets, takes the 1B-shaped Q8_0)")
		return fortunesPath
	}
	p := filepath.Join(benchCache(b), "llama-3.2-1b-shape-q8_0.gguf")
	if _, err := os.Stat(p); err != nil {
		b.Logf("the built-in model: no 1B-shaped Q8_0 (%v; make bench-spec or bench-engine makes one)", err)
		return fortunesPath
	}
	return p
}

// benchCache is where the benchmarks' large files are made and kept:
// $BENCH_CACHE, or the user cache's meshnode-bench.
func benchCache(b *testing.B) string {
	if dir := os.Getenv("BENCH_CACHE"); dir != "" {
		return dir
	}
	c, err := os.UserCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Join(c, "meshnode-bench")
}

// BenchmarkGrammarMask measures what structured outputs cost per token
// against decoding: a seeded sampled generation under benchSchema, then
// its tokens replayed through a fresh constraint (a mask and an advance
// per token, with the mask cache, as the engine runs them) and through
// the trie walk alone (no cache, the worst case), against the model's
// decode time per token, unconstrained and constrained. The goal is a
// mask under 10% of a decode step.
func BenchmarkGrammarMask(b *testing.B) {
	path := grammarBenchModel(b)
	m, err := Load(path, Config{Fidelity: receipt.F1, UJPerToken: 1, Context: 1024, Sessions: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	g, err := grammar.FromSchema([]byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	v := m.Constrainer().Vocab()
	build := time.Since(start)
	prompt := m.Tokenize("A fortune, as JSON:", true, false)
	const maxTokens = 64
	params := sample.Params{Temperature: 0.8, TopK: 40, Seed: 3}

	// decode is the time per token after the first (the prompt's).
	decode := func(gr *grammar.Grammar) (time.Duration, []uint32) {
		var first time.Time
		var toks []uint32
		_, err := m.Engine().Generate(context.Background(), prompt, Generation{Sampling: params, MaxTokens: maxTokens, Grammar: gr}, func(t uint32) error {
			if len(toks) == 0 {
				first = time.Now()
			}
			toks = append(toks, t)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if len(toks) < 2 {
			b.Fatalf("%d tokens", len(toks))
		}
		return time.Since(first) / time.Duration(len(toks)-1), toks
	}
	var plain, constrained, masked, walk time.Duration
	var out []uint32
	for range b.N {
		plain, _ = decode(nil)
		constrained, out = decode(g)

		// Each replay three times, the best kept: the machine's other
		// load is not the mask's cost.
		masked, walk = time.Hour, time.Hour
		for range 3 {
			c, err := grammar.NewConstraint(g, v, m.Constrainer().piece)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			for _, tok := range out {
				if _, err := c.Mask(); err != nil {
					b.Fatal(err)
				}
				if err := c.Accept(tok); err != nil {
					b.Fatal(err)
				}
			}
			masked = min(masked, time.Since(t0)/time.Duration(len(out)))
			// The trie walk alone, every token: no cache.
			var scratch []uint64
			m2, _ := g.NewMatcher()
			t0 = time.Now()
			for _, tok := range out {
				if scratch, err = v.Mask(m2, scratch); err != nil {
					b.Fatal(err)
				}
				if err := m2.Advance(m.Constrainer().piece(tok)); err != nil {
					b.Fatal(err)
				}
			}
			walk = min(walk, time.Since(t0)/time.Duration(len(out)))
		}
	}
	text, _ := m.Tokenizer().Decode(out, tokenizerContinue)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(masked), "mask_ms/tok")
	b.ReportMetric(ms(walk), "walk_ms/tok")
	b.ReportMetric(ms(plain), "decode_ms/tok")
	b.ReportMetric(float64(masked)/float64(plain), "mask/decode")
	fmt.Printf("model %s: vocabulary %d tokens, trie %d nodes built in %v\n", filepath.Base(path), v.Size(), v.Nodes(), build.Round(time.Millisecond))
	fmt.Printf("decode %.2f ms/token unconstrained, %.2f ms/token constrained (%d tokens: %.60q…)\n", ms(plain), ms(constrained), len(out), text)
	fmt.Printf("mask %.3f ms/token as the engine runs it (cached by state), %.3f ms/token walking the trie every token\n", ms(masked), ms(walk))
	fmt.Printf("mask/decode %.1f%% (goal < 10%%), uncached walk/decode %.1f%%, constrained/unconstrained decode %.3f\n",
		100*float64(masked)/float64(plain), 100*float64(walk)/float64(plain), float64(constrained)/float64(plain))
}
