package sample

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// fakeVocab is a Vocab of the pieces given, whose ends of generation are
// eog and whose EOT is eot.
type fakeVocab struct {
	pieces []string
	eog    map[uint32]bool
	eot    uint32
}

func (v fakeVocab) IsEOG(id uint32) bool { return v.eog[id] }
func (v fakeVocab) EOT() uint32          { return v.eot }
func (v fakeVocab) Piece(id uint32) string {
	if int(id) < len(v.pieces) {
		return v.pieces[id]
	}
	return ""
}

func TestValidateOrder(t *testing.T) {
	voc := fakeVocab{}
	for _, tc := range []struct {
		p    Params
		want string // a part of the error; "" for none
	}{
		{Params{}, ""},
		{Params{Order: DefaultOrder}, ""},
		{Params{Order: "t"}, ""},
		{Params{Order: "mtkpe"}, ""},
		{Params{Order: "kpi", TopK: 40, Vocab: voc}, ""},
		{Params{Order: "ekpmti", TopK: MaxInfillCandidates, Vocab: voc}, ""},
		{Params{Order: "kit", TopK: 1, Vocab: voc}, ""},
		{Params{Order: "kz"}, `samplers order "kz": 'z' is not a sampler (e d s k y p m x t i)`},
		{Params{Order: "skyx"}, ""},
		{Params{TypicalP: 1.5}, "typical_p 1.5 is not in [0, 1]"},
		{Params{TopNSigma: math.Inf(1)}, "top_n_sigma"},
		{Params{XTCProbability: 0.5, XTCThreshold: -0.1}, "xtc probability 0.5 and threshold -0.1"},
		{Params{DynaTempRange: 0.5, DynaTempExponent: math.NaN()}, "dynatemp range 0.5 and exponent NaN"},
		{Params{MinKeep: -1}, "min_keep -1"},
		{Params{Order: "K"}, `'K' is not a sampler`},
		{Params{Order: "k p"}, `' ' is not a sampler`},
		{Params{Order: "kpk"}, `samplers order "kpk": 'k' twice`},
		{Params{Order: "tt"}, `'t' twice`},
		{Params{Order: "kpii", TopK: 4, Vocab: voc}, `'i' twice`},
		{Params{Order: "kpi", TopK: 40}, "infill needs the vocabulary"},
		{Params{Order: "pi", TopK: 40, Vocab: voc}, "needs top_k before it"},
		{Params{Order: "ik", TopK: 40, Vocab: voc}, "needs top_k before it"},
		{Params{Order: "kpi", Vocab: voc}, "infill needs top_k in [1, 1024], not 0"},
		{Params{Order: "kpi", TopK: MaxInfillCandidates + 1, Vocab: voc}, "not 1025"},
	} {
		err := tc.p.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("order %q: %v", tc.p.Order, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("order %q: error %v, want one saying %q", tc.p.Order, err, tc.want)
		}
	}
}

// distMap is d as a map from token to probability.
func distMap(d []Prob) map[uint32]float64 {
	m := make(map[uint32]float64, len(d))
	for _, x := range d {
		m[x.ID] += x.P
	}
	return m
}

// sameDist fails t unless a and b give each token the same probability
// within tol (a token one leaves out has none).
func sameDist(t *testing.T, what string, a, b []Prob, tol float64) {
	t.Helper()
	ma, mb := distMap(a), distMap(b)
	for id, p := range ma {
		if math.Abs(p-mb[id]) > tol {
			t.Fatalf("%s: token %d has probability %v, reference %v", what, id, p, mb[id])
		}
	}
	for id, p := range mb {
		if _, ok := ma[id]; !ok && p > tol {
			t.Fatalf("%s: token %d is missing, reference gives it %v", what, id, p)
		}
	}
}

