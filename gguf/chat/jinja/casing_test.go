package jinja

import (
	"bufio"
	"compress/gzip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestCasing: every character Python cases (testdata/casing.txt.gz, made
// by gen-casing.py from Python's unicodedata) upper, lower and title
// cases as Python's str methods do, and reads as upper, lower, title
// case and case-ignorable as Python reads it; and no other character
// does any of these, but those Unicode assigned after the golden's
// version.
func TestCasing(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "casing.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(field string, self rune) string {
		if field == "-" {
			return string(self)
		}
		var b strings.Builder
		for _, h := range strings.Fields(field) {
			n, err := strconv.ParseUint(h, 16, 32)
			if err != nil {
				t.Fatalf("%q: %v", field, err)
			}
			b.WriteRune(rune(n))
		}
		return b.String()
	}
	listed := map[rune]bool{}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ";")
		if len(f) != 5 {
			t.Fatalf("line %q", line)
		}
		n, err := strconv.ParseUint(f[0], 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		r := rune(n)
		listed[r] = true
		if newerThanGolden(r) {
			continue
		}
		up, lo, ti := decode(f[1], r), decode(f[2], r), decode(f[3], r)
		if got := pyUpper(string(r)); got != up {
			t.Errorf("%U upper %q, Python %q", r, got, up)
		}
		if got := pyLower(string(r)); got != lo {
			t.Errorf("%U lower %q, Python %q", r, got, lo)
		}
		if got := titleRune(r); got != ti {
			t.Errorf("%U title %q, Python %q", r, got, ti)
		}
		flags := f[4]
		for _, c := range []struct {
			flag string
			got  bool
		}{{"U", isUpperPy(r)}, {"L", isLowerPy(r)}, {"T", unicode.IsTitle(r)}, {"I", caseIgnorable(r) && !isCased(r)}} {
			if want := strings.Contains(flags, c.flag); c.got != want {
				t.Errorf("%U flag %s: %v, Python %v", r, c.flag, c.got, want)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(listed) < 5000 {
		t.Fatalf("%d characters listed", len(listed))
	}
	// The rest: uncased and unchanged.
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if listed[r] || r >= 0xD800 && r <= 0xDFFF || newerThanGolden(r) {
			continue
		}
		if s := string(r); pyUpper(s) != s || pyLower(s) != s || titleRune(r) != s || isCased(r) || caseIgnorable(r) {
			t.Errorf("%U: cased or case-ignorable here, not in Python", r)
		}
	}
}

// newerThanGolden are the characters whose case properties Go's tables
// (Unicode 15.0) give and the golden's Python (Unicode 14.0) did not:
// the cased and case-ignorable characters 15.0 added, and five modifier
// letters it made Other_Lowercase. A golden made by a Python of Go's
// Unicode version lists them, and this list goes.
func newerThanGolden(r rune) bool {
	if unicode.Version != "15.0.0" {
		return false // then the test says what else differs
	}
	switch r {
	case 0x10FC, 0xA7F2, 0xA7F3, 0xA7F4, 0xAB69:
		return true
	}
	for _, span := range [][2]rune{
		{0xECE, 0xECE}, {0x10EFD, 0x10EFF}, {0x11241, 0x11241}, {0x11F00, 0x11F01}, {0x11F36, 0x11F3A},
		{0x11F40, 0x11F40}, {0x11F42, 0x11F42}, {0x13439, 0x13440}, {0x13447, 0x13455}, {0x1DF25, 0x1DF2A},
		{0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E4EB, 0x1E4EF},
	} {
		if r >= span[0] && r <= span[1] {
			return true
		}
	}
	return false
}
