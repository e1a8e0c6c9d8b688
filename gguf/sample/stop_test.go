package sample

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// pieces is a toy vocabulary: token i's text is pieces[i].
var pieces = []string{"Hello", " wor", "ld", "\n", "\n\n", "END", "E", "ND", "x", "é"[:1], "é"[1:],
	"    ", "  ", "\t", "}", "\n    y", "\n}", " "} // 11…: indentation

func piece(id uint32) ([]byte, error) {
	if int(id) >= len(pieces) {
		return nil, errors.New("no such token")
	}
	return []byte(pieces[id]), nil
}

func TestStopper(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stops   []string
		tokens  []uint32
		want    []uint32 // released, in order
		stop    bool
		matched string
		indent  int // MinIndent
	}{
		{"no stops", nil, []uint32{0, 1, 2}, []uint32{0, 1, 2}, false, "", 0},
		{"not found", []string{"END"}, []uint32{0, 1, 2, 3}, []uint32{0, 1, 2, 3}, false, "", 0},
		{"whole token", []string{"END"}, []uint32{0, 5, 1}, []uint32{0}, true, "END", 0},
		{"across tokens", []string{"END"}, []uint32{0, 6, 7, 2}, []uint32{0}, true, "END", 0},
		{"a false start is released", []string{"END"}, []uint32{0, 6, 8, 2}, []uint32{0, 6, 8, 2}, false, "", 0},
		{"inside a token drops it", []string{"wo"}, []uint32{0, 1, 2}, []uint32{0}, true, "wo", 0},
		{"first of several", []string{"ld", "\n"}, []uint32{0, 3, 1, 2}, []uint32{0}, true, "\n", 0},
		{"newline pair", []string{"\n\n"}, []uint32{0, 3, 8, 3, 3}, []uint32{0, 3, 8}, true, "\n\n", 0},
		{"bytes of one character", []string{"é"}, []uint32{0, 9, 10}, []uint32{0}, true, "é", 0},
		{"empty stop ignored", []string{""}, []uint32{0, 1}, []uint32{0, 1}, false, "", 0},
		{"the earliest, not the first listed", []string{"ND", "EN"}, []uint32{0, 5}, []uint32{0}, true, "EN", 0},
		// n_indent: the first line is never held to it (a completion
		// begins mid-line); a later line whose text starts with too few
		// spaces or tabs ends the generation at the token showing that
		// text, dropped with its newline, as a stop string's token is.
		{"indent: first line is free", nil, []uint32{14, 8, 3, 11, 8}, []uint32{14, 8, 3, 11, 8}, false, "", 4},
		{"indent: deep enough", nil, []uint32{8, 15, 3, 11, 2}, []uint32{8, 15, 3, 11, 2}, false, "", 4},
		{"indent: a closing brace ends it", nil, []uint32{8, 3, 11, 8, 3, 14, 8}, []uint32{8, 3, 11, 8, 3}, true, "", 4},
		{"indent: newline and text in one token", nil, []uint32{8, 16, 8}, []uint32{8}, true, "", 4},
		{"indent: spaces count across tokens", nil, []uint32{8, 3, 12, 17, 17, 8}, []uint32{8, 3, 12, 17, 17, 8}, false, "", 4},
		{"indent: too few spaces", nil, []uint32{8, 3, 12, 17, 8}, []uint32{8, 3, 12, 17}, true, "", 4},
		{"indent: a tab counts as one", nil, []uint32{8, 3, 13, 8}, []uint32{8, 3, 13}, true, "", 2},
		{"indent: blank lines wait for text", nil, []uint32{8, 4, 4, 11, 8}, []uint32{8, 4, 4, 11, 8}, false, "", 4},
		{"indent: a stop string earlier wins", []string{"x"}, []uint32{14, 3, 8}, []uint32{14, 3}, true, "x", 4},
		{"indent: before a held stop", []string{"}}"}, []uint32{8, 3, 14, 14}, []uint32{8, 3}, true, "", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStopper(tc.stops, piece)
			s.MinIndent(tc.indent)
			var got []uint32
			stopped := false
			for _, id := range tc.tokens {
				ready, stop, err := s.Push(id)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ready...)
				if stop {
					stopped = true
					break
				}
			}
			if !stopped {
				got = append(got, s.Flush()...)
			}
			if stopped != tc.stop || !slices.Equal(got, tc.want) || s.Matched() != tc.matched {
				t.Fatalf("released %v (stop %v, matched %q), want %v (stop %v, matched %q)", got, stopped, s.Matched(), tc.want, tc.stop, tc.matched)
			}
			if s.Indented() != (tc.stop && tc.matched == "") {
				t.Fatalf("Indented %v with matched %q", s.Indented(), s.Matched())
			}
		})
	}
}

// TestStopperHoldsBack checks that a token is held exactly while its text
// could still begin a stop string, and released once it cannot.
func TestStopperHoldsBack(t *testing.T) {
	s := NewStopper([]string{"END"}, piece)
	ready, _, _ := s.Push(0) // "Hello": no suffix starts "END"
	if !slices.Equal(ready, []uint32{0}) {
		t.Fatalf("Hello: released %v", ready)
	}
	if ready, _, _ = s.Push(6); len(ready) != 0 { // "E" may begin "END"
		t.Fatalf("E: released %v", ready)
	}
	if ready, _, _ = s.Push(8); !slices.Equal(ready, []uint32{6, 8}) { // "Ex" cannot
		t.Fatalf("Ex: released %v", ready)
	}
}

// TestStopperNeverShowsStop pushes random token sequences and checks the
// released text never contains a stop string, and that without a stop it
// is all the text.
func TestStopperNeverShowsStop(t *testing.T) {
	stops := []string{"END", "ld\n", "\n\n"}
	seq := []uint32{0}
	for n := range 20000 {
		seq = seq[:0]
		for k := n; len(seq) < 8; k /= 7 {
			seq = append(seq, uint32((k+len(seq)*3)%9))
		}
		s := NewStopper(stops, piece)
		var out strings.Builder
		stopped := false
		for _, id := range seq {
			ready, stop, _ := s.Push(id)
			for _, r := range ready {
				out.WriteString(pieces[r])
			}
			if stop {
				stopped = true
				break
			}
		}
		if !stopped {
			for _, r := range s.Flush() {
				out.WriteString(pieces[r])
			}
		}
		var full strings.Builder
		for _, id := range seq {
			full.WriteString(pieces[id])
		}
		for _, st := range stops {
			if strings.Contains(out.String(), st) {
				t.Fatalf("%v: released %q, which holds %q", seq, out.String(), st)
			}
		}
		if !stopped && out.String() != full.String() {
			t.Fatalf("%v: released %q of %q without a stop", seq, out.String(), full.String())
		}
		if stopped && !strings.HasPrefix(full.String(), out.String()) {
			t.Fatalf("%v: released %q, not a prefix of %q", seq, out.String(), full.String())
		}
	}
}

func TestStopperPieceError(t *testing.T) {
	s := NewStopper([]string{"x"}, piece)
	if _, _, err := s.Push(99); err == nil {
		t.Fatal("no error for a token without text")
	}
}
