package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Regular expressions, compiled into expressions: a JSON Schema's
// pattern (the string's characters as JSON writes them) and a raw
// pattern that holds the whole output (vLLM's guided_regex). The
// syntax is RE2's, as Go's regexp reads it (Perl's classes, \d \w \s,
// repetition, alternation, groups, (?i)); lookaround and backreferences
// are not in it. A character class beyond ASCII is compiled to its UTF-8
// byte sequences (utf8Range); \b and anchors other than at the ends are
// refused.

// MaxRegexRepeat bounds a counted repetition's bound ({n}, {n,m}): each
// repetition is a copy of its expression.
const MaxRegexRepeat = MaxBound

// Regex compiles pattern into an expression matching what it matches:
// the whole text (raw), or, for a JSON Schema's pattern (json), the
// characters of a JSON string's content as JSON writes them (a quote,
// a backslash and a control character escaped), which need only hold a
// match somewhere unless the pattern is anchored (^ at its start, $ at
// its end), as the schema's rule reads it.
func (b *Builder) Regex(pattern string, json bool) (Expr, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return Expr{}, fmt.Errorf("%w: pattern %q: %v", ErrInvalid, pattern, err)
	}
	re = re.Simplify()
	rc := regexCompiler{b: b, json: json}
	start, end := false, false
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	if len(subs) > 0 && isBegin(subs[0]) {
		start, subs = true, subs[1:]
	}
	if len(subs) > 0 && isEnd(subs[len(subs)-1]) {
		end, subs = true, subs[:len(subs)-1]
	}
	parts := make([]Expr, 0, len(subs)+2)
	if json && !start {
		parts = append(parts, Star(rc.anyChar(true)))
	}
	for _, s := range subs {
		e, err := rc.expr(s)
		if err != nil {
			if re, ok := err.(*RegexError); ok {
				re.Pattern = pattern
			}
			return Expr{}, err
		}
		parts = append(parts, e)
	}
	if json && !end {
		parts = append(parts, Star(rc.anyChar(true)))
	}
	return Seq(parts...), nil
}

func isBegin(re *syntax.Regexp) bool {
	return re.Op == syntax.OpBeginText || re.Op == syntax.OpBeginLine
}

func isEnd(re *syntax.Regexp) bool {
	return re.Op == syntax.OpEndText || re.Op == syntax.OpEndLine
}

type regexCompiler struct {
	b    *Builder
	json bool
}

func (rc regexCompiler) expr(re *syntax.Regexp) (Expr, error) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return Seq(), nil
	case syntax.OpLiteral:
		parts := make([]Expr, 0, len(re.Rune))
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				parts = append(parts, rc.folded(r))
			} else {
				parts = append(parts, rc.char(r))
			}
		}
		return Seq(parts...), nil
	case syntax.OpCharClass:
		return rc.class(re.Rune)
	case syntax.OpAnyCharNotNL:
		return rc.anyChar(false), nil
	case syntax.OpAnyChar:
		return rc.anyChar(true), nil
	case syntax.OpCapture:
		return rc.expr(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := rc.expr(re.Sub[0])
		if err != nil {
			return Expr{}, err
		}
		switch re.Op {
		case syntax.OpStar:
			return Star(sub), nil
		case syntax.OpPlus:
			return Repeat(sub, 1, -1), nil
		case syntax.OpQuest:
			return Opt(sub), nil
		}
		if re.Min > MaxRegexRepeat || re.Max > MaxRegexRepeat {
			return Expr{}, &RegexError{Why: fmt.Sprintf("a repetition bound past %d", MaxRegexRepeat)}
		}
		return Repeat(sub, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		parts := make([]Expr, 0, len(re.Sub))
		for _, s := range re.Sub {
			e, err := rc.expr(s)
			if err != nil {
				return Expr{}, err
			}
			parts = append(parts, e)
		}
		if re.Op == syntax.OpConcat {
			return Seq(parts...), nil
		}
		return Alt(parts...), nil
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return Expr{}, &RegexError{Why: "an anchor (^, $) only at the pattern's start or end"}
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return Expr{}, &RegexError{Why: `word boundaries (\b, \B)`}
	}
	return Expr{}, &RegexError{Why: fmt.Sprintf("%v", re)}
}

// char is one character as the output writes it: itself, or in a JSON
// string its escape where JSON needs one.
func (rc regexCompiler) char(r rune) Expr {
	if rc.json {
		if esc, ok := jsonEscape(r); ok {
			return Lit(esc)
		}
	}
	return Lit(string(r))
}

