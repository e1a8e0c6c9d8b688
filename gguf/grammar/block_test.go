package grammar

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// budgetVocab is a small vocabulary for budgets: text tokens that spell
// the tags in pieces, and two control tokens, [T] and [/T], whose text
// only the constraint's piece function gives.
func budgetVocab() (v *Vocab, text func(uint32) []byte, id func(string) uint32) {
	pieces := []string{"<t>", "a", "b", "</", "t>", "</t>", "x", "<", "/t>", "<tool>", "{}", "", ""}
	const open, close = 11, 12 // the control tokens
	size := len(pieces) + 1    // and EOS
	raw := func(i uint32) []byte {
		if int(i) < len(pieces) {
			return []byte(pieces[i])
		}
		return nil
	}
	v = NewVocab(size, len(pieces), raw, []uint32{uint32(size - 1)})
	text = func(i uint32) []byte {
		switch i {
		case open:
			return []byte("[T]")
		case close:
			return []byte("[/T]")
		}
		return raw(i)
	}
	id = func(s string) uint32 {
		switch s {
		case "[T]":
			return open
		case "[/T]":
			return close
		case "EOS":
			return uint32(size - 1)
		}
		if i := slices.Index(pieces, s); i >= 0 {
			return uint32(i)
		}
		panic("no token " + s)
	}
	return v, text, id
}

// allowed lists the tokens a mask allows (nil: every token).
func allowed(mask []uint64, v *Vocab, text func(uint32) []byte) []string {
	if mask == nil {
		return nil
	}
	var out []string
	for i := range uint32(v.size) {
		if Allowed(mask, i) {
			if t := text(i); len(t) > 0 {
				out = append(out, string(t))
			} else {
				out = append(out, "EOS")
			}
		}
	}
	return out
}

