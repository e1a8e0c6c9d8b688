package node

import (
	"strings"
	"testing"
	"time"
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

// TestTimeLimits: the prompt's limit runs from the serve's start to the
// first token, which is refused past it; the prediction's from the first
// token, and once past it the answer ends after the next token holding a
// newline (that token served, the one after refused).
func TestTimeLimits(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type tok struct {
		ms   int
		text string
	}
	for _, tc := range []struct {
		name            string
		prompt, predict time.Duration
		tokens          []tok
		served          int
	}{
		{"no limits", 0, 0, []tok{{9000, "a"}, {9001, "\n"}, {99999, "b"}}, 3},
		{"prompt within", time.Second, 0, []tok{{1000, "a"}, {5000, "b"}}, 2},
		{"prompt past", time.Second, 0, []tok{{1001, "a"}}, 0},
		{"newline before the limit", 0, time.Second, []tok{{10, "a\n"}, {500, "b"}, {1500, "c"}, {1600, "d"}}, 4},
		{"newline after it ends the answer", 0, time.Second, []tok{{10, "a"}, {1500, "b"}, {1600, "\n"}, {1700, "c"}}, 3},
		{"a newline inside a token counts", 0, time.Second, []tok{{10, "a"}, {1011, "x\ny"}, {1020, "c"}}, 2},
		{"measured from the first token", 2 * time.Second, time.Second, []tok{{1500, "a"}, {2400, "\n"}, {2600, "\n"}, {2700, "b"}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &timeLimits{prompt: tc.prompt, predict: tc.predict, start: t0}
			served := 0
			for _, k := range tc.tokens {
				if !l.admit(at(k.ms)) {
					break
				}
				l.saw(at(k.ms), k.text)
				served++
			}
			if served != tc.served {
				t.Fatalf("served %d tokens, want %d", served, tc.served)
			}
		})
	}
}