// TestChainMatchesDefault: the generic chain, run in an order that does
// what the default does (the default order itself, forced through it;
// the default less the temperature at temperature 1; the default less
// the penalties without any), gives the default path's distribution
// within 1e-6 (the generic path divides the logits by the temperature
// before the softmax's shift, the default after), and its likeliest
// candidate at a cold temperature is greedy's pick.
func TestChainMatchesDefault(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	history := []uint32{1, 1, 5, 17, 99}
	for trial := range 20 {
		n := 2 + rng.IntN(300)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
			if rng.IntN(40) == 0 {
				logits[i] = float32(math.Inf(-1))
			}
		}
		logits[rng.IntN(n)] = 9 // at least one finite
		for _, p := range []Params{
			{Temperature: 0.8},
			{Temperature: 1.3, TopK: 10},
			{Temperature: 0.7, TopP: 0.9},
			{Temperature: 1, MinP: 0.05, RepeatPenalty: 1.3},
			{Temperature: 1.1, TopK: 50, TopP: 0.8, MinP: 0.02, FrequencyPenalty: 0.5, PresencePenalty: 0.3},
			{Temperature: 0.9, TopP: 0.95, LogitBias: []Bias{{Token: 0, Bias: 4}, {Token: 1, Bias: -2}}, RepeatPenalty: 1.1},
		} {
			p.Seed = uint64(trial)
			want := New(p).Dist(nil, logits, history)

			forced := New(p)
			forced.generic = true
			sameDist(t, "ekpmt forced", forced.Dist(nil, logits, history), want, 1e-6)

			if p.Temperature == 1 {
				q := p
				q.Order = "ekpm"
				sameDist(t, "ekpm at temperature 1", New(q).Dist(nil, logits, history), want, 1e-6)
			}
			if !p.penalised() {
				q := p
				q.Order = "kpmt"
				sameDist(t, "kpmt without penalties", New(q).Dist(nil, logits, history), want, 1e-6)
			}

			// The chain's likeliest at a cold temperature ('t' keeps it
			// alone) is greedy's pick, with and without a mask.
			cold := p
			cold.Temperature = 0
			allowed := make([]uint64, (n+63)/64)
			for i := range n {
				if i%3 != 0 {
					allowed[i/64] |= 1 << (i % 64)
				}
			}
			for _, mask := range [][]uint64{nil, allowed} {
				g, c := New(cold), New(cold)
				g.countHistory(history)
				c.countHistory(history)
				want := g.greedy(logits, mask)
				if got := c.chain(logits, mask, func() bool { return false }); len(got) != 1 || got[0].id != want {
					t.Fatalf("%+v, mask %v: cold chain keeps %v, greedy picks %d", cold, mask != nil, got, want)
				}
			}
		}
	}
}

// TestDefaultOrderIsDefault: Order "ekpmt" is Order "", path and draws:
// the seeded stream a receipt's replay depends on does not move.
func TestDefaultOrderIsDefault(t *testing.T) {
	logits := make([]float32, 500)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)) * 3)
	}
	p := Params{Temperature: 0.9, TopK: 100, TopP: 0.9, MinP: 0.01, RepeatPenalty: 1.1, Seed: 3}
	q := p
	q.Order = DefaultOrder
	a, b := New(p), New(q)
	if a.generic || b.generic {
		t.Fatal("the default order takes the generic path")
	}
	var history []uint32
	for i := range 200 {
		x, y := a.Sample(logits, history), b.Sample(logits, history)
		if x != y {
			t.Fatalf("draw %d: order \"\" picks %d, %q %d", i, x, DefaultOrder, y)
		}
		history = append(history, x)
	}
}

