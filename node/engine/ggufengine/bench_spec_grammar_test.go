package ggufengine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// BenchmarkConstrainedSpeculation is make bench-spec-grammar: greedy
// serves held to a grammar, speculating against plainly (the same
// tokens, TestSpeculativeConstrained), as the engine serves them: windows
// priced by the measurement at load. Cases: the built-in Q8_0 with prompt
// lookup on a prompt that repeats itself, under a JSON schema of one
// string and under GBNF of words; and, where the bench cache holds the
// 1B-shaped Q8_0 (make bench-spec makes it), that model with the
// built-in Q8_0 as draft under the schema and under make bench-grammar's
// (several keys, an enum, arrays), and with lookup. Decode tok/s
// after the first token, each side's fastest of BENCH_REPS (default 3)
// alternating rounds, the speedup and the drafts' acceptance.
func BenchmarkConstrainedSpeculation(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_SPEC") == "" {
		b.Skip("set MESHNODE_BENCH_SPEC=1 (make bench-spec-grammar)")
	}
	reps := benchEnvInt("BENCH_REPS", 3)
	schema, err := grammar.FromSchema([]byte(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`))
	if err != nil {
		b.Fatal(err)
	}
	words, err := grammar.ParseGBNF(`root ::= [a-zA-Z .,]+`)
	if err != nil {
		b.Fatal(err)
	}
	keys, err := grammar.FromSchema([]byte(benchSchema)) // make bench-grammar's: several keys, an enum, arrays
	if err != nil {
		b.Fatal(err)
	}
	const repeating = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
	type benchCase struct {
		name, target, draft, prompt string
		g                           *grammar.Grammar
		tg                          uint32
	}
	cases := []benchCase{
		{"built-in Q8_0 + lookup, JSON schema", fortunesPath, DraftLookup, repeating, schema, 128},
		{"built-in Q8_0 + lookup, GBNF words", fortunesPath, DraftLookup, repeating, words, 128},
	}
	cache := benchCache(b)
	if p := filepath.Join(cache, "meshnode-fortunes-1b-shape-q8_0.gguf"); fileExists(p) {
		cases = append(cases,
			benchCase{"fortunes-1B Q8_0 + built-in Q8_0 draft, JSON schema", p, fortunesPath, "A fortune, as JSON:", schema, 48},
			benchCase{"fortunes-1B Q8_0 + built-in Q8_0 draft, bench-grammar's schema", p, fortunesPath, "A fortune, as JSON:", keys, 64},
			benchCase{"fortunes-1B Q8_0 + lookup, JSON schema", p, DraftLookup, repeating, schema, 48})
	} else {
		b.Logf("no 1B-shaped Q8_0 in %s (make bench-spec makes it): the built-in model's cases only", cache)
	}
	for _, bc := range cases {
		m, err := Load(bc.target, Config{Fidelity: receipt.F1, UJPerToken: 1, Context: 512, Sessions: 1, Draft: bc.draft})
		if err != nil {
			b.Fatal(err)
		}
		prompt := m.Tokenize(bc.prompt, true, false)
		id := engine.GrammarID(bc.g)
		// round serves once and returns decode tok/s after the first
		// token, and the outcome.
		round := func(speculate bool) (float64, engine.Outcome) {
			ctx := engine.WithSpeculation(engine.WithGrammar(context.Background(), bc.g), speculate)
			var first time.Time
			n := 0
			out, err := m.Engine().Serve(ctx, request(bc.tg, &receipt.Sampling{Grammar: &id}), prompt, func(uint32) error {
				if n == 0 {
					first = time.Now()
				}
				n++
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if n < 2 {
				b.Fatalf("%s: %d tokens", bc.name, n)
			}
			return float64(n-1) / time.Since(first).Seconds(), out
		}
		var plain, spec float64
		var out engine.Outcome
		for r := range b.N * reps {
			sides := []func(){
				func() { p, _ := round(false); plain = max(plain, p) },
				func() {
					s, o := round(true)
					if s > spec {
						spec, out = s, o
					}
				},
			}
			sides[r%2]()
			sides[(r+1)%2]()
		}
		acc := 0.0
		if out.SpecProposed > 0 {
			acc = float64(out.SpecAccepted) / float64(out.SpecProposed)
		}
		fmt.Printf("%-64s plain %7.1f tok/s, speculative %7.1f tok/s: %.2f× (%d tokens, %d of %d drafts accepted, %.2f)\n",
			bc.name, plain, spec, spec/plain, out.TokensOut, out.SpecAccepted, out.SpecProposed, acc)
		m.Close()
	}
}
