package tokenizer

import (
	"testing"
	"unicode/utf8"
)

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		r    rune
		want uint16
	}{
		{'a', clsLetter}, {'Z', clsLetter}, {'7', clsNumber}, {'½', clsNumber},
		{' ', clsSeparator | clsWhitespace}, {'\n', clsControl | clsWhitespace},
		{0x85, clsControl | clsWhitespace}, {0xA0, clsSeparator | clsWhitespace}, {0x3000, clsSeparator | clsWhitespace},
		{'.', clsPunct}, {'$', clsSymbol}, {'🦙', clsSymbol}, {0x0301, clsMark}, {0x200D, clsControl},
		{0xE000, clsControl}, {0xD800, clsControl}, {0x0378, clsUndefined}, {0x10FFFF, clsUndefined},
		{0x2FFC, clsSymbol}, {0x31EF, clsSymbol}, {0x2EBF0, clsLetter}, // Unicode 15.1, as llama.cpp's tables
		{-1, clsUndefined}, {0x110000, clsUndefined},
	} {
		if got := classOf(tc.r); got != tc.want {
			t.Errorf("classOf(%U) = %#x, want %#x", tc.r, got, tc.want)
		}
	}
}

// TestDecodeRune pins llama.cpp's lenient UTF-8 decoding: overlong forms
// and surrogates decode to their value, bad sequences give U+FFFD for one
// byte.
func TestDecodeRune(t *testing.T) {
	for _, tc := range []struct {
		in   string
		r    rune
		size int
	}{
		{"a", 'a', 1}, {"é", 'é', 2}, {"€", '€', 3}, {"🦙", '🦙', 4},
		{"\xc0\x80", 0, 2}, {"\xed\xa0\x80", 0xD800, 3},
		{"\x80", utf8.RuneError, 1}, {"\xff", utf8.RuneError, 1}, {"\xc3(", utf8.RuneError, 1},
		{"\xe2\x82", utf8.RuneError, 1}, {"\xf4\x90\x80\x80", utf8.RuneError, 1},
	} {
		r, n := decodeRune(tc.in, 0)
		if r != tc.r || n != tc.size {
			t.Errorf("decodeRune(%q) = %U, %d; want %U, %d", tc.in, r, n, tc.r, tc.size)
		}
		if r != utf8.RuneError {
			want := tc.in
			if r == 0 {
				want = "\x00" // an overlong form re-encodes canonically
			}
			if got := string(appendRune(nil, r)); got != want {
				t.Errorf("appendRune(%U) = %q, want %q", r, got, want)
			}
		}
	}
}