// TestBudget: once a block has taken its budget of tokens (the opening
// tag not counted), the mask allows only what continues its closing tag
// — from where the block's text already began it, or its control token
// where the tag is one — the output may not end there, and past the tag
// it is free again (Free) or watched for triggers (a lazy grammar).
func TestBudget(t *testing.T) {
	v, text, id := budgetVocab()
	tags := Block{Open: "<t>", Close: "</t>"}
	free := func(b Block, n int) *Grammar {
		g, err := Free().Budgeted(b, n)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, tc := range []struct {
		name string
		g    *Grammar
		// steps: a token, then the mask it leaves ("*": every token)
		steps [][2]string
	}{
		{"spent, then closed", free(tags, 2), [][2]string{
			{"<t>", "*"}, {"a", "*"}, {"b", "</ </t> <"}, {"</", "t>"}, {"t>", "*"}, {"x", "*"}}},
		{"the tag begun when the budget ends", free(tags, 2), [][2]string{
			{"<t>", "*"}, {"a", "*"}, {"<", "/t>"}, {"/t>", "*"}}},
		{"closed within the budget", free(tags, 3), [][2]string{
			{"<t>", "*"}, {"a", "*"}, {"</t>", "*"}, {"a", "*"}, {"b", "*"}, {"a", "*"}}},
		{"no block opened", free(tags, 1), [][2]string{
			{"x", "*"}, {"<t>", "*"}, {"a", "*"}, {"b", "*"}}},
		{"opened by the prompt", free(Block{Open: "<t>", Close: "</t>", Opened: true}, 1), [][2]string{
			{"a", "</ </t> <"}, {"</t>", "*"}}},
		{"a control-token tag", free(Block{Open: "[T]", Close: "[/T]"}, 1), [][2]string{
			{"[T]", "*"}, {"a", "[/T]"}, {"[/T]", "*"}}},
		{"none: closed as it opens", free(tags, 0), [][2]string{
			{"<t>", "</ </t> <"}, {"</t>", "*"}, {"a", "*"}}},
	} {
		c, err := NewConstraint(tc.g, v, text)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range tc.steps {
			if err := c.Accept(id(st[0])); err != nil {
				t.Fatalf("%s: step %d (%q): %v", tc.name, i, st[0], err)
			}
			mask, err := c.Mask()
			if err != nil {
				t.Fatalf("%s: step %d: mask: %v", tc.name, i, err)
			}
			got := strings.Join(allowed(mask, v, text), " ")
			if mask == nil {
				got = "*"
			}
			if got != st[1] {
				t.Fatalf("%s: after %q the mask allows %q, want %q", tc.name, st[0], got, st[1])
			}
			if forced := st[1] != "*"; forced == c.Accepting() {
				t.Fatalf("%s: after %q accepting %v", tc.name, st[0], c.Accepting())
			}
		}
	}
	// None, on a block the prompt opened: the tag is forced from the
	// first token.
	c0, err := NewConstraint(free(Block{Open: "<t>", Close: "</t>", Opened: true}, 0), v, text)
	if err != nil {
		t.Fatal(err)
	}
	if mask, err := c0.Mask(); err != nil || strings.Join(allowed(mask, v, text), " ") != "</ </t> <" || c0.Accepting() {
		t.Errorf("none, opened: the first mask allows %v (%v)", allowed(mask, v, text), err)
	}
	// The output cannot end, nor go astray, while the tag is forced.
	c, _ := NewConstraint(free(tags, 1), v, text)
	for _, s := range []string{"<t>", "a"} {
		if err := c.Accept(id(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Accept(id("EOS")); !errors.Is(err, ErrRejected) {
		t.Errorf("the end while the tag is forced: %v", err)
	}
	if err := c.Accept(id("x")); !errors.Is(err, ErrRejected) {
		t.Errorf("another token while the tag is forced: %v", err)
	}

	// A lazy grammar with a budget: a trigger in the block does not
	// count; after the forced tag, the one that does is held.
	lazy, err := literal("{}").Lazy(Trigger{Text: "<tool>"})
	if err != nil {
		t.Fatal(err)
	}
	if lazy, err = lazy.Budgeted(tags, 2); err != nil {
		t.Fatal(err)
	}
	c, _ = NewConstraint(lazy, v, text)
	for _, s := range []string{"<t>", "<tool>", "a", "</t>", "x", "<tool>"} {
		if err := c.Accept(id(s)); err != nil {
			t.Fatalf("lazy: %q: %v", s, err)
		}
	}
	if mask, _ := c.Mask(); !c.Triggered() || strings.Join(allowed(mask, v, text), " ") != "{}" {
		t.Errorf("lazy: triggered %v, mask %v", c.Triggered(), allowed(mask, v, text))
	}
}

// TestBudgetedGrammar: the budget is in the grammar's canonical text;
// a budget needs room for the block, and tags; the free grammar is no
// matcher's.
func TestBudgetedGrammar(t *testing.T) {
	tags := Block{Open: "<t>", Close: "</t>"}
	a, _ := Free().Budgeted(tags, 5)
	b, _ := Free().Budgeted(tags, 6)
	none, _ := Free().Budgeted(tags, 0)
	if !strings.Contains(none.String(), "budget 0\n") {
		t.Errorf("a budget of none: %q", none.String())
	}
	if s := Free().String(); s != "free\n" {
		t.Errorf("Free alone: %q", s)
	}
	if s := a.String(); s != "free\nblock \"<t>\" \"</t>\"\nbudget 5\n" || s == b.String() {
		t.Errorf("canonical text %q", s)
	}
	lazy, _ := literal("x").Lazy(Trigger{Text: "y"})
	other, _ := lazy.Skipping(Block{Open: "[", Close: "]"})
	for name, err := range map[string]error{
		"fewer than none": func() error { _, err := Free().Budgeted(tags, -1); return err }(),
		"too many":        func() error { _, err := Free().Budgeted(tags, MaxBudget+1); return err }(),
		"another block":   func() error { _, err := other.Budgeted(tags, 5); return err }(),
		"no closing tag":  func() error { _, err := Free().Budgeted(Block{Open: "<t>"}, 5); return err }(),
		"a free matcher":  func() error { _, err := Free().NewMatcher(); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzBudget: however an output is cut into tokens, a budget of n lets
// the model choose at most n tokens inside the block: where the mask
// narrows to the closing tag, the first token it allows is taken instead
// of the output's, and no token is refused.
func FuzzBudget(f *testing.F) {
	f.Add([]byte("<t>abcdefg</t>x"), uint64(0x5555), uint8(2), false)
	f.Add([]byte("  <t>a</t>"), uint64(1), uint8(1), false)
	f.Add([]byte("abc</t>def"), uint64(0xff), uint8(3), true)
	f.Add([]byte("<t>ab</"), uint64(0x3), uint8(1), false)
	f.Fuzz(func(t *testing.T, text []byte, cuts uint64, n uint8, opened bool) {
		if len(text) > 64 {
			return
		}
		budget := int(n % 4) // 0: no reasoning
		g, err := Free().Budgeted(Block{Open: "<t>", Close: "</t>", Opened: opened}, budget)
		if err != nil {
			t.Fatal(err)
		}
		toks := [][]byte{[]byte("</t>"), []byte("</"), []byte("t>")} // the tag's spellings first
		start := 0
		for i := range text {
			if cuts&(1<<(i%64)) != 0 || i == len(text)-1 {
				toks = append(toks, text[start:i+1])
				start = i + 1
			}
		}
		pieces := func(id uint32) []byte { return toks[id] }
		v := NewVocab(len(toks)+1, len(toks), pieces, []uint32{uint32(len(toks))})
		c, err := NewConstraint(g, v, pieces)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		// r reads the output back; free counts the tokens the model
		// chose (the mask open) wholly inside the block.
		r := newBlockReader(Block{Open: "<t>", Close: "</t>", Opened: opened})
		free := 0
		for next := 3; next < len(toks); {
			mask, err := c.Mask()
			if err != nil {
				t.Fatal(err)
			}
			id := uint32(next)
			if mask != nil {
				id = ^uint32(0)
				for i := range uint32(len(toks)) {
					if Allowed(mask, i) {
						id = i
						break
					}
				}
				if id == ^uint32(0) {
					t.Fatalf("%q: the forced mask allows no token", out)
				}
			} else {
				next++
			}
			if err := c.Accept(id); err != nil {
				t.Fatalf("%q then %q: %v", out, toks[id], err)
			}
			out = append(out, toks[id]...)
			inside := r.state == inBlock
			if _, past := r.read(toks[id]); inside && !past && mask == nil {
				free++
			}
			if free > budget {
				t.Fatalf("%q (budget %d): %d tokens chosen inside the block", out, budget, free)
			}
		}
	})
}
