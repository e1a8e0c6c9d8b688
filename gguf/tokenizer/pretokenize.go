package tokenizer

import "unicode"

// text is a fragment decoded to code points with their classes; the
// pre-tokenizers cut it into words, expressed as lengths in code points.
type text struct {
	cp  []rune
	cls []uint16
}

func (t *text) reset(s string) {
	t.cp, t.cls = t.cp[:0], t.cls[:0]
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		t.cp = append(t.cp, r)
		t.cls = append(t.cls, classOf(r))
		i += n
	}
}

// A splitter refines the words in chunks (lengths over t) into a finer list
// appended to out. Splitters run in sequence, each on the previous output,
// as llama.cpp applies a pre-tokenizer's regular expressions in order.
type splitter func(t *text, chunks, out []int) []int

// chunkScan runs scan over every chunk [ini,end); scan appends the lengths
// of the words it finds.
func chunkScan(t *text, chunks, out []int, scan func(t *text, ini, end int, out []int) []int) []int {
	start := 0
	for _, n := range chunks {
		out = scan(t, start, start+n, out)
		start += n
	}
	return out
}

// The scanners below are hand-written equivalents of the regular
// expressions in their comments (which use lookahead that Go's regexp
// lacks), following llama.cpp's unicode.cpp position for position. Each
// returns the class of a position, or 0 past the end of its chunk.

