package ggufengine

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/harmony"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/node/receipt"
)

// harmonyFixture writes the gpt-oss random-weight fixture with a harmony
// vocabulary: the built-in model's, cut to the fixture's 2048 tokens,
// with 7 of them renamed to harmony's markers (as o200k_harmony has its
// own), and returns its path.
func harmonyFixture(t *testing.T) string {
	t.Helper()
	p, err := modeltest.WriteHarmonyFixture(t.TempDir(), fortunesPath, harmony.Markers)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHarmonyForcedCall: under toolcall.Grammar's harmony grammar the
// gpt-oss fixture writes, token by token through the engine's mask, only
// what the grammar takes: the markers are tokens that spell text
// (user-defined), <|call|> ends the generation where the call is whole,
// and a reply that ends by itself is one call of the named tool whose
// arguments meet its schema, the reasoning apart.
func TestHarmonyForcedCall(t *testing.T) {
	m, err := Load(harmonyFixture(t), Config{Fidelity: receipt.F1, UJPerToken: 1, Context: 1024, Sessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tok := m.Tokenizer()
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"} {
		id, ok := tok.Lookup(s)
		if p, _ := tok.Piece(id, false); !ok || p != s || tok.IsEOG(id) {
			t.Fatalf("marker %s: piece %q, end of generation %v: the grammar could not write it", s, p, tok.IsEOG(id))
		}
	}
	if id, ok := tok.Lookup("<|call|>"); !ok || !tok.IsEOG(id) {
		t.Fatal("<|call|> does not end the generation")
	}
	const schema = `{"type":"object","properties":{"city":{"type":"string","maxLength":6},"days":{"type":"boolean"}},"required":["city"],"additionalProperties":false}`
	g, prefix, err := toolcall.Grammar(toolcall.Harmony, []toolcall.Tool{{Name: "get_weather", Parameters: []byte(schema)}, {Name: "now"}}, "get_weather", true)
	if err != nil || prefix != "" {
		t.Fatalf("grammar: %v, prefix %q", err, prefix)
	}
	prompt := m.Tokenize("What is the weather in Oslo?", true, false)
	const budget = 96
	whole := 0
	for seed := range uint64(12) {
		s := &receipt.Sampling{TemperatureE6: 1_500_000, Seed: &seed}
		_, toks, err := constrained(t, m.Engine(), m, g, budget, s, prompt)
		if err != nil {
			t.Fatal(err)
		}
		// The bytes the mask matched: each token's text (the last, an
		// end of generation, has none).
		var text strings.Builder
		for _, id := range toks {
			p, _ := tok.Piece(id, false)
			text.WriteString(p)
		}
		mt, err := g.NewMatcher()
		if err != nil {
			t.Fatal(err)
		}
		if err := mt.Advance([]byte(text.String())); err != nil {
			t.Fatalf("seed %d: the output leaves the grammar: %q: %v", seed, text.String(), err)
		}
		if len(toks) >= budget {
			continue // still reasoning, or in the arguments
		}
		whole++
		rep := harmony.Parse(text.String(), true)
		if !mt.Accepting() || rep.Content != "" || len(rep.Calls) != 1 || rep.Calls[0].Name != "get_weather" {
			t.Fatalf("seed %d: ended by itself with %q: %+v", seed, text.String(), rep)
		}
		if err := grammartest.Validate([]byte(schema), []byte(rep.Calls[0].Arguments)); err != nil {
			t.Fatalf("seed %d: arguments %q: %v", seed, rep.Calls[0].Arguments, err)
		}
		t.Logf("seed %d: %d tokens: %q", seed, len(toks), text.String())
	}
	if whole == 0 {
		t.Fatalf("no reply of %d seeds ended within %d tokens", 12, budget)
	}
}
