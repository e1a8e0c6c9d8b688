package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestDRY: the penalties of llama.cpp's own DRY tests (its
// test-sampling.cpp: probabilities, the tokens accepted, the expected
// probabilities after DRY), within float32's rounding; the tokens may
// come as context (the prompt) and history alike.
func TestDRY(t *testing.T) {
	for _, tc := range []struct {
		probs    []float64
		tokens   []uint32
		want     []float64
		mult     float64
		base     float64
		allowed  int
		lastN    int
		breakers [][]uint32
	}{
		{[]float64{0.25, 0.25, 0.25, 0.25}, []uint32{0, 1}, []float64{0.25, 0.25, 0.25, 0.25}, 1, 1.1, 2, 4, nil},
		{[]float64{0.25, 0.25, 0.25, 0.25}, []uint32{0, 1, 2, 0, 1}, []float64{0.296923, 0.296923, 0.109232, 0.296923}, 1, 1.1, 2, 5, nil},
		{[]float64{0.2, 0.2, 0.2, 0.2, 0.2}, []uint32{0, 1, 3, 4, 0, 1}, []float64{0.2, 0.2, 0.2, 0.2, 0.2}, 1, 1.1, 2, 6, [][]uint32{{3}}},
		{[]float64{0.2, 0.2, 0.2, 0.2, 0.2}, []uint32{0, 1, 2, 0, 1}, []float64{0.241818, 0.241818, 0.032727, 0.241818, 0.241818}, 2, 1.1, 2, 5, nil},
		{[]float64{0.2, 0.2, 0.2, 0.2, 0.2}, []uint32{0, 1, 2, 3, 4, 0, 1}, []float64{0.2, 0.2, 0.2, 0.2, 0.2}, 1, 1.1, 4, 7, nil},
	} {
		l := logitsOf(tc.probs...)
		breakers := map[uint32][][]uint32{}
		for _, b := range tc.breakers {
			breakers[b[0]] = append(breakers[b[0]], b[1:])
		}
		for split := range len(tc.tokens) + 1 {
			d := &DRY{Multiplier: tc.mult, Base: tc.base, AllowedLength: tc.allowed, LastN: tc.lastN, Breakers: breakers, Context: tc.tokens[:split]}
			p := Params{Temperature: 1, DRY: d}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			got := distMap(New(p).Dist(nil, l, tc.tokens[split:]))
			for id, w := range tc.want {
				if math.Abs(got[uint32(id)]-w) > 1e-5 {
					t.Errorf("tokens %v (context %d): token %d has probability %v, llama.cpp's %v", tc.tokens, split, id, got[uint32(id)], w)
				}
			}
		}
	}
}

// naiveDRY is DRY's penalties by the definition, in O(n²): for each
// place j before the end, the longest run ending there that equals the
// run ending at the end (reaching back no further than the latest
// breaker), and the token after it penalised by that length.
func naiveDRY(d *DRY, history []uint32) map[uint32]float64 {
	seq := slices.Concat(d.Context, history)
	if d.LastN > 0 && len(seq) > d.LastN {
		seq = seq[len(seq)-d.LastN:]
	}
	n := len(seq)
	out := map[uint32]float64{}
	if n <= d.AllowedLength {
		return out
	}
	limit := n
	found := false
	for i := 0; i < n && !found; i++ { // a head i tokens from the end
		longest := -1
		for _, tail := range d.Breakers[seq[n-1-i]] {
			if len(tail) > i || len(tail) <= longest {
				continue
			}
			if slices.Equal(tail, seq[n-i:n-i+len(tail)]) {
				longest = len(tail)
			}
		}
		if longest >= 0 {
			limit, found = i-longest, true
		}
	}
	if limit < d.AllowedLength {
		return out
	}
	for j := 0; j < n-1; j++ {
		m := 0
		for m <= j && seq[j-m] == seq[n-1-m] {
			m++
		}
		m = min(m, limit)
		next := seq[j+1]
		single := slices.ContainsFunc(d.Breakers[next], func(t []uint32) bool { return len(t) == 0 })
		if m < d.AllowedLength || single {
			continue
		}
		e := float64(m - d.AllowedLength)
		if d.Base > 1.000001 {
			e = min(e, math.Floor(88.7228391/math.Log(d.Base)))
		}
		out[next] = max(out[next], d.Multiplier*math.Pow(d.Base, e))
	}
	return out
}

