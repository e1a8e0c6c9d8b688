package tokenizer

import (
	"sync"
	"unicode"
)

// Code point classes, one bit each, as llama.cpp's unicode tables define
// them: the general category collapsed to its major class, plus White_Space.
// A position outside the current chunk has no bits at all, which is how the
// scanners tell "end of text" from "unassigned code point".
const (
	clsUndefined  uint16 = 1 << iota // Cn, and anything above U+10FFFF
	clsNumber                        // \p{N}
	clsLetter                        // \p{L}
	clsSeparator                     // \p{Z}
	clsMark                          // \p{M}
	clsPunct                         // \p{P}
	clsSymbol                        // \p{S}
	clsControl                       // \p{C} except Cn
	clsWhitespace                    // \s (Unicode White_Space)
)

const maxCodePoint = 0x10FFFF

// The class table is two-staged: code points are grouped in blocks of
// 1<<classBlockBits, identical blocks are stored once, and a per-block index
// points at them. About 70 KB instead of 2 MB for a flat table.
const classBlockBits = 7

var classTable struct {
	once   sync.Once
	index  []uint16
	blocks []uint16
}

func buildClassTable() {
	flat := make([]uint16, maxCodePoint+1)
	for i := range flat {
		flat[i] = clsUndefined
	}
	fill := func(t *unicode.RangeTable, cls uint16) {
		for _, r := range t.R16 {
			for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
				flat[c] = cls
			}
		}
		for _, r := range t.R32 {
			for c := r.Lo; c <= r.Hi; c += r.Stride {
				flat[c] = cls
			}
		}
	}
	fill(unicode.Cc, clsControl)
	fill(unicode.Cf, clsControl)
	fill(unicode.Co, clsControl)
	fill(unicode.Cs, clsControl)
	fill(unicode.L, clsLetter)
	fill(unicode.M, clsMark)
	fill(unicode.N, clsNumber)
	fill(unicode.P, clsPunct)
	fill(unicode.S, clsSymbol)
	fill(unicode.Z, clsSeparator)
	// Go's tables are Unicode 15.0; llama.cpp's are 15.1, which added
	// these 627 code points.
	for c := 0x2FFC; c <= 0x2FFF; c++ {
		flat[c] = clsSymbol // ideographic description characters
	}
	flat[0x31EF] = clsSymbol // CJK stroke HXG
	for c := 0x2EBF0; c <= 0x2EE5D; c++ {
		flat[c] = clsLetter // CJK Unified Ideographs Extension I
	}
	// White_Space lies wholly in the BMP (R16), on top of its category.
	for _, r := range unicode.White_Space.R16 {
		for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
			flat[c] |= clsWhitespace
		}
	}

	const size = 1 << classBlockBits
	n := (maxCodePoint + 1) >> classBlockBits
	index := make([]uint16, n)
	seen := map[string]uint16{}
	var blocks []uint16
	for b := range n {
		blk := flat[b*size : (b+1)*size]
		key := string(u16bytes(blk))
		id, ok := seen[key]
		if !ok {
			id = uint16(len(blocks) / size)
			seen[key] = id
			blocks = append(blocks, blk...)
		}
		index[b] = id
	}
	classTable.index, classTable.blocks = index, blocks
}

func u16bytes(s []uint16) []byte {
	b := make([]byte, 2*len(s))
	for i, v := range s {
		b[2*i], b[2*i+1] = byte(v), byte(v>>8)
	}
	return b
}

// classOf returns the class bits of code point c.
func classOf(c rune) uint16 {
	if c < 0 || c > maxCodePoint {
		return clsUndefined
	}
	classTable.once.Do(buildClassTable)
	blk := classTable.index[c>>classBlockBits]
	return classTable.blocks[int(blk)<<classBlockBits|int(c)&(1<<classBlockBits-1)]
}

// decodeRune decodes one code point the way llama.cpp does: a lead byte
// fixes the length, continuation bytes must be 10xxxxxx, and nothing else is
// checked (overlong forms and surrogates decode to their value). Anything it
// cannot decode yields U+FFFD and consumes one byte. Values above U+10FFFF,
// which llama.cpp would throw on when re-encoding, also yield U+FFFD.
func decodeRune(s string, i int) (rune, int) {
	c := s[i]
	cont := func(k int) bool { return i+k < len(s) && s[i+k]&0xC0 == 0x80 }
	switch {
	case c < 0x80:
		return rune(c), 1
	case c&0x40 == 0:
		return unicode.ReplacementChar, 1
	case c&0x20 == 0:
		if !cont(1) {
			return unicode.ReplacementChar, 1
		}
		return rune(c&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case c&0x10 == 0:
		if !cont(1) || !cont(2) {
			return unicode.ReplacementChar, 1
		}
		return rune(c&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	case c&0x08 == 0:
		if !cont(1) || !cont(2) || !cont(3) {
			return unicode.ReplacementChar, 1
		}
		r := rune(c&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F)
		if r > maxCodePoint {
			return unicode.ReplacementChar, 1
		}
		return r, 4
	default:
		return unicode.ReplacementChar, 1
	}
}

// appendRune encodes r without the validity checks of unicode/utf8, so a
// surrogate decoded by decodeRune round-trips to the same bytes.
func appendRune(b []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(b, byte(r))
	case r < 0x800:
		return append(b, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	default:
		return append(b, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
}

// utf8Len is the sequence length a lead byte announces (1 for a stray
// continuation byte), as the merge tokenizers use to cut initial symbols.
func utf8Len(c byte) int {
	switch c >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	default:
		return 1
	}
}

// GPT-2's byte-level alphabet: every byte maps to a printable code point,
// the printable Latin-1 bytes to themselves and the rest to U+0100 onwards.
var byteAlphabet = sync.OnceValues(func() (enc [256]rune, dec map[rune]byte) {
	dec = make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			enc[b] = rune(b)
		} else {
			enc[b] = 256 + n
			n++
		}
		dec[enc[b]] = byte(b)
	}
	return enc, dec
})
