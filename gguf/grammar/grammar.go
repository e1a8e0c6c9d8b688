// Package grammar constrains generation to a formal language: a small
// grammar IR (literals, byte classes, sequences, alternatives, bounded
// repetition and references to named rules), a compiler from JSON Schema
// to that IR, a pushdown matcher that advances byte by byte, and the
// token mask that keeps a sampler to the tokens whose bytes the matcher
// can take next (Vocab, Constraint).
//
// The matcher follows llama.cpp's GBNF engine in spirit: its state is a
// set of parse stacks, each a chain of return positions whose top is the
// byte class to match next; advancing by a byte keeps the stacks whose top
// takes it, moves past it and expands the rule references that follow.
// Grammars are byte-level (UTF-8 is spelled out as byte sequences), so a
// token's bytes feed it directly.
//
// Tool calling builds on the same IR: "literal prefix, then a JSON value
// of schema S, then literal suffix", and alternatives of those, are
// Seq(Lit(prefix), v, Lit(suffix)) with v from Builder.Schema, under Alt.
package grammar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Class is a set of bytes.
type Class [4]uint64

// Has reports whether c holds b.
func (c *Class) Has(b byte) bool { return c[b>>6]&(1<<(b&63)) != 0 }

// Add adds the bytes lo … hi to c.
func (c *Class) Add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		c[b>>6] |= 1 << (b & 63)
	}
}

func (c *Class) or(d *Class) {
	for i := range c {
		c[i] |= d[i]
	}
}

func (c *Class) empty() bool { return c[0]|c[1]|c[2]|c[3] == 0 }

// op is an expression's kind.
type op uint8

const (
	opLit op = iota + 1
	opClass
	opSeq
	opAlt
	opRepeat
	opRef
)

// Expr is a grammar expression, built with Lit, Bytes, Seq, Alt, Repeat,
// Opt, Star and Ref. The zero Expr is invalid.
type Expr struct {
	op       op
	lit      string
	class    Class
	subs     []Expr
	min, max int // Repeat; max < 0: unbounded
	name     string
}

// Lit matches s exactly (its bytes).
func Lit(s string) Expr { return Expr{op: opLit, lit: s} }

// Bytes matches one byte in any of the inclusive ranges, each a pair
// {lo, hi}.
func Bytes(ranges ...[2]byte) Expr {
	e := Expr{op: opClass}
	for _, r := range ranges {
		e.class.Add(r[0], r[1])
	}
	return e
}

// ClassOf matches one byte of c.
func ClassOf(c Class) Expr { return Expr{op: opClass, class: c} }

// Seq matches its expressions one after another; Seq() matches the empty
// string.
func Seq(es ...Expr) Expr { return Expr{op: opSeq, subs: es} }

// Alt matches any one of its expressions.
func Alt(es ...Expr) Expr { return Expr{op: opAlt, subs: es} }

// Repeat matches e between min and max times; max < 0 is unbounded.
func Repeat(e Expr, min, max int) Expr {
	return Expr{op: opRepeat, subs: []Expr{e}, min: min, max: max}
}

// Opt matches e or nothing.
func Opt(e Expr) Expr { return Repeat(e, 0, 1) }

// Star matches e any number of times.
func Star(e Expr) Expr { return Repeat(e, 0, -1) }

// Ref matches the rule named name (defined with Builder.Define, before or
// after).
func Ref(name string) Expr { return Expr{op: opRef, name: name} }

// UTF8 matches one non-ASCII character as valid UTF-8 (no surrogates,
// nothing above U+10FFFF, no overlong forms).
func UTF8() Expr {
	cont := [2]byte{0x80, 0xBF}
	return Alt(
		Seq(Bytes([2]byte{0xC2, 0xDF}), Bytes(cont)),
		Seq(Lit("\xE0"), Bytes([2]byte{0xA0, 0xBF}), Bytes(cont)),
		Seq(Bytes([2]byte{0xE1, 0xEC}, [2]byte{0xEE, 0xEF}), Bytes(cont), Bytes(cont)),
		Seq(Lit("\xED"), Bytes([2]byte{0x80, 0x9F}), Bytes(cont)),
		Seq(Lit("\xF0"), Bytes([2]byte{0x90, 0xBF}), Bytes(cont), Bytes(cont)),
		Seq(Bytes([2]byte{0xF1, 0xF3}), Bytes(cont), Bytes(cont), Bytes(cont)),
		Seq(Lit("\xF4"), Bytes([2]byte{0x80, 0x8F}), Bytes(cont), Bytes(cont)),
	)
}

