package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// WordPiece, llama.cpp's WPM vocabulary type (llm_tokenizer_wpm_session):
// the text is normalised and cut into words the way BERT's basic
// tokenizer does, and each word, prefixed with "▁", is split greedily into
// the longest tokens from its left; a word with a part no token matches
// becomes [UNK] whole. With AddSpecial, BOS ([CLS]) goes first and SEP
// last. Decoding shows "▁" as a space and cleans spaces before
// punctuation, so text comes back lower-cased, with a leading space.
// Where llama.cpp throws (a 4-byte sequence above U+10FFFF), decodeRune's
// U+FFFD per byte is dropped instead.

// wpmConfig is what a WPM tokenizer adds to the others.
type wpmConfig struct {
	lower, stripAccents bool
	// lens are the lengths of the token texts, longest first: the only
	// matches worth trying.
	lens []int
	// cut[0] marks the bytes of the token texts partition always cuts out
	// of a text (user-defined), cut[1] those it may cut with ParseSpecial;
	// every byte, where such a text is not valid UTF-8.
	cut [2][256]bool
}

// buildWPM gathers the token lengths and the bytes special tokens are
// made of, and sets MinTokens' bound (see minTokensWPM).
func (t *Tokenizer) buildWPM() {
	longest := 0
	for _, tok := range t.tokens {
		longest = max(longest, len(tok))
	}
	has := make([]bool, longest+1)
	for _, tok := range t.tokens {
		has[len(tok)] = true
	}
	for n := longest; n > 0; n-- {
		if has[n] {
			t.wpm.lens = append(t.wpm.lens, n)
		}
	}
	if t.unk != NoToken { // otherwise a word can give no id at all
		t.maxTokenBytes = longest
	}
	for _, id := range t.special {
		first := 1
		if t.attrs[id]&attrSpecial == 0 {
			first = 0 // matched without ParseSpecial too
		}
		tok := t.tokens[id]
		for k := first; k < len(t.wpm.cut); k++ {
			set := &t.wpm.cut[k]
			if !utf8.ValidString(tok) {
				// A match could cut a character of the text in two.
				for b := range set {
					set[b] = true
				}
				continue
			}
			for i := 0; i < len(tok); i++ {
				set[tok[i]] = true
			}
		}
	}
}

// wpmAct is what the normaliser does with a code point.
type wpmAct uint8

const (
	wpmDrop  wpmAct = iota // NUL, U+FFFD, \p{C}; \p{M} too when stripping accents
	wpmSpace               // \s: ends the word
	wpmAlone               // \p{P}, an ASCII \p{S} or a CJK ideograph: a word of its own
	wpmJoin                // anything else: goes on the word
)

// normalize maps r as llama.cpp's WPM preprocess does: to the first code
// point of its canonical decomposition (so accents fall away) when
// stripping accents, classifies that, and lower-cases it.
func (c *wpmConfig) normalize(r rune) (rune, wpmAct) {
	if c.stripAccents {
		r = nfdFirst(r)
	}
	cls := classOf(r)
	switch {
	case cls&clsWhitespace != 0:
		return r, wpmSpace
	case r == 0 || r == unicode.ReplacementChar || cls&clsControl != 0:
		return r, wpmDrop
	case c.stripAccents && cls&clsMark != 0:
		return r, wpmDrop
	}
	act := wpmJoin
	if cls&clsPunct != 0 || r < 0x7F && cls&clsSymbol != 0 || isChineseChar(r) {
		act = wpmAlone
	}
	if c.lower {
		r = unicode.ToLower(r) // the same simple mapping as llama.cpp's table (TestWPMTables)
	}
	return r, act
}

