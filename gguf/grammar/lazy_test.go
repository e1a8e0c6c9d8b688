package grammar

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// lazyVocab is testPieces with the tokens a lazy grammar's tests need:
// a control token ([TOOL_CALLS], no bytes to the mask but text to the
// trigger search) and pieces that split triggers.
func lazyVocab() (v *Vocab, piece func(uint32) []byte, id func(string) uint32) {
	pieces := testPieces()
	extra := []string{"CA", "LL", "CALL", "<c>", "<c>\"", " <", "c>", "hello", "x\"ab"}
	for _, s := range extra {
		pieces = append(pieces, []byte(s))
	}
	const control = testEOS - 1
	v, mask := testVocab(pieces)
	piece = func(i uint32) []byte {
		if i == control {
			return []byte("[TOOL_CALLS]")
		}
		return mask(i)
	}
	id = func(s string) uint32 {
		if s == "[TOOL_CALLS]" {
			return control
		}
		for i := len(pieces) - 1; i >= 0; i-- { // the extras first
			if string(pieces[i]) == s {
				return uint32(i)
			}
		}
		panic("no token " + s)
	}
	return v, piece, id
}

func lazy(t *testing.T, schema string, triggers ...Trigger) *Grammar {
	t.Helper()
	g, err := FromSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if g, err = g.Lazy(triggers...); err != nil {
		t.Fatal(err)
	}
	return g
}

// feed accepts tokens, failing the test on an error.
func feed(t *testing.T, c *Constraint, id func(string) uint32, toks ...string) {
	t.Helper()
	for _, s := range toks {
		if err := c.Accept(id(s)); err != nil {
			t.Fatalf("token %q: %v", s, err)
		}
	}
}

// TestLazyWaitsForTrigger: before its trigger a lazy grammar allows
// every token and lets the output end; a trigger split over tokens, or
// written by a control token, is found, and from the byte after it the
// output is held.
func TestLazyWaitsForTrigger(t *testing.T) {
	v, piece, id := lazyVocab()
	for _, tc := range []struct {
		trigger string
		toks    []string
	}{
		{"CALL", []string{"hello", " ", "CA", "LL"}},
		{"CALL", []string{"CALL"}},
		{"[TOOL_CALLS]", []string{"a", "[TOOL_CALLS]"}},
	} {
		g := lazy(t, `{"const":"ab"}`, Trigger{Text: tc.trigger})
		c, err := NewConstraint(g, v, piece)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range tc.toks {
			if mask, err := c.Mask(); err != nil || mask != nil {
				t.Fatalf("%q before the trigger: mask %v, %v; want every token", tc.trigger, mask != nil, err)
			}
			if !c.Accepting() || c.Done() || c.Triggered() {
				t.Fatalf("%q before the trigger: accepting %v, done %v, triggered %v", tc.trigger, c.Accepting(), c.Done(), c.Triggered())
			}
			feed(t, c, id, s)
			if i < len(tc.toks)-1 && c.Triggered() {
				t.Fatalf("%q triggered by %q", tc.trigger, tc.toks[:i+1])
			}
		}
		if !c.Triggered() || c.Accepting() {
			t.Fatalf("%q after the trigger: triggered %v, accepting %v", tc.trigger, c.Triggered(), c.Accepting())
		}
		mask, err := c.Mask()
		if err != nil || mask == nil || !Allowed(mask, id(`"`)) || Allowed(mask, id("a")) || Allowed(mask, testEOS) {
			t.Fatalf("%q: the mask after the trigger is not the grammar's start", tc.trigger)
		}
		if err := c.Accept(testEOS); !errors.Is(err, ErrRejected) {
			t.Fatalf("%q: the output ends in the middle of the grammar: %v", tc.trigger, err)
		}
		feed(t, c, id, `"`, "ab", `"`)
		if !c.Done() {
			t.Fatalf("%q: not done after the whole value", tc.trigger)
		}
	}
	// An output that never triggers may end anywhere.
	c, _ := NewConstraint(lazy(t, `{"const":"ab"}`, Trigger{Text: "CALL"}), v, piece)
	feed(t, c, id, "CA", "hello", "LL")
	if err := c.Accept(testEOS); err != nil || c.Triggered() {
		t.Fatalf("end of an output with no trigger: %v, triggered %v", err, c.Triggered())
	}
}