// Limits on a built grammar, so that a schema from outside cannot make
// one that exhausts memory.
const (
	// MaxElements bounds the flattened grammar's elements (bytes of
	// literals, classes and references, over every rule).
	MaxElements = 1 << 18
	// MaxRules bounds its rules (named and generated).
	MaxRules = 1 << 16
)

// ErrTooLarge is the error of a grammar past MaxElements or MaxRules.
var ErrTooLarge = errors.New("grammar: too large")

// ErrInvalid is the error of a grammar that cannot be built: an undefined
// or left-recursive rule, an empty alternative set.
var ErrInvalid = errors.New("grammar: invalid")

// Builder collects named rules and builds a Grammar. It is not safe for
// concurrent use.
type Builder struct {
	names   map[string]int
	defs    []ruleDef
	json    map[string]bool // JSON helper rules defined (json.go)
	schemas int             // schemas compiled, which prefix their rules
}

type ruleDef struct {
	name    string
	expr    Expr
	defined bool
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{names: map[string]int{}, json: map[string]bool{}}
}

// Define sets the rule name to e; a later Define of the same name
// replaces it.
func (b *Builder) Define(name string, e Expr) {
	i, ok := b.names[name]
	if !ok {
		i = len(b.defs)
		b.names[name] = i
		b.defs = append(b.defs, ruleDef{name: name})
	}
	b.defs[i].expr, b.defs[i].defined = e, true
}

// Defined reports whether name has a rule.
func (b *Builder) Defined(name string) bool {
	i, ok := b.names[name]
	return ok && b.defs[i].defined
}

// reserve names a rule to be defined later (so that a recursive schema
// can refer to itself) and reports whether it was new.
func (b *Builder) reserve(name string) bool {
	if _, ok := b.names[name]; ok {
		return false
	}
	b.names[name] = len(b.defs)
	b.defs = append(b.defs, ruleDef{name: name})
	return true
}

// Build flattens the rules into a Grammar whose start is the rule root,
// checking that every reference is defined and that no rule is left
// recursive (which a top-down matcher cannot run).
func (b *Builder) Build(root string) (*Grammar, error) {
	f := &flattener{b: b, g: &Grammar{}}
	ri, ok := b.names[root]
	if !ok || !b.defs[ri].defined {
		return nil, fmt.Errorf("%w: no rule %q", ErrInvalid, root)
	}
	// Named rules keep their definition order (so the canonical text is
	// stable); generated ones follow as they are made.
	for _, d := range b.defs {
		if !d.defined {
			return nil, fmt.Errorf("%w: rule %q is referred to but never defined", ErrInvalid, d.name)
		}
		f.g.rules = append(f.g.rules, rule{name: d.name})
	}
	for i, d := range b.defs {
		alts, err := f.alts(d.expr, d.name)
		if err != nil {
			return nil, err
		}
		f.g.rules[i].alts = alts
	}
	if len(f.g.rules) > MaxRules || f.size > MaxElements {
		return nil, fmt.Errorf("%w: %d rules, %d elements (at most %d, %d)", ErrTooLarge, len(f.g.rules), f.size, MaxRules, MaxElements)
	}
	g := f.g
	g.root = ri
	g.layout()
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	return g, nil
}

// Grammar is a built grammar: rules of alternatives of elements. It is
// immutable and safe for concurrent use; each generation runs its own
// Matcher over it.
type Grammar struct {
	rules []rule
	root  int
	// elems holds every alternative of every rule, each ended by an
	// elemEnd; starts[r] are rule r's alternatives' first positions.
	elems  []elem
	starts [][]int32
	// triggers make the grammar lazy (Lazy): none, it holds the whole
	// output.
	triggers []Trigger
	// skip, when set, is a block of the output in which a lazy
	// grammar's triggers do not count (Skipping), and budget, where
	// budgeted, bounds it in tokens (Budgeted).
	skip     *Block
	budget   int
	budgeted bool
	// free: the grammar holds nothing (Free).
	free bool
}

type rule struct {
	name string
	alts [][]elem
}

type elemKind uint8

const (
	elemEnd elemKind = iota
	elemClass
	elemRef
)

type elem struct {
	kind  elemKind
	ref   int32
	class Class
}

type flattener struct {
	b    *Builder
	g    *Grammar
	size int
	anon int // generated rules so far, which name them
}

// newRule adds a generated rule.
func (f *flattener) newRule(parent string, alts [][]elem) int32 {
	f.anon++
	f.g.rules = append(f.g.rules, rule{name: parent + "-" + strconv.Itoa(f.anon), alts: alts})
	return int32(len(f.g.rules) - 1)
}