// TestOrderLeavesOut: a filter the order leaves out does nothing.
func TestOrderLeavesOut(t *testing.T) {
	logits := []float32{2, 1.9, -1, 0.5}
	history := []uint32{0, 0}
	// Without 'e' the penalties are off: greedy picks 0 (a repeat
	// penalty of 1.1 had made it 2/1.1 = 1.82 < 1.9), and a sampled
	// distribution is the unpenalised one, to the bit.
	pen := Params{RepeatPenalty: 1.1, FrequencyPenalty: 1, Order: "kpmt"}
	if got := New(pen).Sample(logits, history); got != 0 {
		t.Errorf("greedy %q with penalties = %d, want 0", pen.Order, got)
	}
	if !pen.ArgMax() {
		t.Errorf("%+v: not ArgMax, though no penalty runs", pen)
	}
	if got := New(Params{RepeatPenalty: 1.1, Order: "ekpmt"}).Sample(logits, history); got != 1 {
		t.Errorf("greedy with penalties = %d, want 1", got)
	}
	pen.Temperature = 0.8
	a := New(pen).Dist(nil, logits, history)
	pen.RepeatPenalty, pen.FrequencyPenalty = 0, 0
	b := New(pen).Dist(nil, logits, history)
	if len(a) != len(b) {
		t.Fatalf("Dist %v, unpenalised %v", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("Dist %v, unpenalised %v", a, b)
		}
	}

	// Without 't' the temperature is 1 whatever it says: the softmax
	// of the logits (top-k 3 keeps 0, 1 and 3).
	cold := Params{Temperature: 0.3, TopK: 3, Order: "kpm"}
	want := softmax([]float32{2, 1.9, 0.5}, 1)
	d := distMap(New(cold).Dist(nil, logits, nil))
	for i, id := range []uint32{0, 1, 3} {
		if math.Abs(d[id]-want[i]) > 1e-12 {
			t.Errorf("%q at temperature 0.3: p(%d) = %v, want %v", cold.Order, id, d[id], want[i])
		}
	}
	if len(d) != 3 {
		t.Errorf("%q: Dist %v, want tokens 0, 1, 3", cold.Order, d)
	}

	// Temperature before min-p: the cut is on the tempered logits. At
	// temperature 0.5, token 3 is e^((0.5−2)/0.5) = e^−3 = 0.0498 of
	// the likeliest: min-p 0.06 drops it, where min-p before the
	// temperature (untempered: e^−1.5 = 0.22) keeps it. Token 2 is
	// under 0.06 either way (e^−6, e^−3).
	hot := Params{Temperature: 0.5, MinP: 0.06}
	hot.Order = "tm"
	if d := distMap(New(hot).Dist(nil, logits, nil)); len(d) != 2 || d[3] != 0 {
		t.Errorf("%q: Dist %v, want tokens 0 and 1", hot.Order, d)
	}
	hot.Order = "mt"
	if d := distMap(New(hot).Dist(nil, logits, nil)); len(d) != 3 || d[3] == 0 {
		t.Errorf("%q: Dist %v, want tokens 0, 1 and 3", hot.Order, d)
	}
}

func TestArgMaxOrder(t *testing.T) {
	voc := fakeVocab{}
	for _, tc := range []struct {
		p    Params
		want bool
	}{
		{Params{Order: "kpmt"}, true},
		{Params{Order: "kpi", TopK: 40, Vocab: voc}, false}, // infill may pick an EOG
		{Params{Order: "kpmt", RepeatPenalty: 1.2}, true},   // no 'e': no penalty runs
		{Params{Order: "ekpmt", RepeatPenalty: 1.2}, false},
		{Params{RepeatPenalty: 1.2}, false},
		{Params{Order: "kpmt", LogitBias: []Bias{{Token: 1, Bias: 1}}}, false}, // biases always come first
	} {
		if got := tc.p.ArgMax(); got != tc.want {
			t.Errorf("%+v: ArgMax() = %v, want %v", tc.p, got, tc.want)
		}
		if !tc.p.Greedy() {
			t.Errorf("%+v: not Greedy", tc.p)
		}
	}
}

// infillCase is a vocabulary, logits and the candidates infill keeps
// (with their logits: the softmax Dist must give), worked out by hand
// in the comments.
type infillCase struct {
	name   string
	pieces []string
	eog    []uint32
	logits []float32
	keep   []uint32 // the tokens kept, their logits being the softmax's
	eot    bool     // keep is the single EOT (logit 1, not its own)
}

// lnP is the logit of probability p (of a softmax whose logits' e^l sum to 1).
func lnP(p float64) float32 { return float32(math.Log(p)) }

