package grammar

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// gbnfFile reads a grammar of llama.cpp's grammars/ (testdata).
func gbnfFile(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGBNFLanguages: GBNF grammars, llama.cpp's own among them, match
// exactly the texts they describe.
func TestGBNFLanguages(t *testing.T) {
	for _, tc := range []struct {
		name, src      string
		accept, reject []string
	}{
		{"alternatives", `root ::= "yes" | "no"`, []string{"yes", "no"}, []string{"", "yesno", "maybe"}},
		{"json.gbnf", gbnfFile(t, "json.gbnf"),
			[]string{`{}`, `{"a": [1, -2.5e3, true, null, "x\n\u00e9"], "b": {"c": "é"}}`, "{\n  \"k\": \"v\"\n}"},
			[]string{`[]`, `{"a"}`, `{"a": 01x}`, "{\"a\": \"\x01\"}", `{"a": "\q"}`}},
		{"arithmetic.gbnf", gbnfFile(t, "arithmetic.gbnf"),
			[]string{"a+1=b\n", "(x *2) /y = z\n1=2\n"},
			[]string{"a+=b\n", "A=1\n", "a=b"}},
		{"unicode", `root ::= [α-ω]+ "é" .`, []string{"αβé€", "ωé\n", "αé😀"}, []string{"aé€", "αé", "αéxx"}},
		{"negated", `root ::= [^a-z"]`, []string{"A", "é", "€", "😀", "\n"}, []string{"a", "z", `"`, "", "AB"}},
		{"any", `root ::= . .`, []string{"ab", "éñ", "\x00\x7f"}, []string{"a", "\xc0\x80b", "\xed\xa0\x80a"}},
		{"counts", `root ::= "a"{2,3} "b"{,1} "c"{2,} "d"{1}`,
			[]string{"aaccd", "aaabcccd"}, []string{"accd", "aaaaccd", "aabbccd", "aacd", "aacc"}},
		{"escapes", `root ::= "\x41\u00e9\U0001F600\n\t\"\\" [\]\[]`, []string{"Aé😀\n\t\"\\]", "Aé😀\n\t\"\\["}, []string{"Aé😀"}},
		{"comments and groups", "# a comment\n\nroot ::= (\n  \"a\" | # first\n  \"b\"\n)+ tail # trailing\ntail ::= \"!\"?\n",
			[]string{"a", "ab!", "bba"}, []string{"", "c", "a!!"}},
		{"recursion", `root ::= "(" root ")" | ""`, []string{"", "()", "((()))"}, []string{"(", "())"}},
	} {
		g, err := ParseGBNF(tc.src)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for _, s := range tc.accept {
			if !accepts(t, g, s) {
				t.Errorf("%s refuses %q", tc.name, s)
			}
		}
		for _, s := range tc.reject {
			if accepts(t, g, s) {
				t.Errorf("%s takes %q", tc.name, s)
			}
		}
	}
}

// TestGBNFErrors: a bad grammar is an error that says where and why
// (a *GBNFError, wrapping ErrInvalid), or names the rule (ErrInvalid),
// or the limit (ErrTooLarge).
func TestGBNFErrors(t *testing.T) {
	for _, tc := range []struct {
		src       string
		line, col int    // of a *GBNFError; 0: another error
		want      string // in the message
		is        error
	}{
		{`root ::= "a`, 1, 10, "not closed", ErrInvalid},
		{"root ::= [a-z\n", 1, 10, "not closed", ErrInvalid},
		{"root ::= (\"a\"\n", 1, 10, "not closed", ErrInvalid},
		{`root ::= "\q"`, 1, 11, `unknown escape \q`, ErrInvalid},
		{`root ::= "\u12"`, 1, 11, "hex digits", ErrInvalid},
		{`root ::= "\uD800"`, 1, 11, "not a Unicode character", ErrInvalid},
		{`root ::= [z-a]`, 1, 10, "backwards", ErrInvalid},
		{`root ::= "a"{3,1}`, 1, 13, "below its least", ErrInvalid},
		{`root ::= "a"{x}`, 1, 13, "expected a count", ErrInvalid},
		{`root ::= <[12]>`, 1, 10, "token references", ErrInvalid},
		{`root ::= !<think>`, 1, 10, "token references", ErrInvalid},
		{"root ::= \"a\"\nroot ::= \"b\"", 2, 1, "defined twice", ErrInvalid},
		{"root = \"a\"", 1, 6, "expected ::=", ErrInvalid},
		{"root ::= \"a\" )", 1, 14, "unexpected", ErrInvalid},
		{"::= \"a\"", 1, 1, "expected a rule name", ErrInvalid},
		{"root ::= " + strings.Repeat("(", 65) + `"a"` + strings.Repeat(")", 65), 1, 74, "nested", ErrInvalid},
		{"root ::= \"\xff\"", 1, 1, "UTF-8", ErrInvalid},
		{`root ::= other`, 0, 0, `undefined rule "other"`, ErrInvalid},
		{`start ::= "a"`, 0, 0, `no rule "root"`, ErrInvalid},
		{`root ::= root "a" | "b"`, 0, 0, "left", ErrInvalid},
		{`root ::= "a"{1000000}`, 0, 0, "", ErrTooLarge},
		{"root ::= \"" + strings.Repeat("a", MaxGBNF) + "\"", 0, 0, "", ErrTooLarge},
	} {
		_, err := ParseGBNF(tc.src)
		var ge *GBNFError
		switch {
		case err == nil:
			t.Errorf("%.40q: no error", tc.src)
		case !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%.40q: %v, want %v saying %q", tc.src, err, tc.is, tc.want)
		case tc.line > 0 && (!errors.As(err, &ge) || ge.Line != tc.line || ge.Col != tc.col):
			t.Errorf("%.40q: %v, want line %d column %d", tc.src, err, tc.line, tc.col)
		}
	}
}

// TestRuneClassBytes: a character class matches a character's UTF-8
// bytes exactly when the character is in it, at every boundary of the
// encoding's lengths and around each range's ends; never a surrogate's
// encoding or an overlong one.
func TestRuneClassBytes(t *testing.T) {
	classes := [][][2]rune{
		{{'a', 'z'}},
		{{0x70, 0x90}},
		{{0x7FE, 0x801}},
		{{0xD000, 0xE100}},
		{{0xFFF0, 0x10010}},
		{{0x80, 0x10FFFF}},
		{{0x3B1, 0x3C9}, {0x4E00, 0x9FFF}, {0x1F600, 0x1F64F}},
		{{0x1000, 0x1000}},
	}
	probes := []rune{0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF}
	for r := rune(0); r <= utf8.MaxRune; r += 997 {
		probes = append(probes, r)
	}
	for _, ranges := range classes {
		for _, negate := range []bool{false, true} {
			e, ok := runeClass(ranges, negate)
			if !ok {
				t.Fatalf("%x: no class", ranges)
			}
			b := NewBuilder()
			b.Define("root", e)
			g, err := b.Build("root")
			if err != nil {
				t.Fatal(err)
			}
			ps := probes
			for _, r := range ranges {
				ps = append(ps, r[0]-1, r[0], r[0]+1, r[1]-1, r[1], r[1]+1)
			}
			for _, r := range ps {
				if r < 0 || r > utf8.MaxRune || r >= 0xD800 && r <= 0xDFFF {
					continue
				}
				in := false
				for _, x := range ranges {
					in = in || r >= x[0] && r <= x[1]
				}
				if accepts(t, g, string(r)) != (in != negate) {
					t.Fatalf("class %x negated %v: U+%04X taken %v", ranges, negate, r, !(in != negate))
				}
			}
			for _, bad := range []string{"\xed\xa0\x80", "\xed\xbf\xbf", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\xf4\x90\x80\x80"} {
				if accepts(t, g, bad) {
					t.Fatalf("class %x negated %v takes % x", ranges, negate, bad)
				}
			}
		}
	}
}

// FuzzParseGBNF: no text makes the GBNF reader panic or fail otherwise
// than with its errors; a grammar it reads reads the same again.
// Seeded from llama.cpp's grammars and the ones the tests write.
func FuzzParseGBNF(f *testing.F) {
	f.Add(gbnfFile(f, "json.gbnf"))
	f.Add(gbnfFile(f, "arithmetic.gbnf"))
	for _, s := range []string{
		`root ::= "yes" | "no"`, `root ::= [α-ω]+ "é" .`, `root ::= [^a-z"]`,
		`root ::= "a"{2,3} "b"{,1} "c"{2,}`, `root ::= "\x41\u00e9\U0001F600\n\t\"\\"`,
		"root ::= (\n \"a\" | # c\n \"b\")+ t\nt ::= \"!\"?", `root ::= "(" root ")" | ""`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := ParseGBNF(src)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%q: %v is none of the GBNF errors", src, err)
			}
			return
		}
		again, err := ParseGBNF(src)
		if err != nil || again.String() != g.String() {
			t.Fatalf("%q reads otherwise the second time: %v", src, err)
		}
	})
}
