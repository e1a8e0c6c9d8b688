package grammar

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestRegexMatchesGo: a raw pattern's grammar accepts exactly the texts
// Go's regexp matches whole, over every text of up to four characters
// from a small alphabet (a quote, a newline and a character beyond
// ASCII among them) and random longer ones.
func TestRegexMatchesGo(t *testing.T) {
	patterns := []string{
		`a`, `ab|b`, `a*b+`, `(ab){2,3}`, `[a-c]?"`, `[^a]*`, `.`, `(?s).`, `(?i)Ab`, `\d\w?`, `\s`,
		`^a.b$`, `a{0,2}é`, `[^"\n]+`, `(a|)b`, `x?`, `"(\\.|[^"\\])*"`,
		`[à-ÿ]+`, `[^é]`, `[一-龥]a?`, `[α-ωа-я]*`, `[\x{80}-\x{10FFFF}]`, `[é-\x{1F600}]`, `(?i)É`,
	}
	alphabet := []string{"a", "b", "A", "1", "\"", "\n", "é", "\\", "x", " ", "日", "ω", "я", "😀", "\u00ff"}
	var texts []string
	var grow func(s string, n int)
	grow = func(s string, n int) {
		texts = append(texts, s)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(s+c, n-1)
		}
	}
	grow("", 4)
	rng := rand.New(rand.NewPCG(5, 5))
	for range 300 {
		var b strings.Builder
		for range 5 + rng.IntN(10) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, p := range patterns {
		b := NewBuilder()
		e, err := b.Regex(p, false)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		b.Define("root", e)
		g, err := b.Build("root")
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		re := regexp.MustCompile(`^(?:` + strings.TrimSuffix(strings.TrimPrefix(p, "^"), "$") + `)$`)
		for _, s := range texts {
			if got, want := accepts(t, g, s), re.MatchString(s); got != want {
				t.Fatalf("%q on %q: grammar %v, regexp %v", p, s, got, want)
			}
		}
	}
}

// TestRegexRefused: what parses but does not compile is a RegexError
// naming the pattern; what does not parse is ErrInvalid.
func TestRegexRefused(t *testing.T) {
	for _, p := range []string{`\bx`, `a^b`, `a$b`} {
		_, err := NewBuilder().Regex(p, false)
		var re *RegexError
		if !errors.As(err, &re) || re.Pattern != p {
			t.Errorf("%q: %v, want a RegexError naming it", p, err)
		}
	}
	for _, p := range []string{`(a`, `a{2,1}`, `(?<=a)b`} {
		if _, err := NewBuilder().Regex(p, false); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", p, err)
		}
	}
}

// FuzzRegex: over arbitrary patterns and texts, a pattern that compiles
// accepts a text exactly where Go's regexp matches it whole; one that
// does not is refused with a RegexError or ErrInvalid.
func FuzzRegex(f *testing.F) {
	for _, p := range []string{`a`, `(ab)*c`, `[^a]x?`, `(?i)xY`, `\d{2,3}`, `"(\\.|[^"\\])*"`, `^a|b$`} {
		f.Add(p, "ab")
	}
	f.Fuzz(func(t *testing.T, p, s string) {
		if len(p) > 64 || len(s) > 64 || !utf8.ValidString(s) {
			return
		}
		b := NewBuilder()
		e, err := b.Regex(p, false)
		if err != nil {
			var re *RegexError
			if !errors.As(err, &re) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: untyped error %v", p, err)
			}
			return
		}
		b.Define("root", e)
		g, err := b.Build("root")
		if err != nil {
			return // a grammar too large to build
		}
		m, err := g.NewMatcher()
		if err != nil {
			t.Fatal(err)
		}
		got := true
		if err := m.Advance([]byte(s)); err != nil {
			if errors.Is(err, ErrAmbiguous) {
				return
			}
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("%q on %q: %v", p, s, err)
			}
			got = false
		}
		got = got && m.Accepting()
		// Go's own full match: the parsed pattern between the text's ends
		// (wrapping its source would change one like \Q…).
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		full := &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{{Op: syntax.OpBeginText}, re, {Op: syntax.OpEndText}}}
		if want := regexp.MustCompile(full.String()).MatchString(s); got != want {
			t.Fatalf("%q on %q: grammar %v, regexp %v", p, s, got, want)
		}
	})
}

// TestDateFormatExact: the date format's grammar takes exactly the dates
// the time package parses, every day of years around the century and
// leap-year edges.
func TestDateFormatExact(t *testing.T) {
	g, err := FromSchema([]byte(`{"type":"string","format":"date"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, years := range [][2]int{{0, 8}, {1896, 1904}, {1996, 2004}, {2096, 2104}, {2396, 2404}, {9996, 9999}} {
		for y := years[0]; y <= years[1]; y++ {
			for m := 0; m <= 13; m++ {
				for d := 0; d <= 32; d++ {
					s := fmt.Sprintf("%04d-%02d-%02d", y, m, d)
					_, perr := time.Parse("2006-01-02", s)
					if got := accepts(t, g, `"`+s+`"`); got != (perr == nil) {
						t.Fatalf("%s: grammar %v, time.Parse %v", s, got, perr)
					}
				}
			}
		}
	}
}

// TestUTF8Range: a range of characters beyond ASCII compiles to byte
// sequences that take exactly its characters' UTF-8: every character
// within 300 of its ends and at the encoding's length changes, and
// random ones.
func TestUTF8Range(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	ranges := [][2]rune{{0x80, 0x10FFFF}, {0xE0, 0xFF}, {0x4E00, 0x9FA5}, {0x7F0, 0x810}, {0xFFF0, 0x10010}, {0xD700, 0xE100}, {0x1F600, 0x1F64F}, {0xE9, 0xE9}, {0x3B1, 0x3C9}}
	for range 30 {
		a, b := 0x80+rng.Int32N(0x10FF80), 0x80+rng.Int32N(0x10FF80)
		ranges = append(ranges, [2]rune{min(a, b), max(a, b)})
	}
	for _, r := range ranges {
		alts := utf8Range(r[0], r[1])
		g := build(t, Alt(alts...))
		check := func(c rune) {
			if c < 0x80 || c > utf8.MaxRune || c >= 0xD800 && c <= 0xDFFF {
				return
			}
			if got, want := accepts(t, g, string(c)), c >= r[0] && c <= r[1]; got != want {
				t.Fatalf("[%#x, %#x]: %#x taken %v", r[0], r[1], c, got)
			}
		}
		for _, edge := range []rune{r[0], r[1], 0x7FF, 0x800, 0xFFFF, 0x10000, 0xD7FF, 0xE000} {
			for c := edge - 300; c <= edge+300; c++ {
				check(c)
			}
		}
		for range 2000 {
			check(0x80 + rng.Int32N(0x10FF80))
		}
	}
}
