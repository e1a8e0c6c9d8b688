package jinja

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Case changes as Python's str methods make them: Unicode's full case
// mappings (ß upper is SS, İ lower is i̇, ﬁ title is Fi: Go's
// unicode.ToUpper maps a rune to one rune, so the mappings to more are
// tabled in casing_table.go) and the final sigma (ΟΔΟΣ lower is οδος).

// pyUpper is Python's s.upper().
func pyUpper(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if m, ok := specialUpper[r]; ok {
			b.WriteString(m)
		} else {
			b.WriteRune(unicode.ToUpper(r))
		}
	}
	return b.String()
}

// pyLower is Python's s.lower(): a capital sigma lowers to the final ς
// where it ends a word (a cased character before it, none after it,
// case-ignorable ones skipped), to σ elsewhere.
func pyLower(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range s {
		switch m, ok := specialLower[r]; {
		case ok:
			b.WriteString(m)
		case r == 'Σ' && finalSigma(s, i):
			b.WriteRune('ς')
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma reports whether the sigma at s[i] ends a word: Unicode's
// Final_Sigma context, as Python tests it.
func finalSigma(s string, i int) bool {
	before := s[:i]
	for len(before) > 0 {
		r, n := utf8.DecodeLastRuneInString(before)
		if !caseIgnorable(r) {
			if !isCased(r) {
				return false
			}
			break
		}
		before = before[:len(before)-n]
	}
	if len(before) == 0 {
		return false
	}
	for _, r := range s[i+len("Σ"):] {
		if !caseIgnorable(r) {
			return !isCased(r)
		}
	}
	return true
}

// caseIgnorable is Unicode's Case_Ignorable property: marks, format
// characters, modifier letters and symbols, and the characters that
// join a word (Word_Break MidLetter, MidNumLet and Single_Quote).
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '·', '\u0387', '\u055F', '\u05F4', '\u2018', '\u2019', '\u2024', '\u2027',
		'\uFE13', '\uFE52', '\uFE55', '\uFF07', '\uFF0E', '\uFF1A':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// titleRune is Python's title case of one character (ǆ is ǅ, ß is Ss).
func titleRune(r rune) string {
	if m, ok := specialTitle[r]; ok {
		return m
	}
	return string(unicode.ToTitle(r))
}

// lowerAfter is s lowered with its first character left out: Python
// lowers the rest of a word with the word around it (a sigma after the
// first letter may be final), so the whole is lowered and the first
// character's lower case taken off the front.
func lowerAfter(s string, first rune) string {
	whole, head := pyLower(s), pyLower(string(first))
	if rest, ok := strings.CutPrefix(whole, head); ok {
		return rest
	}
	return pyLower(s[utf8.RuneLen(first):])
}

// pyCapitalize is Python's s.capitalize() (and Jinja's capitalize): the
// first character title cased, the rest lower.
func pyCapitalize(s string) string {
	first, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return ""
	}
	return titleRune(first) + lowerAfter(s, first)
}

// pyTitle is Python's s.title(): a character after a cased one lowered,
// any other title cased ("they're" is "They'Re").
func pyTitle(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		// A word: its first character, then each that follows a cased
		// one.
		first, n := utf8.DecodeRuneInString(s)
		end, prev := n, first
		for end < len(s) && isCased(prev) {
			r, m := utf8.DecodeRuneInString(s[end:])
			end, prev = end+m, r
		}
		if isCased(first) || end > n {
			b.WriteString(titleRune(first))
			b.WriteString(lowerAfter(s[:end], first))
		} else {
			b.WriteString(s[:end]) // uncased: its title case is itself
		}
		s = s[end:]
	}
	return b.String()
}

// titleSplit is where Jinja's title filter begins words: after dashes,
// spaces and opening brackets.
var titleSplit = regexp.MustCompile(`[-\t\n\v\f\r\x1c-\x1f \x{85}\p{Z}({\[<]+`) // Python's \s is str.isspace

// jinjaTitle is Jinja's title filter: each word's first character upper
// cased (Python's upper: ß is SS) and the rest lowered, words beginning
// after runs of titleSplit, which are kept.
func jinjaTitle(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	word := func(w string) {
		if first, n := utf8.DecodeRuneInString(w); n > 0 {
			b.WriteString(pyUpper(string(first)))
			b.WriteString(pyLower(w[n:]))
		}
	}
	at := 0
	for _, loc := range titleSplit.FindAllStringIndex(s, -1) {
		word(s[at:loc[0]])
		word(s[loc[0]:loc[1]]) // Jinja cases the separators too: no change
		at = loc[1]
	}
	word(s[at:])
	return b.String()
}

// isCased is Unicode's Cased property, as Python reads it.
func isCased(r rune) bool { return isLowerPy(r) || isUpperPy(r) || unicode.IsTitle(r) }

// isLowerPy and isUpperPy are Unicode's Lowercase and Uppercase
// properties (the letter categories and Other_Lowercase/Uppercase: ª,
// ʰ, Ⓐ), as Python's str.islower and isupper read them.
func isLowerPy(r rune) bool { return unicode.IsLower(r) || unicode.Is(unicode.Other_Lowercase, r) }
func isUpperPy(r rune) bool { return unicode.IsUpper(r) || unicode.Is(unicode.Other_Uppercase, r) }

// pyIsUpper is Python's s.isupper(): a cased character, and none lower
// or title cased. pyIsLower likewise.
func pyIsUpper(s string) bool { return allCased(s, isUpperPy, isLowerPy) }
func pyIsLower(s string) bool { return allCased(s, isLowerPy, isUpperPy) }

// allCased reports whether s holds a character that is and none that is
// other or title cased.
func allCased(s string, is, other func(rune) bool) bool {
	cased := false
	for _, r := range s {
		if other(r) || unicode.IsTitle(r) {
			return false
		}
		cased = cased || is(r)
	}
	return cased
}