// TestLazyIncludedAndAtStart: an included trigger is matched by the
// grammar itself, the bytes after it in the same token too; an at-start
// trigger counts only as the output's first text; bytes the grammar
// refuses after a trigger are an error.
func TestLazyIncludedAndAtStart(t *testing.T) {
	v, piece, id := lazyVocab()
	b := NewBuilder()
	s, err := b.Schema([]byte(`{"const":"ab"}`))
	if err != nil {
		t.Fatal(err)
	}
	b.Define("root", Seq(Lit("<c>"), s))
	tagged, err := b.Build("root")
	if err != nil {
		t.Fatal(err)
	}
	g, err := tagged.Lazy(Trigger{Text: "<c>", Included: true})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewConstraint(g, v, piece)
	feed(t, c, id, "hello", " <", `c>`, `"`, "ab", `"`)
	if !c.Done() {
		t.Fatal("included trigger: the call is not done")
	}
	c, _ = NewConstraint(g, v, piece)
	feed(t, c, id, "hello", `<c>"`) // the trigger and a byte after it, in one token
	if mask, _ := c.Mask(); !Allowed(mask, id("ab")) || Allowed(mask, id(`"`)) {
		t.Fatal(`after "<c>\"" the mask is not the string's`)
	}
	c, _ = NewConstraint(g, v, piece)
	feed(t, c, id, "hello", " <")
	if err := c.Accept(id("c>")); err != nil {
		t.Fatal(err)
	}
	if err := c.Accept(id("x\"ab")); !errors.Is(err, ErrRejected) {
		t.Fatalf("a refused token after the trigger: %v", err)
	}

	obj := lazy(t, `{"type":"object"}`, Trigger{Text: "{", AtStart: true, Included: true})
	c, _ = NewConstraint(obj, v, piece)
	feed(t, c, id, " ", "\n", "{")
	if !c.Triggered() {
		t.Fatal("an at-start trigger after white space did not trigger")
	}
	c, _ = NewConstraint(obj, v, piece)
	feed(t, c, id, "a", " ", "{", "}", "hello", "{")
	if c.Triggered() {
		t.Fatal("an at-start trigger triggered after text")
	}
	c, _ = NewConstraint(obj, v, piece)
	if err := c.Accept(id("x\"ab")); err != nil || c.Triggered() {
		t.Fatalf("text that is no trigger: %v", err)
	}
}

// TestLazyRefusals: a lazy grammar needs triggers, non-empty ones, and
// an included one must begin the grammar; its canonical text names its
// triggers, so that it is another grammar than the same rules held from
// the start.
func TestLazyRefusals(t *testing.T) {
	g, _ := FromSchema([]byte(`{"const":"ab"}`))
	for _, tr := range [][]Trigger{
		nil,
		{{Text: ""}},
		{{Text: strings.Repeat("x", maxTriggerLen+1)}},
		{{Text: "CALL", Included: true}},
		make([]Trigger, MaxTriggers+1),
	} {
		if _, err := g.Lazy(tr...); !errors.Is(err, ErrInvalid) {
			t.Errorf("triggers %+v: %v, want ErrInvalid", tr, err)
		}
	}
	a, _ := g.Lazy(Trigger{Text: "CALL"})
	b, _ := g.Lazy(Trigger{Text: "CALL", AtStart: true})
	texts := map[string]bool{g.String(): true, a.String(): true, b.String(): true}
	if len(texts) != 3 || !strings.Contains(a.String(), `trigger "CALL"`) {
		t.Fatalf("canonical texts are not distinct:\n%s\n%s\n%s", g, a, b)
	}
	if len(g.Triggers()) != 0 || len(a.Triggers()) != 1 {
		t.Fatal("Triggers")
	}
}

// TestLazyForgets: what a lazy constraint keeps of a long output before
// its trigger is bounded by its longest trigger.
func TestLazyForgets(t *testing.T) {
	v, piece, id := lazyVocab()
	c, _ := NewConstraint(lazy(t, `{"const":"ab"}`, Trigger{Text: "CALL"}, Trigger{Text: "{", AtStart: true}), v, piece)
	for range 10_000 {
		feed(t, c, id, "hello", " ")
	}
	if len(c.seen) >= len("CALL") || c.Triggered() {
		t.Fatalf("keeps %d bytes, triggered %v", len(c.seen), c.Triggered())
	}
	feed(t, c, id, "C", "A", "LL")
	if !c.Triggered() {
		t.Fatal("not triggered after the long output")
	}
}