// isChineseChar is BERT's _is_chinese_char, with Hugging Face's 0x2B920 (not
// 0x2B820) as llama.cpp has it.
func isChineseChar(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF || r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// nfdRange maps lo..hi to the first code point of their decomposition.
type nfdRange struct{ lo, hi, to rune }

// nfdFirst is llama.cpp's unicode_cpts_normalize_nfd for one code point.
func nfdFirst(r rune) rune {
	if r < nfdRanges[0].lo {
		return r
	}
	lo, hi := 0, len(nfdRanges) // the last range starting at or below r
	for hi-lo > 1 {
		if m := int(uint(lo+hi) >> 1); nfdRanges[m].lo <= r {
			lo = m
		} else {
			hi = m
		}
	}
	if rg := nfdRanges[lo]; r <= rg.hi {
		return rg.to
	}
	return r
}

// appendWPM is appendEncode for WPM: BOS, the fragments' ids, SEP.
func (t *Tokenizer) appendWPM(dst []uint32, frags []fragment, addSpecial bool, limit int) ([]uint32, bool) {
	over := func() bool { return limit >= 0 && len(dst) > limit }
	if addSpecial {
		dst = append(dst, t.bos) // New made sure of BOS and SEP
	}
	var word []byte
	for _, f := range frags {
		if over() {
			return dst, false
		}
		if f.tok != NoToken {
			dst = append(dst, f.tok)
			continue
		}
		var done bool
		if dst, word, done = t.wpmText(f.text, dst, word, limit); !done {
			return dst, false
		}
	}
	if over() {
		return dst, false
	}
	if addSpecial {
		dst = append(dst, t.sep)
	}
	return dst, true
}

// wpmPrefix is the phantom space every word gets.
const wpmPrefix = "▁"

// wpmText appends the ids of the words of s, w being scratch space. It
// stops between words once out holds more than limit ids (when limit is
// not negative), reporting false.
func (t *Tokenizer) wpmText(s string, out []uint32, w []byte, limit int) ([]uint32, []byte, bool) {
	w = append(w[:0], wpmPrefix...)
	flush := func() bool {
		if len(w) == len(wpmPrefix) {
			return true // no word
		}
		if limit >= 0 && len(out) > limit {
			return false
		}
		out = t.wpmWord(w, out)
		w = w[:len(wpmPrefix)]
		return true
	}
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		i += n
		r, act := t.wpm.normalize(r)
		switch act {
		case wpmJoin:
			w = appendRune(w, r)
		case wpmSpace:
			if !flush() {
				return out, w, false
			}
		case wpmAlone:
			if !flush() {
				return out, w, false
			}
			w = appendRune(w, r)
			if !flush() {
				return out, w, false
			}
		}
	}
	return out, w, flush()
}

// wpmWord appends the ids of w ("▁" and a word): at each position the
// longest token that matches there, or UNK alone when some position has
// none (nothing where the vocabulary has no UNK).
func (t *Tokenizer) wpmWord(w []byte, out []uint32) []uint32 {
	start := len(out)
	for i := 0; i < len(w); {
		j := i
		for _, n := range t.wpm.lens {
			if n > len(w)-i {
				continue
			}
			if id, ok := t.ids[string(w[i:i+n])]; ok {
				out = append(out, id)
				j = i + n
				break
			}
		}
		if j == i {
			out = out[:start]
			break
		}
		i = j
	}
	if len(out) == start && t.unk != NoToken {
		out = append(out, t.unk)
	}
	return out
}

// minTokensWPM bounds WPM's encodings from below by counting words:
// with an UNK token each word gives at least one id. A special token cut
// out of the text (one id) may swallow the words its text is made of, so
// only words with a byte no such text has count; such a word keeps a
// part of its own in the text around the special tokens, and that part
// is still a word apart from the others.
func (t *Tokenizer) minTokensWPM(s string, opt EncodeOptions) int {
	need := 0
	if opt.AddSpecial {
		need = 2 // BOS and SEP
	}
	if t.unk == NoToken {
		return need
	}
	cut := &t.wpm.cut[0]
	if opt.ParseSpecial {
		cut = &t.wpm.cut[1]
	}
	inWord, counts := false, false
	for i := 0; i < len(s); {
		start := i
		r, n := decodeRune(s, i)
		i += n
		free := false // a byte of r is in no special token's text
		for _, b := range []byte(s[start:i]) {
			free = free || !cut[b]
		}
		switch _, act := t.wpm.normalize(r); act {
		case wpmJoin:
			inWord = true
			counts = counts || free
		case wpmSpace, wpmAlone:
			if inWord && counts {
				need++
			}
			inWord, counts = false, false
			if act == wpmAlone && free {
				need++
			}
		}
	}
	if inWord && counts {
		need++
	}
	return need
}
