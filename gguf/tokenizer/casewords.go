package tokenizer

// caseWords is the o200k-style expression llama.cpp uses for gpt-4o,
// llama4 and (without contractions, single digits) tekken, after its
// rewrite for std::regex, which it runs on text where every non-ASCII code
// point stands for its class. "Upper" is a letter outside a-z, "lower" a
// letter outside A-Z, so letters of other scripts are both:
//
//	P?U*L+C?|P?U+L*C?|\p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// where P is [^\r\n\p{L}\p{N}] and C the optional contraction
// ('s 't 're 've 'm 'll 'd, either case). The alternatives are tried in
// order with the backtracking an ECMAScript engine does. With marks (IBM's
// granite-embed-multi-97m), the words' letters are \p{L} or \p{M}, so a
// combining mark stays with the letter it follows.
type caseWords struct {
	contractions, marks bool
	digits              int
}

func (w caseWords) match(t *text, pos, end int) int {
	wordClass := clsLetter
	if w.marks {
		wordClass |= clsMark
	}
	letter := func(i int) bool { return i < end && t.cls[i]&wordClass != 0 }
	upper := func(i int) bool { return letter(i) && !(t.cp[i] >= 'a' && t.cp[i] <= 'z') }
	lower := func(i int) bool { return letter(i) && !(t.cp[i] >= 'A' && t.cp[i] <= 'Z') }
	suffix := func(e int) int {
		if w.contractions {
			return e + asciiContraction(t, e, end)
		}
		return e
	}
	// U*L+C? from p: the upper run gives back characters until a lower one
	// can follow.
	upperThenLower := func(p int) int {
		u := p
		for upper(u) {
			u++
		}
		if lower(u) {
			e := u
			for lower(e) {
				e++
			}
			return suffix(e)
		}
		for k := u - 1; k >= p; k-- {
			if lower(k) {
				return suffix(k + 1)
			}
		}
		return -1
	}
	// U+L*C? from p (tried only where U*L+ failed, so no lower follows).
	upperOnly := func(p int) int {
		u := p
		for upper(u) {
			u++
		}
		if u == p {
			return -1
		}
		for lower(u) {
			u++
		}
		return suffix(u)
	}
	c, f := t.cp[pos], t.cls[pos]
	prefix := !isCRLF(c) && f&(clsLetter|clsNumber) == 0
	for _, word := range []func(int) int{upperThenLower, upperOnly} {
		if prefix {
			if e := word(pos + 1); e >= 0 {
				return e
			}
		}
		if e := word(pos); e >= 0 {
			return e
		}
	}
	if f&clsNumber != 0 {
		e := pos + 1
		for e < end && e-pos < w.digits && t.cls[e]&clsNumber != 0 {
			e++
		}
		return e
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
	p := pos
	if c == ' ' && other(clsAt(t, pos+1, end)) {
		p++
	}
	if other(clsAt(t, p, end)) {
		for other(clsAt(t, p, end)) {
			p++
		}
		for p < end && (isCRLF(t.cp[p]) || t.cp[p] == '/') {
			p++
		}
		return p
	}
	return matchSpaces(t, pos, end)
}

// matchSpaces: \s*[\r\n]+|\s+(?!\S)|\s+, or -1 where pos is not a space.
func matchSpaces(t *text, pos, end int) int {
	n, lastNL := 0, 0
	for clsAt(t, pos+n, end)&clsWhitespace != 0 {
		if isCRLF(t.cp[pos+n]) {
			lastNL = pos + n + 1
		}
		n++
	}
	switch {
	case n == 0:
		return -1
	case lastNL > 0:
		return lastNL
	}
	return spaces(pos, n, end)
}

// asciiContraction is the length of (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
// at pos, or 0.
func asciiContraction(t *text, pos, end int) int {
	if pos >= end || t.cp[pos] != '\'' || pos+1 >= end {
		return 0
	}
	fold := func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	switch n := fold(t.cp[pos+1]); n {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if pos+2 < end {
			nn := fold(t.cp[pos+2])
			if n == 'r' && nn == 'e' || n == 'v' && nn == 'e' || n == 'l' && nn == 'l' {
				return 3
			}
		}
	}
	return 0
}

// deepseekV3 is the last expression of llama.cpp's deepseek-v3 pre-tokenizer
// (also hunyuan-dense and joyai-llm), on the same class-collapsed text:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Characters none of it matches (digits, controls) stay between matches.
func deepseekV3(t *text, pos, end int) int {
	isASCIILetter := func(i int) bool {
		r := t.cp[i]
		return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z'
	}
	c, f := t.cp[pos], t.cls[pos]
	if c < 0x80 && f&(clsPunct|clsSymbol) != 0 && pos+1 < end && isASCIILetter(pos+1) {
		e := pos + 1
		for e < end && isASCIILetter(e) {
			e++
		}
		return e
	}
	word := func(i int) bool { return clsAt(t, i, end)&(clsLetter|clsMark) != 0 }
	p := pos
	if !isCRLF(c) && f&(clsLetter|clsPunct|clsSymbol) == 0 && word(pos+1) {
		p++
	}
	if word(p) {
		for word(p) {
			p++
		}
		return p
	}
	punct := func(i int) bool { return clsAt(t, i, end)&(clsPunct|clsSymbol) != 0 }
	p = pos
	if c == ' ' && punct(pos+1) {
		p++
	}
	if punct(p) {
		for punct(p) {
			p++
		}
		for p < end && isCRLF(t.cp[p]) {
			p++
		}
		return p
	}
	return matchSpaces(t, pos, end)
}