// FuzzLazyTrigger: however an output is cut into tokens, a lazy grammar
// triggers exactly when the whole text holds the trigger (anywhere, or
// first after white space), and holds what follows it; with a skipped
// block (block 1: where the output opens one, 2: from its start), only
// the text after the block counts.
func FuzzLazyTrigger(f *testing.F) {
	f.Add([]byte("hello CALL ab"), uint64(0x5555), false, uint8(0))
	f.Add([]byte("  CALL"), uint64(1), true, uint8(0))
	f.Add([]byte("CACALLL"), uint64(0xffff), false, uint8(0))
	f.Add([]byte("x CALL"), uint64(3), true, uint8(0))
	f.Add([]byte(" <t>CALL</t> CALL ab"), uint64(0x1234), false, uint8(1))
	f.Add([]byte("CALL</t>\nCALL"), uint64(0x77), true, uint8(2))
	f.Add([]byte("<t CALL"), uint64(0x2), false, uint8(1))
	var any Class
	any.Add(0, 0xff)
	b := NewBuilder()
	b.Define("root", Star(ClassOf(any)))
	free, err := b.Build("root")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text []byte, cuts uint64, atStart bool, block uint8) {
		if len(text) > 64 {
			return
		}
		g, err := free.Lazy(Trigger{Text: "CALL", AtStart: atStart})
		if err != nil {
			t.Fatal(err)
		}
		// rest is the text the trigger is looked for in.
		rest := text
		switch block % 3 {
		case 1, 2:
			opened := block%3 == 2
			if g, err = g.Skipping(Block{Open: "<t>", Close: "</t>", Opened: opened}); err != nil {
				t.Fatal(err)
			}
			inside, opens := text, opened
			if first := bytes.TrimLeft(text, " \t\r\n"); !opened && bytes.HasPrefix(first, []byte("<t>")) {
				inside, opens = first[len("<t>"):], true
			}
			if opens {
				if i := bytes.Index(inside, []byte("</t>")); i >= 0 {
					rest = inside[i+len("</t>"):]
				} else {
					rest = nil
				}
			}
		}
		// Tokens of the text: a cut after byte i where bit i is set.
		var toks [][]byte
		start := 0
		for i := range text {
			if cuts&(1<<(i%64)) != 0 || i == len(text)-1 {
				toks = append(toks, text[start:i+1])
				start = i + 1
			}
		}
		pieces := func(id uint32) []byte { return toks[id] }
		c, err := NewConstraint(g, NewVocab(len(toks)+1, len(toks), pieces, nil), pieces)
		if err != nil {
			t.Fatal(err)
		}
		for i := range toks {
			if err := c.Accept(uint32(i)); err != nil {
				t.Fatalf("%q: %v", toks, err)
			}
		}
		want := bytes.Contains(rest, []byte("CALL"))
		if atStart {
			want = bytes.HasPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte("CALL"))
		}
		if c.Triggered() != want {
			t.Fatalf("%q (at start %v, block %d): triggered %v, want %v", toks, atStart, block%3, c.Triggered(), want)
		}
		if want {
			i := bytes.Index(rest, []byte("CALL")) + len("CALL")
			if c.m.consumed != len(rest)-i {
				t.Fatalf("%q: held %d bytes, want the %d after the trigger", toks, c.m.consumed, len(rest)-i)
			}
		}
	})
}

// TestLazySkipsBlock: a trigger inside the skipped block (a thinking
// model's reasoning) does not count, one after it does; the block counts
// only where the output opens with it, or from the start when the prompt
// opened it; the grammar's canonical text names the block.
func TestLazySkipsBlock(t *testing.T) {
	v, piece, id := lazyVocab()
	base := lazy(t, `{"const":"ab"}`, Trigger{Text: "CALL"})
	skip := func(opened bool) *Grammar {
		g, err := base.Skipping(Block{Open: "<c>", Close: "hello", Opened: opened})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, tc := range []struct {
		g       *Grammar
		toks    []string
		trigger int // the token that triggers (-1: none)
	}{
		{skip(false), []string{" ", "<c>", "CALL", "hello", " ", "CALL"}, 5},
		{skip(false), []string{"<c>", "CALL", "CA", "LL"}, -1},
		{skip(false), []string{"a", "CALL"}, 1},
		{skip(true), []string{"CALL", "hello", "CALL"}, 2},
		{skip(true), []string{"<c>", "CALL"}, -1},
		{base, []string{"<c>", "CALL"}, 1},
	} {
		c, err := NewConstraint(tc.g, v, piece)
		if err != nil {
			t.Fatal(err)
		}
		got := -1
		for i, s := range tc.toks {
			feed(t, c, id, s)
			if c.Triggered() && got < 0 {
				got = i
			}
		}
		if got != tc.trigger {
			t.Errorf("%q: triggered at token %d, want %d", tc.toks, got, tc.trigger)
		}
	}
	if a, b, c := base.String(), skip(false).String(), skip(true).String(); a == b || b == c || !strings.Contains(c, `block "<c>" "hello" opened`) {
		t.Errorf("canonical texts:\n%s\n%s\n%s", a, b, c)
	}
	if _, err := Free().Skipping(Block{Open: "a", Close: "b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a block on Free: %v", err)
	}
	if _, err := base.Skipping(Block{Open: "a"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a block without a closing tag: %v", err)
	}
}
