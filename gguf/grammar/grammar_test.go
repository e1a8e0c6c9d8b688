package grammar

import (
	"errors"
	"strings"
	"testing"
)

// accepts reports whether g matches s whole.
func accepts(t *testing.T, g *Grammar, s string) bool {
	t.Helper()
	m, err := g.NewMatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Advance([]byte(s)); err != nil {
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("%q: %v", s, err)
		}
		return false
	}
	return m.Accepting()
}

func build(t *testing.T, e Expr) *Grammar {
	t.Helper()
	b := NewBuilder()
	b.Define("root", e)
	g, err := b.Build("root")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestIR(t *testing.T) {
	for _, tc := range []struct {
		name   string
		e      Expr
		accept []string
		reject []string
	}{
		{"lit", Lit("abc"), []string{"abc"}, []string{"", "ab", "abcd", "abd"}},
		{"class", Bytes([2]byte{'a', 'c'}), []string{"a", "b", "c"}, []string{"d", "", "ab"}},
		{"seq", Seq(Lit("a"), Bytes([2]byte{'0', '9'}), Lit("z")), []string{"a5z"}, []string{"az", "a55z"}},
		{"alt", Alt(Lit("yes"), Lit("no"), Lit("y")), []string{"yes", "no", "y"}, []string{"ye", "n", "yesno"}},
		{"bounded", Repeat(Lit("ab"), 2, 4), []string{"abab", "ababab", "abababab"}, []string{"ab", "ababababab", "aba"}},
		{"exact", Repeat(Lit("x"), 3, 3), []string{"xxx"}, []string{"xx", "xxxx"}},
		{"star", Seq(Lit("["), Star(Lit("a")), Lit("]")), []string{"[]", "[a]", "[aaaa]"}, []string{"[", "[b]"}},
		{"opt", Seq(Opt(Lit("-")), Lit("1")), []string{"1", "-1"}, []string{"--1"}},
		{"utf8", Star(UTF8()), []string{"", "é", "日本", "😀"}, []string{"\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "a"}},
		{"empty", Seq(), []string{""}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := build(t, tc.e)
			for _, s := range tc.accept {
				if !accepts(t, g, s) {
					t.Errorf("rejects %q\n%s", s, g)
				}
			}
			for _, s := range tc.reject {
				if accepts(t, g, s) {
					t.Errorf("accepts %q\n%s", s, g)
				}
			}
		})
	}
}

func TestRecursiveRules(t *testing.T) {
	b := NewBuilder()
	// Balanced parentheses: p ::= "(" p ")" p | ε
	b.Define("p", Alt(Seq(Lit("("), Ref("p"), Lit(")"), Ref("p")), Seq()))
	g, err := b.Build("p")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "()", "(())()", "((()))"} {
		if !accepts(t, g, s) {
			t.Errorf("rejects %q", s)
		}
	}
	for _, s := range []string{"(", ")", "(()", "())"} {
		if accepts(t, g, s) {
			t.Errorf("accepts %q", s)
		}
	}
	// Deep nesting keeps a bounded number of stacks.
	m, _ := g.NewMatcher()
	deep := strings.Repeat("(", 500) + strings.Repeat(")", 500)
	if err := m.Advance([]byte(deep)); err != nil || !m.Accepting() {
		t.Fatalf("deep: %v %v", err, m.Accepting())
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		defs map[string]Expr
		want error
	}{
		{"undefined", map[string]Expr{"root": Ref("nope")}, ErrInvalid},
		{"left recursive", map[string]Expr{"root": Alt(Seq(Ref("root"), Lit("a")), Lit("b"))}, ErrInvalid},
		{"nullable left recursion", map[string]Expr{"root": Seq(Ref("e"), Ref("root"), Lit("a")), "e": Opt(Lit("x"))}, ErrInvalid},
		{"empty alt", map[string]Expr{"root": Alt()}, ErrInvalid},
		{"star of nullable", map[string]Expr{"root": Star(Opt(Lit("a")))}, ErrInvalid},
		{"too large", map[string]Expr{"root": Repeat(Lit("ab"), MaxElements, MaxElements)}, ErrTooLarge},
		{"bad bounds", map[string]Expr{"root": Repeat(Lit("a"), 3, 2)}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder()
			b.Define("root", tc.defs["root"])
			for k, e := range tc.defs {
				if k != "root" {
					b.Define(k, e)
				}
			}
			_, err := b.Build("root")
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAmbiguityBounded(t *testing.T) {
	// a* a* … a*: the number of ways to split n a's grows without bound.
	g := build(t, Seq(Star(Lit("a")), Star(Lit("a")), Star(Lit("a")), Star(Lit("a")), Star(Lit("a")), Lit("b")))
	m, _ := g.NewMatcher()
	err := m.Advance([]byte(strings.Repeat("a", 200)))
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("got %v, want ErrAmbiguous", err)
	}
}

func TestCanonicalText(t *testing.T) {
	g1, err := FromSchema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := FromSchema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]}`))
	g3, _ := FromSchema([]byte(`{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"required":["a"]}`))
	if g1.String() != g2.String() {
		t.Fatal("the same schema gives two texts")
	}
	if g1.String() == g3.String() {
		t.Fatal("property order is not in the text, though the grammar writes properties in it")
	}
	if !strings.Contains(g1.String(), `"\"a\""`) {
		t.Fatalf("text:\n%s", g1)
	}
}

// TestWrappedSchemas: the shape tool calls take, alternatives of a
// literal prefix, a JSON value of a schema and a literal suffix, built on
// one Builder.
func TestWrappedSchemas(t *testing.T) {
	b := NewBuilder()
	weather, err := b.Schema([]byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	add, err := b.Schema([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string, args Expr) Expr {
		return Seq(Lit(`<tool_call>{"name":"`+name+`","arguments":`), args, Lit(`}</tool_call>`))
	}
	b.Define("root", Alt(call("weather", weather), call("add", add)))
	g, err := b.Build("root")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`<tool_call>{"name":"weather","arguments":{"city":"Oslo"}}</tool_call>`, `<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>`} {
		if !accepts(t, g, s) {
			t.Errorf("rejects %s", s)
		}
	}
	for _, s := range []string{`<tool_call>{"name":"weather","arguments":{"a":1,"b":2}}</tool_call>`, `<tool_call>{"name":"add","arguments":{"a":1,"b":2}}`, `{"name":"add"}`} {
		if accepts(t, g, s) {
			t.Errorf("accepts %s", s)
		}
	}
}
