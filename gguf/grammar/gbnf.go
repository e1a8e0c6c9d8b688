package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// GBNF is llama.cpp's grammar notation (its grammars/README.md), which
// llama-server takes in a request's "grammar" field:
//
//	root   ::= answer "."
//	answer ::= "yes" | "no" | [0-9]+ ("," [0-9]+)*   # a comment
//
// A rule is a name (letters, digits and "-"), "::=" and alternatives
// (|) of sequences of: string literals ("..."), character classes
// ([a-z], [^"\\]), any character (.), rule names, groups ((...)), each
// followed by *, +, ?, {m}, {m,}, {,n} or {m,n}. Literals and classes hold
// Unicode characters (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH
// \UHHHHHHHH), matched as their UTF-8 bytes. A rule's alternatives end
// at the end of its line, unless inside a group or after "|" or "::=".
// The grammar starts at the rule "root". llama.cpp's token references
// (<[id]>, <name>) name tokens of one vocabulary and are refused.

// MaxGBNF bounds a GBNF text's length, and maxGBNFDepth the nesting of
// its groups: the text comes from a request.
const (
	MaxGBNF      = 256 << 10
	maxGBNFDepth = 64
)

// GBNFError is where a GBNF text is wrong: its line and column (from 1,
// the column in bytes) and what was wrong there. It wraps ErrInvalid.
type GBNFError struct {
	Line, Col int
	Msg       string
}

func (e *GBNFError) Error() string {
	return fmt.Sprintf("grammar: GBNF line %d, column %d: %s", e.Line, e.Col, e.Msg)
}

func (e *GBNFError) Unwrap() error { return ErrInvalid }

// ParseGBNF reads a GBNF grammar and builds it. A syntax error is a
// *GBNFError; an undefined or left-recursive rule, or a missing root,
// wraps ErrInvalid; a grammar past the limits, ErrTooLarge.
func ParseGBNF(src string) (*Grammar, error) {
	if len(src) > MaxGBNF {
		return nil, fmt.Errorf("%w: a GBNF grammar of %d bytes (at most %d)", ErrTooLarge, len(src), MaxGBNF)
	}
	if !utf8.ValidString(src) {
		return nil, &GBNFError{Line: 1, Col: 1, Msg: "the grammar is not valid UTF-8"}
	}
	p := &gbnfParser{src: src, b: NewBuilder(), defined: map[string]bool{}}
	if err := p.grammar(); err != nil {
		return nil, err
	}
	if !p.defined["root"] {
		return nil, fmt.Errorf("%w: the grammar has no rule \"root\", where it starts", ErrInvalid)
	}
	return p.b.Build("root")
}

type gbnfParser struct {
	src     string
	pos     int
	depth   int
	b       *Builder
	defined map[string]bool
}