var infillCases = []infillCase{
	{
		// p (sorted: 0, 1, 3, 2) = .5793 .2131 .1293 .0784: the EOG's
		// .0784·3·4 = .9407 > .9216 of text: only the EOG stays.
		name:   "likely end",
		pieces: []string{"a", "b", "", "c"}, eog: []uint32{2},
		logits: []float32{2, 1, 0, 0.5},
		keep:   []uint32{2},
	},
	{
		// The EOG's p = .0042, 3·.0042·4 = .0506 < .9958. 0 (.6259)
		// and 1 (.2302) pass 0.2, renormalised .7275 and .2676 over
		// 0, 1 and the EOG (.0049); 1 is under 1/3 and goes, the EOG
		// stays whatever its p.
		name:   "unlikely end",
		pieces: []string{"a", "b", "", "c"}, eog: []uint32{2},
		logits: []float32{2, 1, -3, 0.5},
		keep:   []uint32{0, 2},
	},
	{
		// "foo" (.5741) is a prefix of "foobar" (.3482) and likelier:
		// it takes its mass (.9223) and keeps its logit; "foobar"
		// goes. "x" (.0777) is under 0.2. The EOG (6e-6) stays.
		name:   "prefix merges into the likelier",
		pieces: []string{"foo", "foobar", "x", ""}, eog: []uint32{3},
		logits: []float32{2, 1.5, 0, -10},
		keep:   []uint32{0, 3},
	},
	{
		// The same, "foobar" the likelier: "foo" merges into it.
		name:   "prefix merges into the likelier, the longer",
		pieces: []string{"foo", "foobar", "x", ""}, eog: []uint32{3},
		logits: []float32{1.5, 2, 0, -10},
		keep:   []uint32{1, 3},
	},
	{
		// Six text tokens of p .1666 each, none reaching 0.2; the EOGs
		// (.0004, 3·.0004·8 = .01) stay but are no text: the
		// candidates become the single EOT, 7, its logit 1, not its −20.
		name:   "no text token reaches 0.2",
		pieces: []string{"a", "b", "c", "d", "e", "f", "", "<eot>"}, eog: []uint32{6, 7},
		logits: []float32{0, 0, 0, 0, 0, 0, -6, -20},
		keep:   []uint32{7}, eot: true,
	},
	{
		// p = .7153 .2631 .0216: 0 and 1 pass 0.2, renormalised
		// .7311 and .2689; 1 is under 1/(2+1) and goes.
		name:   "second threshold",
		pieces: []string{"a", "b", "c"},
		logits: []float32{2, 1, -1.5},
		keep:   []uint32{0},
	},
	{
		// p = .6110 .3706 .0184: renormalised .6225 and .3775, both
		// over 1/3.
		name:   "second threshold keeps",
		pieces: []string{"a", "b", "c"},
		logits: []float32{2, 1.5, -1.5},
		keep:   []uint32{0, 1},
	},
	{
		// p (sorted 0, 1, 3, 2, 5, 4) = .2979 .2695 .2564 .1211 .0403
		// .0148; 3·.0403·6 = .7256 < .9597. "fo" (2) merges into "for"
		// (1): .3906. 0, 1, 3 pass 0.2, 4 does not; renormalised
		// with the EOG: .3023 .3965 .2602 .0409, all over 1/4.
		name:   "merge and thresholds",
		pieces: []string{"if", "for", "fo", "while", "x", ""}, eog: []uint32{5},
		logits: []float32{1, 0.9, 0.1, 0.85, -2, -1},
		keep:   []uint32{0, 1, 3, 5},
	},
	{
		// An EOG with text: "y" (4, p .0201; 3·.0201·16 = .9657 <
		// .9799) merges into "yy" (3, .1902 → .2103), going to −Inf
		// but staying, as an EOG; "z" (5, .0200) takes its ten
		// "z?" (.0199 each): .2192. 0, 1, 2 (.1902) are under 0.2; 3
		// and 5 renormalised .4896 and .5104 pass 1/3. 5 came after
		// the EOG, which has no mass now: the candidates re-sort, and
		// the EOG has no probability.
		name: "merged-away EOG",
		pieces: []string{"aa", "bb", "cc", "yy", "y", "z",
			"za", "zb", "zc", "zd", "ze", "zf", "zg", "zh", "zi", "zj"},
		eog: []uint32{4},
		logits: []float32{lnP(.19), lnP(.19), lnP(.19), lnP(.19), lnP(.0201), lnP(.02),
			lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199), lnP(.0199)},
		keep: []uint32{3, 5},
	},
}

