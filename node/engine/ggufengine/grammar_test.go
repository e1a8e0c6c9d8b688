package ggufengine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// proofSchemas bound every string and array, so that any sentence of
// their grammars fits the token budget: a model, however random, must
// finish the JSON.
var proofSchemas = []struct{ name, schema string }{
	{"flat", `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"},"mood":{"enum":["happy","sad","wise"]},"ok":{"type":"boolean"}},"required":["name","age","mood"],"additionalProperties":false}`},
	{"nested", `{"type":"object","properties":{"title":{"type":"string","minLength":1,"maxLength":6},"tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":2},"at":{"$ref":"#/$defs/pt"}},"required":["title","at"],"additionalProperties":false,"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}}}`},
	{"anyOf array", `{"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"},{"type":"integer"},{"const":"x"}]},"minItems":2,"maxItems":4}`},
}

// fixtureModels are the random-weight fixtures the proof runs on, with
// the built-in model's tokenizer cut to 2048 tokens.
var fixtureModels = sync.OnceValues(func() ([]string, error) {
	dir, err := os.MkdirTemp("", "grammar-fixtures")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, fx := range [][2]string{{"llama", "Q8_0"}, {"qwen3", "F16"}} {
		p, err := writeFixture(dir, fx[0], fx[1])
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
})

// writeFixture writes modeltest's parity fixture of arch in fileType,
// with the built-in model's tokenizer cut to 2048 tokens, into dir and
// returns its path.
func writeFixture(dir, arch, fileType string) (string, error) {
	f, err := gguf.Open(fortunesPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := modeltest.Generate(modeltest.Fixture(arch, fileType), f.Metadata)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, arch+"-"+strings.ToLower(fileType)+".gguf")
	return p, os.WriteFile(p, b, 0o600)
}

// constrained serves req under g on e and returns the output's text.
func constrained(t *testing.T, e *Engine, m *Model, g *grammar.Grammar, maxTokens uint32, s *receipt.Sampling, prompt []uint32) (string, []uint32, error) {
	t.Helper()
	text, toks, _, err := constrainedOutcome(t, e, m, g, maxTokens, s, prompt)
	return text, toks, err
}

// constrainedOutcome is constrained with the serve's outcome.
func constrainedOutcome(t *testing.T, e *Engine, m *Model, g *grammar.Grammar, maxTokens uint32, s *receipt.Sampling, prompt []uint32) (string, []uint32, engine.Outcome, error) {
	t.Helper()
	if s == nil {
		s = &receipt.Sampling{}
	}
	id := engine.GrammarID(g)
	s.Grammar = &id
	var got []uint32
	out, err := e.Serve(engine.WithGrammar(context.Background(), g), request(maxTokens, s), prompt, func(tok uint32) error {
		got = append(got, tok)
		return nil
	})
	text, derr := m.Tokenizer().Decode(got, tokenizerContinue)
	if derr != nil {
		t.Fatal(derr)
	}
	return text, got, out, err
}

// TestConstrainedOutputValidates is the proof: the built-in model and
// random-weight fixtures, greedy and sampled, write JSON that parses and
// meets the schema, ending where the grammar ends.
func TestConstrainedOutputValidates(t *testing.T) {
	paths, err := fixtureModels()
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]*Model{"fortunes": fortunes(t)}
	for _, p := range paths {
		m, err := Load(p, Config{Fidelity: receipt.F1, UJPerToken: 1, Context: 1024, Sessions: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		models[filepath.Base(p)] = m
	}
	seed := uint64(11)
	samplings := map[string]func() *receipt.Sampling{
		"greedy":  func() *receipt.Sampling { return nil },
		"sampled": func() *receipt.Sampling { return &receipt.Sampling{TemperatureE6: 1_000_000, TopK: 40, Seed: &seed} },
		"hot":     func() *receipt.Sampling { return &receipt.Sampling{TemperatureE6: 1_500_000, Seed: &seed} },
	}
	for name, m := range models {
		prompt := m.Tokenize("Answer in JSON:", true, false)
		budget := uint32(m.ContextLength() - len(prompt))
		for _, sc := range proofSchemas {
			g, err := grammar.FromSchema([]byte(sc.schema))
			if err != nil {
				t.Fatal(err)
			}
			for sname, sp := range samplings {
				t.Run(fmt.Sprintf("%s/%s/%s", name, sc.name, sname), func(t *testing.T) {
					text, toks, err := constrained(t, m.Engine(), m, g, budget, sp(), prompt)
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%d tokens: %q", len(toks), text)
					if uint32(len(toks)) >= budget {
						t.Fatalf("%d tokens, the whole budget: %q", len(toks), text)
					}
					if err := grammartest.Validate([]byte(sc.schema), []byte(text)); err != nil {
						t.Fatalf("%q: %v", text, err)
					}
				})
			}
		}
	}
}

// TestConstrainedJSONObject: json_object's grammar (any object, not
// bounded) on the built-in model: within the budget the output is an
// object, or a prefix the grammar still accepts when the budget ran out.
func TestConstrainedJSONObject(t *testing.T) {
	m := fortunes(t)
	g, err := grammar.AnyJSONObject()
	if err != nil {
		t.Fatal(err)
	}
	prompt := m.Tokenize("{", true, false)
	text, toks, err := constrained(t, m.Engine(), m, g, 120, nil, prompt)
	if err != nil {
		t.Fatal(err)
	}
	mt, _ := g.NewMatcher()
	if err := mt.Advance([]byte(text)); err != nil {
		t.Fatalf("%q is not a prefix the grammar takes: %v", text, err)
	}
	if len(toks) < 120 {
		if err := grammartest.Validate([]byte(`{"type":"object"}`), []byte(text)); err != nil {
			t.Fatalf("%q ended early but is not an object: %v", text, err)
		}
	}
}

// TestConstrainedBatched: constrained serves batched with each other and
// with a plain one each keep to their own grammar, and the plain one's
// tokens are those it gets alone.
func TestConstrainedBatched(t *testing.T) {
	m := fortunes(t)
	prompt := m.Tokenize("The meaning of life", true, false)
	alone, _ := serve(t, m.Engine(), request(48, nil), prompt)
	budget := uint32(m.ContextLength() - len(prompt))
	var wg sync.WaitGroup
	errs := make(chan error, len(proofSchemas)+1)
	for _, sc := range proofSchemas {
		g, err := grammar.FromSchema([]byte(sc.schema))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			text, _, err := constrained(t, m.Engine(), m, g, budget, nil, prompt)
			if err == nil {
				err = grammartest.Validate([]byte(sc.schema), []byte(text))
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %q: %w", sc.name, text, err)
			}
		})
	}
	wg.Go(func() {
		var got []uint32
		_, err := m.Engine().Serve(context.Background(), request(48, nil), prompt, func(tok uint32) error {
			got = append(got, tok)
			return nil
		})
		if err == nil && fmt.Sprint(got) != fmt.Sprint(alone) {
			err = fmt.Errorf("plain serve batched with constrained ones: %v, alone %v", got, alone)
		}
		if err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestGrammarIdentityChecked: an engine serves under a grammar only when
// the request names exactly that one.
func TestGrammarIdentityChecked(t *testing.T) {
	m := fortunes(t)
	prompt := m.Tokenize("x", true, false)
	g, _ := grammar.FromSchema([]byte(`{"type":"boolean"}`))
	other, _ := grammar.FromSchema([]byte(`{"type":"null"}`))
	id, otherID := engine.GrammarID(g), engine.GrammarID(other)
	emit := func(uint32) error { return nil }
	for name, tc := range map[string]struct {
		ctx context.Context
		s   *receipt.Sampling
	}{
		"named, not carried": {context.Background(), &receipt.Sampling{Grammar: &id}},
		"carried, not named": {engine.WithGrammar(context.Background(), g), nil},
		"another":            {engine.WithGrammar(context.Background(), g), &receipt.Sampling{Grammar: &otherID}},
	} {
		if _, err := m.Engine().Serve(tc.ctx, request(4, tc.s), prompt, emit); !errors.Is(err, engine.ErrRefused) {
			t.Errorf("%s: %v, want ErrRefused", name, err)
		}
	}
}

// TestConstrainedCancelled: a constrained serve whose client leaves
// returns the context's error, its mask's goroutine joined.
func TestConstrainedCancelled(t *testing.T) {
	m := fortunes(t)
	g, _ := grammar.AnyJSONObject()
	id := engine.GrammarID(g)
	ctx, cancel := context.WithCancel(engine.WithGrammar(context.Background(), g))
	defer cancel()
	n := 0
	_, err := m.Engine().Serve(ctx, request(100, &receipt.Sampling{Grammar: &id}), m.Tokenize("x", true, false), func(uint32) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v after %d tokens, want context.Canceled", err, n)
	}
}

// TestLazyGrammarServe: under a lazy grammar the built-in model writes
// its greedy output, token for token, until a trigger appears in it; from
// there it writes only what the grammar takes, and stops where the
// grammar ends. A trigger that never appears leaves the output as it was.
func TestLazyGrammarServe(t *testing.T) {
	m := fortunes(t)
	e := m.Engine()
	prompt := m.Tokenize("The meaning of life is", true, false)
	const budget = 48
	plain, _ := serve(t, e, request(budget, nil), prompt)
	piece := func(id uint32) string {
		p, err := m.Tokenizer().Piece(id, false)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The trigger: the greedy output's fourth token, without its space.
	const at = 3
	trigger := strings.TrimSpace(piece(plain[at]))
	if len(plain) < at+1 || trigger == "" {
		t.Fatalf("greedy output %v has no fourth word", plain)
	}
	// A call with its white space fixed, so that the model, which would
	// rather write tabs, finishes it in the budget.
	const schema = `{"type":"object","properties":{"c":{"enum":["O","P"]}},"required":["c"],"additionalProperties":false}`
	b := grammar.NewBuilder()
	b.Define("root", grammar.Seq(grammar.Lit(` {"c": "`), grammar.Alt(grammar.Lit("O"), grammar.Lit("P")), grammar.Lit(`"}`)))
	held, err := b.Build("root")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		trigger string
		fires   bool
	}{{trigger, true}, {"§never§", false}} {
		g, err := held.Lazy(grammar.Trigger{Text: tc.trigger})
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := constrained(t, e, m, g, budget, nil, prompt)
		if err != nil {
			t.Fatalf("trigger %q: %v", tc.trigger, err)
		}
		if !tc.fires {
			if !slices.Equal(got, plain) {
				t.Fatalf("no trigger: %v, want the greedy %v", got, plain)
			}
			continue
		}
		// Where the trigger is whole in the greedy output.
		var text strings.Builder
		end := -1
		for i, id := range plain {
			text.WriteString(piece(id))
			if strings.Contains(text.String(), tc.trigger) {
				end = i
				break
			}
		}
		if end < 0 || len(got) <= end || !slices.Equal(got[:end+1], plain[:end+1]) {
			t.Fatalf("trigger %q: %v; the greedy output to it is %v", tc.trigger, got, plain[:end+1])
		}
		var rest strings.Builder
		for _, id := range got[end+1:] {
			rest.WriteString(piece(id))
		}
		after := strings.SplitN(text.String(), tc.trigger, 2)[1] + rest.String()
		mt, _ := held.NewMatcher()
		if err := mt.Advance([]byte(after)); err != nil || !mt.Accepting() || len(got) >= budget {
			t.Fatalf("trigger %q: what follows it, %q, is not the grammar's whole: %v", tc.trigger, after, err)
		}
		if err := grammartest.Validate([]byte(schema), []byte(after[1:])); err != nil {
			t.Fatalf("after the trigger %q: %v", after, err)
		}
	}
}
