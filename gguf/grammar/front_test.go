package grammar

import (
	"errors"
	"strings"
	"testing"
)

// TestHeldBlock: a grammar held from the start, with a block apart, holds
// the output from the block's end. Before it, the mask allows what opens
// the block (white space, the tag or its start, or the control token
// that is the tag) and what begins the grammar; inside, every token but
// the end of generation and a token that closes the block with text the
// grammar refuses after it; past it, the grammar's. An output that opens
// no block is the grammar's from its first byte. A budget bounds the
// block, its closing tag then forced, and the grammar holds after it.
func TestHeldBlock(t *testing.T) {
	v, text, id := budgetVocab()
	tags := Block{Open: "<t>", Close: "</t>"}
	braces := literal("{}")
	held := func(g *Grammar, b Block, budget int) *Grammar {
		var err error
		if budget < 0 {
			g, err = g.Skipping(b)
		} else {
			g, err = g.Budgeted(b, budget)
		}
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	const inside = "<t> a b </ t> </t> x < /t> <tool> {} [T] [/T]" // every token but EOS, and none closes with text after
	for _, tc := range []struct {
		name  string
		g     *Grammar
		first string      // the mask at the start
		steps [][2]string // a token, then the mask it leaves
		done  bool        // the grammar has ended (Done) after the steps
	}{
		{"reasons, then answers", held(braces, tags, -1), "<t> < {}", [][2]string{
			{"<t>", inside}, {"a", inside}, {"</t>", "{}"}, {"{}", "EOS"}}, true},
		{"answers at once", held(braces, tags, -1), "<t> < {}", [][2]string{
			{"{}", "EOS"}}, true},
		{"the tag in pieces", held(braces, tags, -1), "<t> < {}", [][2]string{
			{"<", "t>"}, {"t>", inside}}, false},
		{"a control-token tag", held(braces, Block{Open: "[T]", Close: "[/T]"}, -1), "{} [T]", [][2]string{
			{"[T]", inside}, {"b", inside}, {"[/T]", "{}"}, {"{}", "EOS"}}, true},
		{"budgeted", held(braces, tags, 1), "<t> < {}", [][2]string{
			{"<t>", inside}, {"a", "</ </t> <"}, {"</t>", "{}"}, {"{}", "EOS"}}, true},
		{"a budget of none", held(braces, tags, 0), "<t> < {}", [][2]string{
			{"<t>", "</ </t> <"}, {"</", "t>"}, {"t>", "{}"}}, false},
	} {
		c, err := NewConstraint(tc.g, v, text)
		if err != nil {
			t.Fatal(err)
		}
		mask, err := c.Mask()
		if err != nil {
			t.Fatalf("%s: first mask: %v", tc.name, err)
		}
		if got := strings.Join(allowed(mask, v, text), " "); got != tc.first {
			t.Fatalf("%s: at the start %q, want %q", tc.name, got, tc.first)
		}
		if c.Accepting() {
			t.Fatalf("%s: the grammar may end before it began", tc.name)
		}
		for i, st := range tc.steps {
			if err := c.Accept(id(st[0])); err != nil {
				t.Fatalf("%s: step %d (%q): %v", tc.name, i, st[0], err)
			}
			if c.Done() {
				break
			}
			mask, err := c.Mask()
			if err != nil {
				t.Fatalf("%s: step %d: mask: %v", tc.name, i, err)
			}
			if got := strings.Join(allowed(mask, v, text), " "); got != st[1] {
				t.Fatalf("%s: after %q the mask is %q, want %q", tc.name, st[0], got, st[1])
			}
		}
		if c.Done() != tc.done {
			t.Fatalf("%s: Done %v, want %v", tc.name, c.Done(), tc.done)
		}
	}

	// What the mask refuses, Accept refuses: text before the block that
	// is neither, the end of generation inside it.
	for _, toks := range [][]string{{"x"}, {"<t>", "EOS"}, {"a"}} {
		c, _ := NewConstraint(held(braces, tags, -1), v, text)
		var err error
		for _, tok := range toks {
			if err = c.Accept(id(tok)); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrRejected) {
			t.Errorf("%q: %v, want ErrRejected", toks, err)
		}
	}
	// The block in the canonical text: another request than the grammar
	// held from the start.
	if a, b := braces.String(), held(braces, tags, -1).String(); a == b || !strings.Contains(b, `block "<t>" "</t>"`) {
		t.Errorf("canonical texts %q, %q", a, b)
	}
}

// TestHeldBlockClosingText: inside the block, a token that closes it
// with text after the tag is allowed only where the grammar takes that
// text from its start ("</t>x" never is; "t>{" is text until the block's
// text ends with "</", then it closes the block and begins the grammar).
func TestHeldBlockClosingText(t *testing.T) {
	pieces := []string{"<t>", "a", "</t>{", "</t>x", "t>{", "</", "{", "}"}
	v := NewVocab(len(pieces)+1, len(pieces), func(i uint32) []byte {
		if int(i) < len(pieces) {
			return []byte(pieces[i])
		}
		return nil
	}, []uint32{uint32(len(pieces))})
	text := func(i uint32) []byte {
		if int(i) < len(pieces) {
			return []byte(pieces[i])
		}
		return nil
	}
	g, err := literal("{}").Skipping(Block{Open: "<t>", Close: "</t>"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewConstraint(g, v, text)
	for _, step := range []struct {
		tok  uint32
		want string
	}{{0, "<t> a </t>{ t>{ </ { }"}, {5, "<t> a </t>{ t>{ </ { }"}} {
		if err := c.Accept(step.tok); err != nil {
			t.Fatal(err)
		}
		mask, err := c.Mask()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(allowed(mask, v, text), " "); got != step.want {
			t.Fatalf("after %q: %q, want %q", pieces[step.tok], got, step.want)
		}
	}
	if err := c.Accept(4); err != nil || c.Accepting() {
		t.Fatalf("t>{ closes the block and begins the grammar: %v", err)
	}
}

// FuzzHeldBlock: a held grammar with a block in front, driven by choices
// among what its mask allows, over tokens cut from the fuzzer's text and
// the bytes that spell the tags and the grammar. Every
// token the mask allows is accepted, the mask never empties before the
// output may end, and an output that ends is the grammar's alone, or a
// block and then the grammar's.
func FuzzHeldBlock(f *testing.F) {
	f.Add([]byte("<t>ab</t>{}"), uint64(0x5555), []byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte(" \n<t>x</t>{x}"), uint64(1), []byte{9, 9, 9})
	f.Add([]byte("{xx}"), uint64(0xff), []byte{7})
	f.Add([]byte("</t>{<t>"), uint64(0x3), []byte{1, 2, 1, 2, 1, 2, 1})
	b := NewBuilder()
	b.Define("root", Seq(Lit("{"), Star(Lit("x")), Lit("}")))
	braces, err := b.Build("root")
	if err != nil {
		f.Fatal(err)
	}
	g, err := braces.Skipping(Block{Open: "<t>", Close: "</t>"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text []byte, cuts uint64, choices []byte) {
		if len(text) > 48 || len(choices) > 64 {
			return
		}
		// The tags, and every byte of them and of the grammar alone, as a
		// real vocabulary's byte tokens spell whatever its longer ones
		// begin.
		toks := [][]byte{[]byte("<t>"), []byte("</t>"), []byte("</")}
		for _, c := range []byte("<t/>{}x\n ") {
			toks = append(toks, []byte{c})
		}
		start := 0
		for i := range text {
			if cuts&(1<<(i%64)) != 0 || i == len(text)-1 {
				toks = append(toks, text[start:i+1])
				start = i + 1
			}
		}
		eos := uint32(len(toks))
		pieces := func(id uint32) []byte {
			if id == eos {
				return nil
			}
			return toks[id]
		}
		v := NewVocab(len(toks)+1, len(toks), pieces, []uint32{eos})
		c, err := NewConstraint(g, v, pieces)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for _, ch := range choices {
			mask, err := c.Mask()
			if err != nil {
				t.Fatalf("%q: mask: %v", out, err)
			}
			var ok []uint32
			for i := range uint32(len(toks) + 1) {
				if Allowed(mask, i) {
					ok = append(ok, i)
				}
			}
			if len(ok) == 0 {
				t.Fatalf("%q: the mask allows nothing", out)
			}
			id := ok[int(ch)%len(ok)]
			if err := c.Accept(id); err != nil {
				t.Fatalf("%q then %q: %v", out, pieces(id), err)
			}
			if id == eos {
				answer := string(out)
				if i := strings.Index(answer, "</t>"); i >= 0 && strings.HasPrefix(strings.TrimLeft(answer, " \t\r\n"), "<t>") {
					answer = answer[i+len("</t>"):]
				}
				m, _ := braces.NewMatcher()
				if m.Advance([]byte(answer)) != nil || !m.Accepting() {
					t.Fatalf("%q ended, and %q is not the grammar's", out, answer)
				}
				return
			}
			out = append(out, pieces(id)...)
		}
	})
}