func (f *flattener) grow(n int) error {
	f.size += n
	if f.size > MaxElements || len(f.g.rules) > MaxRules {
		return fmt.Errorf("%w: more than %d elements or %d rules", ErrTooLarge, MaxElements, MaxRules)
	}
	return nil
}

// alts flattens e as a rule body: its alternatives.
func (f *flattener) alts(e Expr, name string) ([][]elem, error) {
	if e.op == opAlt {
		if len(e.subs) == 0 {
			return nil, fmt.Errorf("%w: rule %q: an alternative of nothing", ErrInvalid, name)
		}
		out := make([][]elem, 0, len(e.subs))
		for _, s := range e.subs {
			seq, err := f.seq(nil, s, name)
			if err != nil {
				return nil, err
			}
			out = append(out, seq)
		}
		return out, nil
	}
	seq, err := f.seq(nil, e, name)
	if err != nil {
		return nil, err
	}
	return [][]elem{seq}, nil
}

// seq appends e's elements to dst, making rules for what is not a plain
// sequence.
func (f *flattener) seq(dst []elem, e Expr, name string) ([]elem, error) {
	switch e.op {
	case opLit:
		if err := f.grow(len(e.lit)); err != nil {
			return nil, err
		}
		for i := 0; i < len(e.lit); i++ {
			var c Class
			c.Add(e.lit[i], e.lit[i])
			dst = append(dst, elem{kind: elemClass, class: c})
		}
		return dst, nil
	case opClass:
		if e.class.empty() {
			return nil, fmt.Errorf("%w: rule %q: an empty byte class", ErrInvalid, name)
		}
		if err := f.grow(1); err != nil {
			return nil, err
		}
		return append(dst, elem{kind: elemClass, class: e.class}), nil
	case opSeq:
		var err error
		for _, s := range e.subs {
			if dst, err = f.seq(dst, s, name); err != nil {
				return nil, err
			}
		}
		return dst, nil
	case opRef:
		i, ok := f.b.names[e.name]
		if !ok {
			return nil, fmt.Errorf("%w: rule %q refers to undefined rule %q", ErrInvalid, name, e.name)
		}
		if err := f.grow(1); err != nil {
			return nil, err
		}
		return append(dst, elem{kind: elemRef, ref: int32(i)}), nil
	case opAlt:
		alts, err := f.alts(e, name)
		if err != nil {
			return nil, err
		}
		if len(alts) == 1 {
			return append(dst, alts[0]...), nil
		}
		if err := f.grow(1); err != nil {
			return nil, err
		}
		return append(dst, elem{kind: elemRef, ref: f.newRule(name, alts)}), nil
	case opRepeat:
		return f.repeat(dst, e, name)
	}
	return nil, fmt.Errorf("%w: rule %q holds an unset expression", ErrInvalid, name)
}

// repeat flattens e{min,max}: min copies, then a chain of optional ones
// (x (x (x)?)?)? or, unbounded, a right-recursive rule r ::= x r | ε.
func (f *flattener) repeat(dst []elem, e Expr, name string) ([]elem, error) {
	if e.min < 0 || e.max >= 0 && e.max < e.min {
		return nil, fmt.Errorf("%w: rule %q: repetition {%d,%d}", ErrInvalid, name, e.min, e.max)
	}
	if e.max > MaxElements || e.min > MaxElements {
		return nil, fmt.Errorf("%w: rule %q: repetition {%d,%d}", ErrTooLarge, name, e.min, e.max)
	}
	item, err := f.seq(nil, e.subs[0], name)
	if err != nil {
		return nil, err
	}
	if len(item) == 0 {
		return dst, nil // nothing, repeated
	}
	if len(item) != 1 && (e.min > 1 || e.max != e.min) {
		// One element to repeat: a rule of the item.
		item = []elem{{kind: elemRef, ref: f.newRule(name, [][]elem{item})}}
	}
	if err := f.grow(len(item) * max(e.min, 1)); err != nil {
		return nil, err
	}
	for range e.min {
		dst = append(dst, item...)
	}
	switch {
	case e.max < 0:
		r := f.newRule(name, nil)
		f.g.rules[r].alts = [][]elem{append(append([]elem(nil), item...), elem{kind: elemRef, ref: r}), nil}
		if err := f.grow(2); err != nil {
			return nil, err
		}
		dst = append(dst, elem{kind: elemRef, ref: r})
	case e.max > e.min:
		var next []elem
		for range e.max - e.min {
			if err := f.grow(3); err != nil {
				return nil, err
			}
			r := f.newRule(name, [][]elem{append(append([]elem(nil), item...), next...), nil})
			next = []elem{{kind: elemRef, ref: r}}
		}
		dst = append(dst, next...)
	}
	return dst, nil
}