// folded is r in any case.
func (rc regexCompiler) folded(r rune) Expr {
	alts := []Expr{rc.char(r)}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		alts = append(alts, rc.char(f))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

// jsonEscape is the escape JSON writes r as in a string, where it needs
// one: the quote, the backslash, the control characters.
func jsonEscape(r rune) (string, bool) {
	switch r {
	case '"':
		return `\"`, true
	case '\\':
		return `\\`, true
	case '\n':
		return `\n`, true
	case '\r':
		return `\r`, true
	case '\t':
		return `\t`, true
	case '\b':
		return `\b`, true
	case '\f':
		return `\f`, true
	}
	if r < 0x20 {
		return fmt.Sprintf(`\u%04x`, r), true
	}
	return "", false
}

// anyChar is any character (nl: a newline too).
func (rc regexCompiler) anyChar(nl bool) Expr {
	ranges := []rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune}
	if nl {
		ranges = []rune{0, utf8.MaxRune}
	}
	e, _ := rc.class(ranges) // every non-ASCII character: never refused
	return e
}

// class is a character class, given as syntax's sorted ranges: its ASCII
// characters each (in a JSON string, those JSON escapes as their
// escapes), and beyond ASCII none or every one.
func (rc regexCompiler) class(ranges []rune) (Expr, error) {
	var bytes [][2]byte
	var alts []Expr
	addByte := func(lo, hi rune) {
		bytes = append(bytes, [2]byte{byte(lo), byte(hi)})
	}
	wide := false // the class holds characters beyond ASCII
	var covered []rune
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if hi > unicode.MaxASCII {
			wide = true
			covered = append(covered, max(lo, unicode.MaxASCII+1), hi)
			hi = unicode.MaxASCII
		}
		for lo <= hi {
			if !rc.json {
				addByte(lo, hi)
				break
			}
			// Runs of characters JSON writes as they are, and the ones it
			// escapes one by one.
			if _, esc := jsonEscape(lo); esc {
				alts = append(alts, rc.char(lo))
				lo++
				continue
			}
			end := lo
			for end < hi {
				if _, esc := jsonEscape(end + 1); esc {
					break
				}
				end++
			}
			addByte(lo, end)
			lo = end + 1
		}
	}
	if wide {
		if coversNonASCII(covered) {
			alts = append(alts, UTF8())
		} else {
			for i := 0; i+1 < len(covered); i += 2 {
				alts = append(alts, utf8Range(covered[i], covered[i+1])...)
			}
		}
	}
	if len(bytes) > 0 {
		alts = append([]Expr{Bytes(bytes...)}, alts...)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return Alt(alts...), nil
}

// utf8Range is the characters lo … hi beyond ASCII as their UTF-8 bytes:
// split where the encoding's length changes and around the surrogates
// (which UTF-8 does not encode), then until each piece is a sequence of
// byte ranges, one a byte (as Go's regexp compiles a class).
func utf8Range(lo, hi rune) []Expr {
	if lo < 0xD800 && hi > 0xDFFF {
		return append(utf8Range(lo, 0xD7FF), utf8Range(0xE000, hi)...)
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return nil
	}
	for _, edge := range []rune{0x7FF, 0xFFFF} {
		if lo <= edge && edge < hi {
			return append(utf8Range(lo, edge), utf8Range(edge+1, hi)...)
		}
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1 // the low bits i continuation bytes hold
		if lo&^m != hi&^m {
			if lo&m != 0 {
				return append(utf8Range(lo, lo|m), utf8Range((lo|m)+1, hi)...)
			}
			if hi&m != m {
				return append(utf8Range(lo, (hi&^m)-1), utf8Range(hi&^m, hi)...)
			}
		}
	}
	a, b := make([]byte, n), make([]byte, n)
	utf8.EncodeRune(a, lo)
	utf8.EncodeRune(b, hi)
	seq := make([]Expr, n)
	for i := range seq {
		seq[i] = Bytes([2]byte{a[i], b[i]})
	}
	return []Expr{Seq(seq...)}
}

// coversNonASCII reports whether sorted ranges cover every character
// beyond ASCII, the surrogates (which UTF-8 does not encode) aside.
func coversNonASCII(ranges []rune) bool {
	next := rune(unicode.MaxASCII + 1)
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo > next && !(next >= 0xD800 && lo-1 <= 0xDFFF) {
			return false // a gap [next, lo) that is not all surrogates
		}
		next = max(next, hi+1)
	}
	return next > utf8.MaxRune
}

// RegexError is a pattern that parses but that this compiler does not
// compile, and why.
type RegexError struct {
	Pattern string
	Why     string
}

func (e *RegexError) Error() string {
	return fmt.Sprintf("grammar: pattern %q: not compiled: %s", e.Pattern, e.Why)
}