// errAt is a GBNFError at byte offset at.
func (p *gbnfParser) errAt(at int, format string, args ...any) error {
	line, col := 1, 1
	for i := 0; i < at && i < len(p.src); i++ {
		if p.src[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return &GBNFError{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func (p *gbnfParser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

// space skips blanks and comments, and line ends where newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *gbnfParser) grammar() error {
	p.space(true)
	for p.pos < len(p.src) {
		if err := p.rule(); err != nil {
			return err
		}
		p.space(true)
	}
	return nil
}

func (p *gbnfParser) rule() error {
	at := p.pos
	name := p.name()
	if name == "" {
		return p.errAt(at, "expected a rule name, found %q", p.rest())
	}
	p.space(false)
	if !hasPrefixAt(p.src, p.pos, "::=") {
		return p.errAt(p.pos, "expected ::= after the rule name %q", name)
	}
	p.pos += 3
	p.space(true)
	e, err := p.alternates(false)
	if err != nil {
		return err
	}
	if p.defined[name] {
		return p.errAt(at, "rule %q is defined twice", name)
	}
	p.defined[name] = true
	p.b.Define(name, e)
	switch c := p.peek(); c {
	case 0, '\n', '\r':
		return nil
	default:
		return p.errAt(p.pos, "unexpected %q at the end of rule %q", p.rest(), name)
	}
}

// rest is a short excerpt of the text from the current position.
func (p *gbnfParser) rest() string {
	r := p.src[p.pos:]
	if len(r) > 16 {
		r = r[:16] + "…"
	}
	return r
}

func (p *gbnfParser) alternates(nested bool) (Expr, error) {
	var alts []Expr
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return Expr{}, err
		}
		alts = append(alts, seq)
		if p.peek() != '|' {
			break
		}
		p.pos++
		p.space(true)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return Alt(alts...), nil
}

func (p *gbnfParser) sequence(nested bool) (Expr, error) {
	var items []Expr
	for {
		var item Expr
		at := p.pos
		switch c := p.peek(); {
		case c == 0 || c == '|' || c == ')' || c == '\n' || c == '\r':
			return Seq(items...), nil
		case c == '"':
			s, err := p.literal()
			if err != nil {
				return Expr{}, err
			}
			item = Lit(s)
		case c == '[':
			e, err := p.class()
			if err != nil {
				return Expr{}, err
			}
			item = e
		case c == '.':
			p.pos++
			item = anyChar()
		case c == '(':
			if p.depth++; p.depth > maxGBNFDepth {
				return Expr{}, p.errAt(at, "groups nested more than %d deep", maxGBNFDepth)
			}
			p.pos++
			p.space(true)
			e, err := p.alternates(true)
			if err != nil {
				return Expr{}, err
			}
			if p.peek() != ')' {
				return Expr{}, p.errAt(at, "a group opened here is not closed")
			}
			p.pos++
			p.depth--
			item = e
		case c == '<' || c == '!' && hasPrefixAt(p.src, p.pos, "!<"):
			return Expr{}, p.errAt(at, "token references (<[id]>, <name>) are not supported: they name one vocabulary's tokens; spell the text instead")
		case isNameByte(c):
			item = Ref(p.name())
		default:
			return Expr{}, p.errAt(at, "unexpected %q", p.rest())
		}
		p.space(nested)
		for {
			rep, err := p.postfix(item)
			if err == errNoPostfix {
				break
			}
			if err != nil {
				return Expr{}, err
			}
			item = rep
			p.space(nested)
		}
		items = append(items, item)
	}
}

var errNoPostfix = errors.New("no postfix")

// postfix applies a repetition operator to e, or says there is none.
func (p *gbnfParser) postfix(e Expr) (Expr, error) {
	switch p.peek() {
	case '*':
		p.pos++
		return Star(e), nil
	case '+':
		p.pos++
		return Repeat(e, 1, -1), nil
	case '?':
		p.pos++
		return Opt(e), nil
	case '{':
		at := p.pos
		p.pos++
		p.space(false)
		lo, ok := p.count()
		if !ok && p.peek() != ',' { // {,n}: lo is 0
			return Expr{}, p.errAt(at, "expected a count in {m}, {m,}, {,n} or {m,n}")
		}
		hi := lo
		p.space(false)
		if p.peek() == ',' {
			p.pos++
			p.space(false)
			hi = -1
			if n, ok := p.count(); ok {
				hi = n
			}
			p.space(false)
		}
		if p.peek() != '}' {
			return Expr{}, p.errAt(at, "a repetition {m,n} is not closed")
		}
		p.pos++
		if hi >= 0 && hi < lo {
			return Expr{}, p.errAt(at, "repetition {%d,%d}: its most is below its least", lo, hi)
		}
		return Repeat(e, lo, hi), nil
	}
	return Expr{}, errNoPostfix
}

// count reads a repetition count, capped past MaxElements (which the
// build refuses).
func (p *gbnfParser) count() (int, bool) {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	if p.pos == start {
		return 0, false
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	if err != nil || n > MaxElements {
		n = MaxElements + 1
	}
	return n, true
}

// char reads one character of a literal or class: an escape or a UTF-8
// character.
func (p *gbnfParser) char() (rune, error) {
	at := p.pos
	c := p.src[p.pos]
	if c != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	if p.pos+1 >= len(p.src) {
		return 0, p.errAt(at, "an escape at the end of the grammar")
	}
	p.pos += 2
	hex := 0
	switch e := p.src[p.pos-1]; e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^':
		return rune(e), nil
	case 'x':
		hex = 2
	case 'u':
		hex = 4
	case 'U':
		hex = 8
	default:
		return 0, p.errAt(at, "unknown escape \\%c", e)
	}
	if p.pos+hex > len(p.src) {
		return 0, p.errAt(at, "escape \\%c needs %d hex digits", p.src[at+1], hex)
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+hex], 16, 32)
	if err != nil {
		return 0, p.errAt(at, "escape \\%c needs %d hex digits", p.src[at+1], hex)
	}
	p.pos += hex
	if v > utf8.MaxRune || v >= 0xD800 && v <= 0xDFFF {
		return 0, p.errAt(at, "escape U+%04X is not a Unicode character", v)
	}
	return rune(v), nil
}

func (p *gbnfParser) literal() (string, error) {
	at := p.pos
	p.pos++ // "
	var b []byte
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return "", p.errAt(at, "a string literal opened here is not closed")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return string(b), nil
		}
		r, err := p.char()
		if err != nil {
			return "", err
		}
		b = utf8.AppendRune(b, r)
	}
}