// layout lays every alternative out in elems.
func (g *Grammar) layout() {
	g.starts = make([][]int32, len(g.rules))
	for r, ru := range g.rules {
		for _, a := range ru.alts {
			g.starts[r] = append(g.starts[r], int32(len(g.elems)))
			g.elems = append(g.elems, a...)
			g.elems = append(g.elems, elem{kind: elemEnd})
		}
	}
}

// checkLeftRecursion refuses a rule that can reach itself without
// consuming a byte: expanding it would never end.
func (g *Grammar) checkLeftRecursion() error {
	n := len(g.rules)
	nullable := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r, ru := range g.rules {
			if nullable[r] {
				continue
			}
			for _, a := range ru.alts {
				all := true
				for _, el := range a {
					if el.kind == elemClass || el.kind == elemRef && !nullable[el.ref] {
						all = false
						break
					}
				}
				if all {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	// first[r]: the rules r may begin by expanding.
	first := make([][]int32, n)
	for r, ru := range g.rules {
		for _, a := range ru.alts {
			for _, el := range a {
				if el.kind == elemClass {
					break
				}
				first[r] = append(first[r], el.ref)
				if !nullable[el.ref] {
					break
				}
			}
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, n)
	// Iterative DFS, so that a deep grammar cannot overflow the stack.
	type frame struct{ r, i int32 }
	for s := range n {
		if color[s] != white {
			continue
		}
		stack := []frame{{int32(s), 0}}
		color[s] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if int(top.i) == len(first[top.r]) {
				color[top.r] = black
				stack = stack[:len(stack)-1]
				continue
			}
			next := first[top.r][top.i]
			top.i++
			switch color[next] {
			case grey:
				return fmt.Errorf("%w: rule %q is left recursive (it can reach itself without consuming a byte)", ErrInvalid, g.rules[next].name)
			case white:
				color[next] = grey
				stack = append(stack, frame{next, 0})
			}
		}
	}
	return nil
}

// String is the grammar in a GBNF-like text, one rule a line in a fixed
// order: its canonical form (two grammars with the same text match the
// same language the same way).
func (g *Grammar) String() string {
	var b strings.Builder
	if g.free {
		b.WriteString("free\n")
	}
	for r, ru := range g.rules {
		if r == g.root {
			b.WriteString("root=")
		}
		b.WriteString(ru.name)
		b.WriteString(" ::=")
		for i, a := range ru.alts {
			if i > 0 {
				b.WriteString(" |")
			}
			if len(a) == 0 {
				b.WriteString(` ""`)
			}
			writeElems(&b, g, a)
		}
		b.WriteByte('\n')
	}
	g.writeTriggers(&b)
	return b.String()
}

func writeElems(b *strings.Builder, g *Grammar, a []elem) {
	inLit := false
	for _, el := range a {
		if el.kind == elemClass {
			if c, ok := single(&el.class); ok {
				if !inLit {
					b.WriteString(` "`)
					inLit = true
				}
				writeByte(b, c, '"')
				continue
			}
		}
		if inLit {
			b.WriteByte('"')
			inLit = false
		}
		b.WriteByte(' ')
		if el.kind == elemRef {
			b.WriteString(g.rules[el.ref].name)
			continue
		}
		b.WriteByte('[')
		for lo := 0; lo < 256; {
			if !el.class.Has(byte(lo)) {
				lo++
				continue
			}
			hi := lo
			for hi+1 < 256 && el.class.Has(byte(hi+1)) {
				hi++
			}
			writeByte(b, byte(lo), ']')
			if hi > lo {
				b.WriteByte('-')
				writeByte(b, byte(hi), ']')
			}
			lo = hi + 1
		}
		b.WriteByte(']')
	}
	if inLit {
		b.WriteByte('"')
	}
}

// single reports the one byte c holds, if it holds one.
func single(c *Class) (byte, bool) {
	n, at := 0, 0
	for w, x := range c {
		for x != 0 {
			n++
			at = w*64 + trailingZeros(x)
			x &= x - 1
		}
	}
	return byte(at), n == 1
}

func trailingZeros(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// writeByte writes c printable, or escaped as \xNN (and the quote and
// backslash escaped).
func writeByte(b *strings.Builder, c byte, quote byte) {
	switch {
	case c == quote || c == '\\' || c == '-' && quote == ']' || c == '^' && quote == ']':
		b.WriteByte('\\')
		b.WriteByte(c)
	case c >= 0x20 && c < 0x7f:
		b.WriteByte(c)
	default:
		fmt.Fprintf(b, `\x%02X`, c)
	}
}