func clsAt(t *text, pos, end int) uint16 {
	if pos < end {
		return t.cls[pos]
	}
	return 0
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at pos (case-folded if
// fold) and returns its length, or 0.
func contraction(t *text, pos, end int, fold bool) int {
	if t.cp[pos] != '\'' || pos+1 >= end {
		return 0
	}
	lower := func(r rune) rune {
		if fold {
			return unicode.ToLower(r)
		}
		return r
	}
	switch n := lower(t.cp[pos+1]); n {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if pos+2 < end {
			nn := lower(t.cp[pos+2])
			if n == 'r' && nn == 'e' || n == 'v' && nn == 'e' || n == 'l' && nn == 'l' {
				return 3
			}
		}
	}
	return 0
}

// scanGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2(t *text, ini, end int, out []int) []int {
	prev := ini
	emit := func(e int) {
		if e > prev {
			out = append(out, e-prev)
		}
		prev = e
	}
	for pos := ini; pos < end; {
		c := t.cp[pos]
		if n := contraction(t, pos, end, false); n > 0 {
			pos += n
			emit(pos)
			continue
		}
		f2 := t.cls[pos]
		if c == ' ' {
			f2 = clsAt(t, pos+1, end)
		}
		space := 0
		if c == ' ' {
			space = 1
		}
		var word uint16 // ' ?\p{L}+' or ' ?\p{N}+'
		switch {
		case f2&clsLetter != 0:
			word = clsLetter
		case f2&clsNumber != 0:
			word = clsNumber
		}
		if word != 0 {
			pos += space
			for clsAt(t, pos, end)&word != 0 {
				pos++
			}
			emit(pos)
			continue
		}
		if other(f2) {
			pos += space
			for other(clsAt(t, pos, end)) {
				pos++
			}
			emit(pos)
			continue
		}
		n := 0
		for clsAt(t, pos+n, end)&clsWhitespace != 0 {
			n++
		}
		pos = spaces(pos, n, end)
		emit(pos)
	}
	return out
}

// spaces ends \s+(?!\S)|\s+ for a run of n spaces at pos: the last space
// of a run followed by a non-space is left to the next word. With n == 0
// the scanners match nothing and take one character.
func spaces(pos, n, end int) int {
	switch {
	case n > 1 && pos+n < end:
		return pos + n - 1
	case n > 0:
		return pos + n
	}
	return pos + 1
}

// other is [^\s\p{L}\p{N}] for a position inside the chunk.
func other(f uint16) bool {
	return f&(clsWhitespace|clsLetter|clsNumber) == 0 && f != 0
}

// llamaScanner covers the llama3 family and its qwen2/qwen35 variants:
//
//	llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//	qwen2:  the same with \p{N} for \p{N}{1,3}
//	qwen35: qwen2 with [\p{L}\p{M}] for \p{L} (marks join letters)
type llamaScanner struct {
	digits int    // longest digit group
	letter uint16 // classes a letter run takes
	// bareSymbols drops the [\r\n]* after a symbol run (seed-coder:
	// ' ?[^\s\p{L}\p{N}\r\n]+').
	bareSymbols bool
}

func (s llamaScanner) scan(t *text, ini, end int, out []int) []int {
	prev := ini
	emit := func(e int) {
		if e > prev {
			out = append(out, e-prev)
		}
		prev = e
	}
	notWord := clsWhitespace | s.letter | clsNumber
	for pos := ini; pos < end; {
		c, f := t.cp[pos], t.cls[pos]
		if n := contraction(t, pos, end, true); n > 0 {
			pos += n
			emit(pos)
			continue
		}
		if !isCRLF(c) && f&clsNumber == 0 && (f&s.letter != 0 || clsAt(t, pos+1, end)&s.letter != 0) {
			pos++
			for clsAt(t, pos, end)&s.letter != 0 {
				pos++
			}
			emit(pos)
			continue
		}
		if f&clsNumber != 0 {
			group := pos
			for clsAt(t, pos, end)&clsNumber != 0 {
				if pos++; pos-group >= s.digits {
					emit(pos)
					group = pos
				}
			}
			emit(pos)
			continue
		}
		f2 := f
		if c == ' ' {
			f2 = clsAt(t, pos+1, end)
		}
		if f2&notWord == 0 && f != 0 {
			if c == ' ' {
				pos++
			}
			for g := clsAt(t, pos, end); g&notWord == 0 && g != 0; g = clsAt(t, pos, end) {
				pos++
			}
			for !s.bareSymbols && pos < end && isCRLF(t.cp[pos]) {
				pos++
			}
			emit(pos)
			continue
		}
		n, lastNL := 0, 0
		for clsAt(t, pos+n, end)&clsWhitespace != 0 {
			if isCRLF(t.cp[pos+n]) {
				lastNL = pos + n + 1
			}
			n++
		}
		if lastNL > 0 { // \s*[\r\n]+
			pos = lastNL
		} else {
			pos = spaces(pos, n, end)
		}
		emit(pos)
	}
	return out
}

// scanNewlines: [^\n]+|[\n]+
func scanNewlines(t *text, ini, end int, out []int) []int {
	for pos := ini; pos < end; {
		nl, start := t.cp[pos] == '\n', pos
		for pos < end && (t.cp[pos] == '\n') == nl {
			pos++
		}
		out = append(out, pos-start)
	}
	return out
}

// A matcher is one regular expression of the simple kind llama.cpp hands to
// std::regex: it returns the end of the match starting at pos, or -1.
// Splitting by it keeps matches and the text between them as words.
type matcher func(t *text, pos, end int) int

func (m matcher) split(t *text, chunks, out []int) []int {
	return chunkScan(t, chunks, out, func(t *text, ini, end int, out []int) []int {
		prev := ini
		for pos := ini; pos < end; {
			e := m(t, pos, end)
			if e < 0 {
				pos++
				continue
			}
			if pos > prev {
				out = append(out, pos-prev)
			}
			out = append(out, e-pos)
			pos, prev = e, e
		}
		if end > prev {
			out = append(out, end-prev)
		}
		return out
	})
}

// A class says whether a code point (with its classes) is in a set.
type class func(r rune, f uint16) bool

func hasClass(cls uint16) class { return func(_ rune, f uint16) bool { return f&cls != 0 } }

// oneOf is a class of code point ranges written like a regex bracket
// expression body: "a-zA-Z_" (no escapes; '-' only between two ends).
func oneOf(set string) class {
	rs := []rune(set)
	var lo, hi []rune
	for i := 0; i < len(rs); i++ {
		if i+2 < len(rs) && rs[i+1] == '-' {
			lo, hi = append(lo, rs[i]), append(hi, rs[i+2])
			i += 2
			continue
		}
		lo, hi = append(lo, rs[i]), append(hi, rs[i])
	}
	return func(r rune, _ uint16) bool {
		for i := range lo {
			if lo[i] <= r && r <= hi[i] {
				return true
			}
		}
		return false
	}
}

func anyOf(cs ...class) class {
	return func(r rune, f uint16) bool {
		for _, c := range cs {
			if c(r, f) {
				return true
			}
		}
		return false
	}
}

// notWS excludes whitespace from c: std::wregex sees every non-ASCII space
// as U+000B, so literal ranges never match one.
func notWS(c class) class {
	return func(r rune, f uint16) bool { return f&clsWhitespace == 0 && c(r, f) }
}

func (c class) at(t *text, pos, end int) bool { return pos < end && c(t.cp[pos], t.cls[pos]) }

// one: [c]
func one(c class) matcher {
	return func(t *text, pos, end int) int {
		if c.at(t, pos, end) {
			return pos + 1
		}
		return -1
	}
}

// run: [c]+
func run(c class) matcher {
	return func(t *text, pos, end int) int {
		e := pos
		for c.at(t, e, end) {
			e++
		}
		if e == pos {
			return -1
		}
		return e
	}
}

// upTo: [c]{1,n}
func upTo(c class, n int) matcher {
	return func(t *text, pos, end int) int {
		e := pos
		for e-pos < n && c.at(t, e, end) {
			e++
		}
		if e == pos {
			return -1
		}
		return e
	}
}

// exactly: [c]{n}
func exactly(c class, n int) matcher {
	return func(t *text, pos, end int) int {
		for i := range n {
			if !c.at(t, pos+i, end) {
				return -1
			}
		}
		return pos + n
	}
}

// prefixed: P?[c]+, where P is lead (a space class, or one literal).
func prefixed(lead, c class) matcher {
	r := run(c)
	return func(t *text, pos, end int) int {
		if lead.at(t, pos, end) {
			if e := r(t, pos+1, end); e >= 0 {
				return e
			}
		}
		return r(t, pos, end)
	}
}

// trailingSpace: \s+$
func trailingSpace(t *text, pos, end int) int {
	for i := pos; i < end; i++ {
		if t.cls[i]&clsWhitespace == 0 {
			return -1
		}
	}
	if pos == end {
		return -1
	}
	return end
}

var (
	isSpace  = hasClass(clsWhitespace)
	isLetter = hasClass(clsLetter)
	isNumber = hasClass(clsNumber)
	isPunct  = hasClass(clsPunct)
	isDigit  = oneOf("0-9")
	isCRorLF = oneOf("\r\n")
	// [一-龥ࠀ-一가-퟿]: CJK ideographs (and most scripts above U+0800), Hangul.
	isCJK = notWS(oneOf("一-龥ࠀ-一가-퟿"))
)

func scanner(f func(t *text, ini, end int, out []int) []int) splitter {
	return func(t *text, chunks, out []int) []int { return chunkScan(t, chunks, out, f) }
}