func (p *gbnfParser) class() (Expr, error) {
	at := p.pos
	p.pos++ // [
	negate := false
	if p.peek() == '^' {
		negate = true
		p.pos++
	}
	var ranges [][2]rune
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return Expr{}, p.errAt(at, "a character class opened here is not closed")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return Expr{}, err
		}
		hi := lo
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return Expr{}, err
			}
			if hi < lo {
				return Expr{}, p.errAt(at, "range %q-%q runs backwards", lo, hi)
			}
		}
		ranges = append(ranges, [2]rune{lo, hi})
	}
	e, ok := runeClass(ranges, negate)
	if !ok {
		return Expr{}, p.errAt(at, "the character class matches nothing")
	}
	return e, nil
}

// anyChar is GBNF's ".": one character, as its UTF-8 bytes (ASCII, or
// UTF8's).
func anyChar() Expr { return Alt(Bytes([2]byte{0x00, 0x7F}), UTF8()) }

// runeClass is the expression of one character in ranges (or, negated,
// in none of them) as its UTF-8 bytes: surrogates are no characters. It
// is false where no character is left.
func runeClass(ranges [][2]rune, negate bool) (Expr, bool) {
	set := normalRanges(ranges)
	if negate {
		var out [][2]rune
		next := rune(0)
		for _, r := range set {
			if r[0] > next {
				out = append(out, [2]rune{next, r[0] - 1})
			}
			next = r[1] + 1
		}
		if next <= utf8.MaxRune {
			out = append(out, [2]rune{next, utf8.MaxRune})
		}
		set = out
	}
	// Surrogates have no UTF-8 form.
	var chars [][2]rune
	for _, r := range set {
		if r[0] < 0xD800 && r[1] >= 0xD800 {
			chars = append(chars, [2]rune{r[0], 0xD7FF})
		}
		switch {
		case r[1] < 0xD800 || r[0] > 0xDFFF:
			chars = append(chars, r)
		case r[1] > 0xDFFF:
			chars = append(chars, [2]rune{max(r[0], 0xE000), r[1]})
		}
	}
	var ascii Class
	var alts []Expr
	for _, r := range chars {
		if r[0] < utf8.RuneSelf {
			ascii.Add(byte(r[0]), byte(min(r[1], utf8.RuneSelf-1)))
			if r[1] < utf8.RuneSelf {
				continue
			}
			r[0] = utf8.RuneSelf
		}
		alts = utf8Ranges(alts, r[0], r[1])
	}
	if !ascii.empty() {
		alts = append([]Expr{ClassOf(ascii)}, alts...)
	}
	switch len(alts) {
	case 0:
		return Expr{}, false
	case 1:
		return alts[0], true
	}
	return Alt(alts...), true
}

// normalRanges sorts ranges and merges those that touch, clipped to
// Unicode.
func normalRanges(ranges [][2]rune) [][2]rune {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b [2]rune) int { return int(a[0] - b[0]) })
	var out [][2]rune
	for _, r := range rs {
		r[1] = min(r[1], utf8.MaxRune)
		if r[0] > r[1] {
			continue
		}
		if n := len(out); n > 0 && r[0] <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// utf8Ranges appends to alts the byte sequences of the characters lo…hi
// (no ASCII, no surrogates): split until each piece is a sequence of
// byte ranges, one per byte of the encoding (as RE2 compiles a class).
func utf8Ranges(alts []Expr, lo, hi rune) []Expr {
	if lo > hi {
		return alts
	}
	// One encoded length on each side.
	for _, edge := range []rune{0x7FF, 0xFFFF} {
		if lo <= edge && hi > edge {
			return utf8Ranges(utf8Ranges(alts, lo, edge), edge+1, hi)
		}
	}
	// Ranges of continuation bytes must be whole below the byte that
	// differs.
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				return utf8Ranges(utf8Ranges(alts, lo, lo|m), (lo|m)+1, hi)
			}
			if hi&m != m {
				return utf8Ranges(utf8Ranges(alts, lo, hi&^m-1), hi&^m, hi)
			}
		}
	}
	a, b := utf8.AppendRune(nil, lo), utf8.AppendRune(nil, hi)
	seq := make([]Expr, len(a))
	for i := range a {
		seq[i] = Bytes([2]byte{a[i], b[i]})
	}
	return append(alts, Seq(seq...))
}

func hasPrefixAt(s string, at int, prefix string) bool {
	return len(s)-at >= len(prefix) && s[at:at+len(prefix)] == prefix
}