func (tc infillCase) vocab() fakeVocab {
	v := fakeVocab{pieces: tc.pieces, eog: map[uint32]bool{}, eot: uint32(len(tc.pieces)) - 1}
	for _, id := range tc.eog {
		v.eog[id] = true
	}
	return v
}

// want is the distribution Dist must give: the softmax of the kept
// tokens' logits.
func (tc infillCase) want() map[uint32]float64 {
	if tc.eot {
		return map[uint32]float64{tc.keep[0]: 1}
	}
	var ls []float32
	for _, id := range tc.keep {
		ls = append(ls, tc.logits[id])
	}
	p := softmax(ls, 1)
	m := map[uint32]float64{}
	for i, id := range tc.keep {
		if p[i] > 0 {
			m[id] = p[i]
		}
	}
	return m
}

// TestInfill: the infill filter keeps the candidates worked out by
// hand, with the softmax of their logits (1e-12), in orders that put it
// after top-k with or without top-p around it.
func TestInfill(t *testing.T) {
	for _, tc := range infillCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range []string{"ki", "kpi", "kit", "ekpmit"} {
				p := Params{Temperature: 1, TopK: len(tc.logits), Order: order, Vocab: tc.vocab(), Seed: 1}
				if err := p.Validate(); err != nil {
					t.Fatal(err)
				}
				want := tc.want()
				got := distMap(New(p).Dist(nil, tc.logits, nil))
				if len(got) != len(want) {
					t.Fatalf("%q: Dist %v, want %v", order, got, want)
				}
				for id, pw := range want {
					if pg, ok := got[id]; !ok || math.Abs(pg-pw) > 1e-12 {
						t.Fatalf("%q: Dist %v, want %v", order, got, want)
					}
				}
			}
		})
	}
}

// TestInfillGreedy: greedy with infill picks the likeliest token it
// keeps: the end of generation where its mass rules (plain greedy
// picks text), the merged-into token, the EOT fallback.
func TestInfillGreedy(t *testing.T) {
	for _, tc := range infillCases {
		p := Params{TopK: len(tc.logits), Order: "kpi", Vocab: tc.vocab()}
		want := tc.keep[0] // the likeliest kept (keep is in logit order)
		if got := New(p).Sample(tc.logits, nil); got != want {
			t.Errorf("%s: greedy %q picks %d, want %d", tc.name, p.Order, got, want)
		}
		if d := New(p).Dist(nil, tc.logits, nil); len(d) != 1 || d[0] != (Prob{want, 1}) {
			t.Errorf("%s: greedy Dist %v, want %d alone", tc.name, d, want)
		}
	}
	// The end of generation against plain greedy.
	tc := infillCases[0]
	if got := New(Params{}).Sample(tc.logits, nil); got != 0 {
		t.Fatalf("plain greedy picks %d, want 0", got)
	}
}

// TestInfillDraws: seeded draws under infill only ever give the tokens
// it keeps, at the softmax of their logits, within 5 standard errors
// (and 1e-4); and Draw over Dist picks Sample's token draw for draw.
func TestInfillDraws(t *testing.T) {
	for _, i := range []int{1, 2, 6, 7, 8} {
		tc := infillCases[i]
		t.Run(tc.name, func(t *testing.T) {
			// Top-p 1−1e-7 keeps every candidate here (the least
			// likely being the EOG of 6e-6).
			p := Params{Temperature: 1, TopK: len(tc.logits), TopP: 1 - 1e-7, Order: "kpi", Vocab: tc.vocab(), Seed: 5}
			want := tc.want()
			s, a, b := New(p), New(p), New(p)
			const n = 40000
			counts := map[uint32]int{}
			for range n {
				counts[s.Sample(tc.logits, nil)]++
			}
			for id, c := range counts {
				if _, ok := want[id]; !ok {
					t.Fatalf("drew %d, which infill drops, %d times", id, c)
				}
			}
			for id, pw := range want {
				got := float64(counts[id]) / n
				se := math.Sqrt(pw * (1 - pw) / n)
				if math.Abs(got-pw) > 5*se+1e-4 {
					t.Errorf("token %d: frequency %.4f, want %.4f (±%.4f)", id, got, pw, 5*se)
				}
			}
			var d []Prob
			for j := range 500 {
				d = b.Dist(d[:0], tc.logits, nil)
				if got, want := b.Draw(d), a.Sample(tc.logits, nil); got != want {
					t.Fatalf("draw %d: Draw(Dist) %d, Sample %d", j, got, want)
				}
			}
		})
	}
}