// TestDRYByDefinition: the penalties of random, repetitive sequences
// (three tokens, so repeats abound), with breakers of one and of two
// tokens, equal the definition's.
func TestDRYByDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 3000 {
		n := rng.IntN(40)
		seq := make([]uint32, n)
		for i := range seq {
			seq[i] = uint32(rng.IntN(3))
			if rng.IntN(20) == 0 {
				seq[i] = 3 // a breaker's head
			}
		}
		d := &DRY{Multiplier: 0.8, Base: 1.75, AllowedLength: rng.IntN(4), LastN: rng.IntN(30)}
		switch trial % 3 {
		case 1:
			d.Breakers = map[uint32][][]uint32{3: {nil}}
		case 2:
			d.Breakers = map[uint32][][]uint32{3: {{0}, {0, 1}}}
		}
		split := rng.IntN(n + 1)
		d.Context = seq[:split]
		s := New(Params{Temperature: 1, DRY: d})
		s.countHistory(seq[split:])
		want := naiveDRY(d, seq[split:])
		if len(s.dryPen) != len(want) {
			t.Fatalf("%v (allowed %d, last %d, breakers %v): penalties %v, by the definition %v", seq, d.AllowedLength, d.LastN, d.Breakers, s.dryPen, want)
		}
		for id, w := range want {
			if g := s.dryPen[id]; math.Abs(g-w) > 1e-12*w {
				t.Fatalf("%v (allowed %d, last %d, breakers %v): token %d penalised %v, by the definition %v", seq, d.AllowedLength, d.LastN, d.Breakers, id, g, w)
			}
		}
	}
}

// TestDRYGreedy: DRY changes a greedy pick, as llama.cpp's chain does
// before its cold temperature; such parameters are not a plain argmax.
func TestDRYGreedy(t *testing.T) {
	l := []float32{0, 1, 1.5, 0}
	d := &DRY{Multiplier: 1, Base: 1.75, AllowedLength: 2, Breakers: map[uint32][][]uint32{}}
	p := Params{DRY: d}
	if p.ArgMax() {
		t.Fatal("DRY parameters report a plain argmax")
	}
	// 0 1 2 0 1: token 2 would extend a repeat of two.
	if got := New(p).Sample(l, []uint32{0, 1, 2, 0, 1}); got != 1 {
		t.Errorf("greedy pick %d, want 1 (2 penalised by 1)", got)
	}
	if got := New(p).Sample(l, []uint32{0, 1, 2, 0, 3}); got != 2 {
		t.Errorf("greedy pick %d with no repeat, want 2", got)
	}
	if (Params{DRY: d, Order: "k"}).ArgMax() != true {
		t.Error("an order without DRY still reports DRY")
	}
}

// textVocab is a BreakerVocab over token texts; Tokenize takes the
// longest text at each point.
type textVocab []string

func (v textVocab) NumTokens() int        { return len(v) }
func (v textVocab) Text(id uint32) string { return v[id] }
func (v textVocab) Tokenize(s string) []uint32 {
	var out []uint32
	for s != "" {
		best := -1
		for id, w := range v {
			if w != "" && strings.HasPrefix(s, w) && (best < 0 || len(w) > len(v[best])) {
				best = id
			}
		}
		if best < 0 {
			return out
		}
		out, s = append(out, uint32(best)), s[len(v[best]):]
	}
	return out
}

// TestBreakers: a token holding a breaker is one on its own; one whose
// text ends with a breaker's beginning heads the breaker's rest,
// tokenized; the same tail is kept once.
func TestBreakers(t *testing.T) {
	v := textVocab{"a", "\n", "x\ny", "Bob", ":", "Bo", "b:", "<s>", "ob:"}
	got, err := Breakers(v, []string{"\n", "Bob:"})
	if err != nil {
		t.Fatal(err)
	}
	// "b:" and "ob:" end with no beginning of "Bob:" (case matters).
	want := map[uint32][][]uint32{
		1: {nil}, // "\n"
		2: {nil}, // "x\ny" holds "\n"
		3: {{4}}, // "Bob" + ":"
		5: {{6}}, // "Bo" + "b:"
	}
	if len(got) != len(want) {
		t.Fatalf("breakers %v, want %v", got, want)
	}
	for id, tails := range want {
		if !slicesEqual2(got[id], tails) {
			t.Errorf("token %d (%q): tails %v, want %v", id, v[id], got[id], tails)
		}
	}
	if _, err := Breakers(v, []string{strings.Repeat("x", MaxBreakerBytes+1)}); err == nil {
		t.Error("a breaker past its bound accepted")
	}
	if _, err := Breakers(v, []string{""}); err == nil {
		t.Error("an empty breaker accepted")
	}
}

func slicesEqual2(a, b [][]uint32) bool {
	return slices.EqualFunc(a, b, func(x, y []uint32) bool { return slices.Equal(x, y) })
}
