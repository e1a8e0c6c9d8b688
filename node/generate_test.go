package node

import (
	"strings"
	"testing"
)

func TestStopFilter(t *testing.T) {
	tests := []struct {
		name   string
		stops  []string
		pieces []string
		want   string
		hit    bool
	}{
		{"no stops", nil, []string{"a", "b"}, "ab", false},
		{"stop inside a piece", []string{"END"}, []string{"one END two"}, "one ", true},
		{"stop across pieces", []string{"END"}, []string{"one E", "N", "D two"}, "one ", true},
		{"false start released", []string{"END"}, []string{"one E", "x"}, "one Ex", false},
		{"tail held until flush", []string{"END"}, []string{"one EN"}, "one EN", false},
		{"earliest of several", []string{"zz", "\n"}, []string{"a\nb zz"}, "a", true},
		{"text after the stop dropped", []string{"."}, []string{"hi.", " more"}, "hi", true},
	}
	for _, tt := range tests {
		f := &stopFilter{stops: tt.stops}
		var b strings.Builder
		for _, p := range tt.pieces {
			b.WriteString(f.push(p))
		}
		b.WriteString(f.flush())
		if b.String() != tt.want || f.hit != tt.hit {
			t.Errorf("%s: got %q (hit %v), want %q (hit %v)", tt.name, b.String(), f.hit, tt.want, tt.hit)
		}
	}
}

func TestStopFilterNeverShowsPartialStop(t *testing.T) {
	f := &stopFilter{stops: []string{"<|end|>"}}
	for _, p := range []string{"Hello", " <", "|e", "nd", "|>", "after"} {
		if out := f.push(p); strings.Contains(out, "<") {
			t.Fatalf("showed %q, part of a stop string", out)
		}
	}
	if !f.hit {
		t.Fatal("stop not detected")
	}
}