// TestChainDistIsWhatSampleDraws is TestDistIsWhatSampleDraws for
// orders other than the default, infill among them, with penalties and
// biases; and the generic path respects a mask.
func TestChainDistIsWhatSampleDraws(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	logits := make([]float32, 60)
	pieces := make([]string, len(logits))
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
		pieces[i] = string(rune('a'+i%5)) + strings.Repeat("x", i%3)
	}
	voc := fakeVocab{pieces: pieces, eog: map[uint32]bool{7: true, 40: true}, eot: 7}
	history := []uint32{3, 3, 7, 11, 40}
	allowed := []uint64{0}
	for id := range 60 {
		if id%4 != 1 {
			allowed[0] |= 1 << id
		}
	}
	for _, p := range []Params{
		{Temperature: 0.8, Order: "tkp", TopK: 20, TopP: 0.9, Seed: 1},
		{Temperature: 1.3, Order: "mk", TopK: 10, MinP: 0.01, Seed: 2},
		{Temperature: 0.7, Order: "pe", TopP: 0.9, RepeatPenalty: 1.4, Seed: 3},
		{Temperature: 1, Order: "kpi", TopK: 40, TopP: 0.95, Vocab: voc, Seed: 4},
		{Temperature: 1.5, Order: "ekpmit", TopK: 30, TopP: 0.99, MinP: 0.001, FrequencyPenalty: 0.5, Vocab: voc, Seed: 5,
			LogitBias: []Bias{{Token: 7, Bias: -1}, {Token: 2, Bias: 2}}},
		{Temperature: 2, Order: "kti", TopK: 8, Vocab: voc, Seed: 6},
	} {
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		checkDistIsDrawn(t, p, logits, history, nil, 300)
		checkDistIsDrawn(t, p, logits, history, allowed, 300)
		m := New(p)
		for range 300 {
			if id := m.SampleAllowed(logits, history, allowed); !has(allowed, int(id)) && id != voc.eot {
				t.Fatalf("%q: SampleAllowed picked %d, which the mask does not allow", p.Order, id)
			}
		}
	}
}

// FuzzOrder: Validate never panics on any order; under a valid one,
// Sample over small random logits (ties, −Inf, a NaN, huge) picks a
// token of the vocabulary that Dist gives some probability, greedy or
// sampled, masked or not.
func FuzzOrder(f *testing.F) {
	for _, o := range []string{"", "ekpmt", "kpi", "mt", "kpit", "ik", "kk", "kx", "\xff", "ekpmti", "t", "edskypmxt", "xt", "ymt", "st", "dk"} {
		f.Add(o, uint64(1), uint8(40), uint8(5), uint8(90), uint8(5), uint8(100))
	}
	f.Fuzz(func(t *testing.T, order string, seed uint64, n, topK, topP, minP, temp uint8) {
		voc := fakeVocab{eog: map[uint32]bool{}}
		size := 1 + int(n%64)
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range size {
			// Short pieces over two letters, so that prefixes abound;
			// some empty, some ends of generation.
			var b []byte
			for range rng.IntN(4) {
				b = append(b, "ab"[rng.IntN(2)])
			}
			voc.pieces = append(voc.pieces, string(b))
			if rng.IntN(8) == 0 {
				voc.eog[uint32(i)] = true
			}
		}
		voc.eot = uint32(rng.IntN(size))
		p := Params{Order: order, Vocab: voc, Seed: seed,
			TopK: int(topK % 70), TopP: float64(topP%101) / 100, MinP: float64(minP%101) / 100,
			Temperature: float64(temp) / 50, RepeatPenalty: 1.2, PresencePenalty: 0.5}
		if seed%5 == 0 {
			p.Vocab = nil
		}
		// llama.cpp's other filters, on in some runs (their letters
		// in the order, or the default order).
		if seed%7 < 4 {
			p.TypicalP = float64(topP%97) / 100
			p.TopNSigma = float64(minP%9) / 2
			p.XTCProbability, p.XTCThreshold = float64(topK%11)/10, float64(temp%7)/10
			p.DynaTempRange, p.DynaTempExponent = float64(n%3)/2, float64(seed%4)/2
			p.MinKeep = int(seed % 6)
			p.DRY = &DRY{Multiplier: float64(topK%5) / 2, Base: 1 + float64(minP%4)/2, AllowedLength: int(seed % 3),
				Breakers: map[uint32][][]uint32{0: {nil}}, Context: []uint32{0, 1, 0, 1}}
		}
		if p.Validate() != nil {
			return
		}
		// The default order's own path makes every weight NaN where a
		// logit is NaN or none it allows is finite, and then may panic
		// (as it did before orders): it gets finite logits, one at least,
		// which a mask allows.
		generic := New(p).generic
		fin := rng.IntN(size)
		logits := make([]float32, size)
		for i := range logits {
			switch rng.IntN(12) {
			case 0:
				logits[i] = float32(math.Inf(-1))
			case 1:
				logits[i] = 3 // ties
			case 2:
				if generic {
					logits[i] = float32(math.NaN())
				}
			case 3:
				logits[i] = 1e30
			default:
				logits[i] = float32(rng.NormFloat64() * 4)
			}
		}
		if !generic {
			logits[fin] = 1
		}
		history := []uint32{0, uint32(size - 1), uint32(size / 2)}
		var allowed []uint64
		if seed%3 == 0 {
			allowed = []uint64{rng.Uint64() | 1<<fin}
		}
		s, d := New(p), New(p)
		for range 3 {
			id := s.SampleAllowed(logits, history, allowed)
			if int(id) >= size {
				t.Fatalf("%+v: picked %d of %d tokens", p, id, size)
			}
			if allowed == nil {
				if pd := distMap(d.Dist(nil, logits, history))[id]; !(pd > 0) {
					t.Fatalf("%+v, logits %v: picked %d, to which Dist gives %v", p, logits, id, pd)
				}
			}
		}
	})
}

// BenchmarkChain times picks on the generic path over a 32000-token
// vocabulary: an editor's infill chain, and a reordered chain that keeps
// every token to the pick (its full sort).
func BenchmarkChain(b *testing.B) {
	logits := make([]float32, 32000)
	pieces := make([]string, len(logits))
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37) * 5)
		var buf [4]byte
		binary.LittleEndian.PutUint32(buf[:], uint32(i%977))
		pieces[i] = string(buf[:1+i%3])
	}
	voc := fakeVocab{pieces: pieces, eog: map[uint32]bool{2: true}, eot: 2}
	for _, bc := range []struct {
		name string
		p    Params
	}{
		{"kpi", Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Order: "kpi", Vocab: voc}},
		{"kpi/greedy", Params{TopK: 40, TopP: 0.95, Order: "kpi", Vocab: voc}},
		{"kpi/k1024", Params{Temperature: 0.8, TopK: MaxInfillCandidates, Order: "kpi", Vocab: voc}},
		{"mt", Params{Temperature: 0.8, MinP: 0.05, Order: "mt"}},
		{"tkpm", Params{Temperature: 0.8, TopK: 40, TopP: 0.9, Order: "tkpm"}},
		// llama.cpp's other filters in its default order: after top-k
		// 40, as llama-server's defaults have them, and over the whole
		// vocabulary (typical-p sorts it by surprise).
		{"default", Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05}},
		{"default+typical+xtc+sigma", Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, TypicalP: 0.9, XTCProbability: 0.5, XTCThreshold: 0.1, TopNSigma: 2}},
		{"typical/k0", Params{Temperature: 0.8, TypicalP: 0.9}},
		{"dry", Params{Temperature: 0.8, TopK: 40, DRY: &DRY{Multiplier: 0.8, Base: 1.75, AllowedLength: 2, LastN: 1024,
			Breakers: map[uint32][][]uint32{2: {nil}}, Context: benchContext(1024)}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(bc.p)
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(logits, nil)
			}
		})
	}
}

// benchContext is n tokens of a text that repeats itself now and then,
// for DRY to scan.
func benchContext(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32((i*7919)%97 + (i/50%3)*13)
	}
	return out
}
