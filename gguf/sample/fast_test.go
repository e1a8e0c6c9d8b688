package sample

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// refWeights is weights as it was before its exponentials took four
// lanes at once and its maximum a comparison (and nucleus its narrowing):
// one exp a candidate (math.Exp then, the same bits on amd64 with FMA:
// TestExpIsMathExpFMA), the builtin max, a full sort of the first
// threshold's head. The fast paths must give its candidates, order and
// weights to the bit.
func (s *Sampler) refWeights(logits []float32, allowed []uint64) ([]candidate, float64) {
	c := s.cands[:0]
	defer func() { s.cands = c[:0] }()
	top := math.Inf(-1)
	for id, l := range logits {
		if allowed != nil && !has(allowed, id) {
			continue
		}
		v := s.penalised(uint32(id), float64(l))
		c = append(c, candidate{uint32(id), v})
	}
	// Non-finite logits as the chain takes them: a NaN is −Inf, and an
	// infinite top keeps the candidates equal to it at 0, the others at
	// −Inf (the softmax's limit).
	for i := range c {
		if math.IsNaN(c[i].v) {
			c[i].v = math.Inf(-1)
		}
		top = max(top, c[i].v)
	}
	if math.IsInf(top, 0) {
		for i := range c {
			if c[i].v == top {
				c[i].v = 0
			} else {
				c[i].v = math.Inf(-1)
			}
		}
		top = 0
	}
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = topK(c, k)
	}
	if p := s.p.TopP; p > 0 && p < 1 {
		c = refNucleus(c, top, p)
	}
	if m := s.p.MinP; m > 0 {
		cut := math.Log(m)
		kept := c[:0]
		for _, x := range c {
			if x.v-top >= cut {
				kept = append(kept, x)
			}
		}
		c = kept
	}
	var sum float64
	for i := range c {
		c[i].v = detmath.Exp((c[i].v - top) / s.p.Temperature)
		sum += c[i].v
	}
	return c, sum
}

func refNucleus(c []candidate, top, p float64) []candidate {
	var sum float64
	for _, x := range c {
		sum += detmath.Exp(x.v - top)
	}
	for lnTau := -4.0; ; lnTau -= 8 {
		n, mass := 0, 0.0
		for i, x := range c {
			if x.v-top >= lnTau {
				c[n], c[i] = c[i], c[n]
				mass += detmath.Exp(x.v - top)
				n++
			}
		}
		if mass/sum < p && n < len(c) && lnTau > -800 {
			continue
		}
		head := c[:n]
		slices.SortFunc(head, before)
		var cum float64
		for i, x := range head {
			cum += detmath.Exp(x.v-top) / sum
			if cum >= p {
				return head[:i+1]
			}
		}
		return head
	}
}

// TestWeightsMatchReference: the candidates a pick draws from, their
// order and their weights (and so every draw), are the reference's to
// the bit, for peaked and flat logits, vocabularies of every length mod
// 4, logits far enough below the top that the four-lane exponentials
// hand lanes back to exp (−708 and lower, −Inf), a NaN, masks and
// penalties, under every filter; with the lanes on and off.
func TestWeightsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := map[string]func(n int) []float32{
		"peaked": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.NormFloat64() * 2)
			}
			for range 3 {
				l[rng.IntN(n)] += 12
			}
			return l
		},
		"flat": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(math.Sin(float64(i)*0.37) * 5)
			}
			return l
		},
		"normal": func(n int) []float32 { // flat: top-p's nucleus is most of it
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.NormFloat64())
			}
			return l
		},
		"far below": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				switch i % 7 {
				case 1:
					l[i] = -600 - float32(rng.Float64()*200) // around −708 and past −745
				case 3:
					l[i] = float32(math.Inf(-1))
				default:
					l[i] = float32(rng.NormFloat64())
				}
			}
			return l
		},
		"tied": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.IntN(3))
				if i%5 == 0 {
					l[i] = float32(math.Copysign(0, -1))
				}
			}
			return l
		},
		"nan": func(n int) []float32 {
			l := make([]float32, n)
			for i := range l {
				l[i] = float32(rng.NormFloat64())
			}
			l[n/2] = float32(math.NaN())
			return l
		},
	}
	params := []Params{
		{Temperature: 0.7},
		{Temperature: 1.3, TopK: 40},
		{Temperature: 0.8, TopP: 0.9},
		{Temperature: 1, TopP: 0.5, MinP: 0.05},
		{Temperature: 0.9, TopP: 0.999},
		{Temperature: 2, TopK: 100, TopP: 0.95, MinP: 0.01, RepeatPenalty: 1.2, PresencePenalty: 0.4},
	}
	for _, lanes := range []bool{true, false} {
		if lanes && !useExp4 {
			continue
		}
		was, was8 := useExp4, useExp8
		useExp4, useExp8 = lanes, lanes && useExp8
		for name, shape := range shapes {
			for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 33, 1000, 32001} {
				logits := shape(n)
				var allowed []uint64
				if n > 8 {
					allowed = make([]uint64, (n+63)/64)
					for i := range n {
						if i%3 != 1 {
							allowed[i/64] |= 1 << (i % 64)
						}
					}
				}
				history := []uint32{0, uint32(n - 1), uint32(n / 2)}
				for _, p := range params {
					for _, mask := range [][]uint64{nil, allowed} {
						fast, ref := New(p), New(p)
						fast.countHistory(history)
						ref.countHistory(history)
						fc, fs := fast.weights(logits, mask)
						rc, rs := ref.refWeights(logits, mask)
						if math.Float64bits(fs) != math.Float64bits(rs) && !(math.IsNaN(fs) && math.IsNaN(rs)) {
							t.Fatalf("lanes %v, %s, n %d, %+v, mask %v: sum %v, reference %v", lanes, name, n, p, mask != nil, fs, rs)
						}
						if len(fc) != len(rc) {
							t.Fatalf("lanes %v, %s, n %d, %+v, mask %v: %d candidates, reference %d", lanes, name, n, p, mask != nil, len(fc), len(rc))
						}
						for i := range fc {
							if fc[i].id != rc[i].id || math.Float64bits(fc[i].v) != math.Float64bits(rc[i].v) && !(math.IsNaN(fc[i].v) && math.IsNaN(rc[i].v)) {
								t.Fatalf("lanes %v, %s, n %d, %+v, mask %v: candidate %d is %+v, reference %+v", lanes, name, n, p, mask != nil, i, fc[i], rc[i])
							}
						}
					}
				}
			}
		}
		useExp4, useExp8 = was, was8
	}
}

// TestExpWeightsMatchExp: the four-lane exponentials are detmath.Exp's to
// the bit over the range they take, a sweep of it, its edges and past
// them (where they hand the chunk back), for several temperatures and
// every offset into a chunk.
func TestExpWeightsMatchExp(t *testing.T) {
	if !useExp4 {
		t.Skip("no four-lane exponentials on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var xs []float64
	for range 20000 {
		xs = append(xs, -rng.Float64()*40)
	}
	for range 2000 {
		xs = append(xs, -rng.Float64()*800)
	}
	xs = append(xs, 0, math.Copysign(0, -1), -1e-300, -5e-324, -0.5, -1, -708, -707.9999999, -708.0000001, -709, -709.1, -709.8,
		-744.4, -745.1, -745.2, -746, -1e10, math.Inf(-1), math.NaN(), 1, 709, 709.5, math.Inf(1))
	// A sweep of [−750, 710] and small ones (gguf/detmath's TestGolden
	// pins Exp's bits over the same).
	for i := range 146000 {
		xs = append(xs, -750+float64(float64(i)*0.01)+float64(float64(i%7)*1e-9))
	}
	for i := range 2000 {
		xs = append(xs, float64(float64(i-1000)*1.7e-7))
	}
	was := useExp8
	defer func() { useExp8 = was }()
	for _, eight := range []bool{true, false} {
		if eight && !was {
			continue // no eight-lane exponentials here
		}
		useExp8 = eight
		for _, temp := range []float64{1, 0.7, 0.1, 1.3, 2, 1e-3} {
			for off := range 8 {
				src := make([]candidate, len(xs)-off)
				for i := range src {
					src[i] = candidate{uint32(i), xs[i+off]}
				}
				const top = 0.25
				for i := range src {
					src[i].v += top
				}
				// Into another slice, whose ids the kernels leave alone,
				// and in place.
				dst := make([]candidate, len(src))
				for i := range dst {
					dst[i].id = ^uint32(i)
				}
				expWeights(dst, src, top, temp)
				in := slices.Clone(src)
				expWeights(in, in, top, temp)
				for i := range src {
					want := detmath.Exp((src[i].v - top) / temp)
					for _, got := range []candidate{dst[i], in[i]} {
						if math.Float64bits(got.v) != math.Float64bits(want) && !(math.IsNaN(want) && math.IsNaN(got.v)) {
							t.Fatalf("eight lanes %v, t %v: e^((%v−%v)/t) = %v (%#x), exp gives %v (%#x)", eight, temp, src[i].v, top, got.v, math.Float64bits(got.v), want, math.Float64bits(want))
						}
					}
					if dst[i].id != ^uint32(i) || in[i].id != uint32(i) {
						t.Fatalf("eight lanes %v: candidate %d's id became %d (in place %d)", eight, i, dst[i].id, in[i].id)
					}
				}
			}
		}
	}
}

// BenchmarkWeights times the candidates and weights of a sampled pick
// over a 32000-token vocabulary (a draw's work, less the draw), against
// the reference (refWeights: one exp a candidate, the builtin max, a
// full sort of the first threshold's head, a penalty lookup a token) in
// the same run: x_ref is the reference's time over this one's.
// BenchmarkGreedyPenalised does the same for a greedy pick with a
// repeat penalty.
func BenchmarkWeights(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 9))
	peaked := make([]float32, 32000)
	for i := range peaked {
		peaked[i] = float32(rng.NormFloat64() * 2)
	}
	for range 3 {
		peaked[rng.IntN(len(peaked))] += 12
	}
	flat := make([]float32, 32000)
	for i := range flat {
		flat[i] = float32(math.Sin(float64(i)*0.37) * 5)
	}
	normal := make([]float32, 32000) // flatter: top-p 0.95 keeps most of it
	for i := range normal {
		normal[i] = float32(rng.NormFloat64())
	}
	for _, bc := range []struct {
		name   string
		logits []float32
		p      Params
	}{
		{"temperature", peaked, Params{Temperature: 0.8}},
		{"top-k", peaked, Params{Temperature: 0.8, TopK: 40}},
		{"top-p/peaked", peaked, Params{Temperature: 0.8, TopP: 0.95}},
		{"top-p/flat", flat, Params{Temperature: 0.8, TopP: 0.9}},
		{"top-p/normal", normal, Params{Temperature: 0.8, TopP: 0.95}},
		{"repeat-penalty", peaked, Params{Temperature: 0.8, RepeatPenalty: 1.1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, r := New(bc.p), New(bc.p)
			// A window of 200 generated tokens, for the penalties.
			history := make([]uint32, 200)
			for i := range history {
				history[i] = uint32(i * 97 % len(bc.logits))
			}
			s.countHistory(history)
			r.countHistory(history)
			ref := bestNanos(func() { r.refWeights(bc.logits, nil) })
			fast := bestNanos(func() { s.weights(bc.logits, nil) })
			for b.Loop() {
				s.weights(bc.logits, nil)
			}
			b.ReportMetric(ref/fast, "x_ref")
			b.ReportMetric(fast/1e3, "us")
		})
	}
}

// bestNanos is f's time in nanoseconds, the least of five rounds of 20
// calls each (a loaded machine only ever adds time).
func bestNanos(f func()) float64 {
	best := math.Inf(1)
	for range 5 {
		start := time.Now()
		for range 20 {
			f()
		}
		best = min(best, float64(time.Since(start).Nanoseconds())/20)
	}
	return best
}

// digest is the SHA-256 of vs' bits, in hex.
func digest(vs []float64) string {
	h := sha256.New()
	var b [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestSampleGolden: seeded draws pick the same tokens on every platform
// (a receipt's replay needs it): 200 draws under each of several
// parameter sets, over logits a 32000-token model might give, digested.
func TestSampleGolden(t *testing.T) {
	const want = "76adf00854479d109c0c9ef2edd6c99508ad69707df7adcf45cf5b48ab66d17d"
	rng := rand.New(rand.NewPCG(13, 14))
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	var ids []float64
	for _, p := range []Params{
		{Temperature: 0.7, Seed: 1},
		{Temperature: 1, TopK: 40, Seed: 2},
		{Temperature: 0.8, TopP: 0.95, Seed: 3},
		{Temperature: 1.2, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1, Seed: 4},
	} {
		s := New(p)
		var history []uint32
		for range 200 {
			id := s.Sample(logits, history)
			history = append(history, id)
			ids = append(ids, float64(id))
		}
	}
	if d := digest(ids); d != want {
		t.Errorf("seeded draws: digest %s, want %s", d, want)
	}
}

// FuzzWeights: over arbitrary logits (any float32 bits: NaN, ±Inf,
// subnormals, huge spreads), filters and penalties, a pick's candidates,
// order and weights are the reference's to the bit.
func FuzzWeights(f *testing.F) {
	seed := func(ls ...float32) []byte {
		b := make([]byte, 0, 4*len(ls))
		for _, l := range ls {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(l))
		}
		return b
	}
	f.Add(seed(1, 2, 3, 4, 5, 6, 7, 8, 9), uint8(0), uint8(70), uint8(0), uint8(0))
	f.Add(seed(0, -800, -708.5, 3, float32(math.Inf(-1)), 2, 2, 2), uint8(90), uint8(100), uint8(3), uint8(5))
	f.Add(seed(float32(math.NaN()), 1, 2, 3, 4), uint8(50), uint8(130), uint8(2), uint8(77))
	f.Fuzz(func(t *testing.T, raw []byte, topP, temp, topK, pen uint8) {
		if len(raw) < 4 || len(raw) > 4*4096 {
			return
		}
		logits := make([]float32, len(raw)/4)
		for i := range logits {
			logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := Params{Temperature: float64(temp%200+1) / 100, TopK: int(topK % 8), TopP: float64(topP%101) / 100,
			RepeatPenalty: 1 + float64(pen%4)/10, PresencePenalty: float64(pen%5) - 2}
		// pen also sets the penalty window: a few of the tokens, and
		// one past the vocabulary.
		var history []uint32
		for i := range int(pen % 9) {
			history = append(history, uint32(i*7%(len(logits)+1)))
		}
		fast, ref := New(p), New(p)
		fast.countHistory(history)
		ref.countHistory(history)
		fc, fs := fast.weights(logits, nil)
		rc, rs := ref.refWeights(logits, nil)
		same := func(a, b float64) bool {
			return math.Float64bits(a) == math.Float64bits(b) || math.IsNaN(a) && math.IsNaN(b)
		}
		if !same(fs, rs) || len(fc) != len(rc) {
			t.Fatalf("%+v: sum %v over %d candidates, reference %v over %d", p, fs, len(fc), rs, len(rc))
		}
		for i := range fc {
			if fc[i].id != rc[i].id || !same(fc[i].v, rc[i].v) {
				t.Fatalf("%+v: candidate %d is %+v, reference %+v", p, i, fc[i], rc[i])
			}
		}
	})
}

// refGreedy is greedy as it was, a penalty lookup for every token, and
// as backend.ArgMax takes a NaN (it never wins): the first allowed token
// where none is above −Inf.
func (s *Sampler) refGreedy(logits []float32, allowed []uint64) uint32 {
	best, bestV, first := -1, math.Inf(-1), -1
	for id, l := range logits {
		if allowed != nil && !has(allowed, id) {
			continue
		}
		v := float64(l)
		if len(s.counts) > 0 {
			v = s.penalised(uint32(id), v)
		}
		if first < 0 {
			first = id
		}
		if v > bestV {
			best, bestV = id, v
		}
	}
	if best < 0 {
		best = first
	}
	return uint32(max(best, 0))
}

// TestGreedyMatchesReference: a penalised greedy pick, masked or not, is
// the reference's (refGreedy) — ties to the lowest id, penalties that
// lift a token (negative ones) or sink it, NaN and −Inf logits, history
// tokens past the vocabulary.
func TestGreedyMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for trial := range 300 {
		n := 1 + rng.IntN(3000)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.IntN(5)) // many ties
			switch rng.IntN(50) {
			case 0:
				logits[i] = float32(math.NaN())
			case 1:
				logits[i] = float32(math.Inf(-1))
			}
		}
		var allowed []uint64
		if trial%2 == 1 {
			allowed = make([]uint64, (n+63)/64)
			for i := range n {
				if rng.IntN(3) > 0 {
					allowed[i/64] |= 1 << (i % 64)
				}
			}
		}
		history := make([]uint32, rng.IntN(40))
		for i := range history {
			history[i] = uint32(rng.IntN(n + 5))
		}
		p := Params{RepeatPenalty: 1 + rng.Float64(), FrequencyPenalty: rng.Float64()*4 - 2, PresencePenalty: rng.Float64()*4 - 2}
		s, r := New(p), New(p)
		s.countHistory(history)
		r.countHistory(history)
		if got, want := s.greedy(logits, allowed), r.refGreedy(logits, allowed); got != want {
			t.Fatalf("trial %d (%+v, masked %v): greedy %d, reference %d", trial, p, allowed != nil, got, want)
		}
	}
}

func BenchmarkGreedyPenalised(b *testing.B) {
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37) * 5)
	}
	history := make([]uint32, 200)
	for i := range history {
		history[i] = uint32(i * 97 % len(logits))
	}
	p := Params{RepeatPenalty: 1.1}
	s, r := New(p), New(p)
	s.countHistory(history)
	r.countHistory(history)
	ref := bestNanos(func() { r.refGreedy(logits, nil) })
	fast := bestNanos(func() { s.greedy(logits, nil) })
	for b.Loop() {
		s.greedy(logits, nil)
	}
	b.ReportMetric(ref/fast, "x_ref")
	b.ReportMetric(fast/1e3, "us")
}

// TestTopKLogits: top-k straight from the logits, and top-k over
// candidates in any order (−Inf among them), pick the candidates, in
// the order, that sorting every candidate by before gives first (ties,
// signed zeros and all); logits that are not finite are left to the
// general path.
func TestTopKLogits(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 2000 {
		n := 1 + rng.IntN(300)
		logits := make([]float32, n)
		for i := range logits {
			switch rng.IntN(6) {
			case 0:
				logits[i] = 1 // ties
			case 1:
				logits[i] = float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
			default:
				logits[i] = float32(rng.NormFloat64() * 3)
			}
		}
		k := 1 + rng.IntN(n)
		all := make([]candidate, n)
		for i, l := range logits {
			all[i] = candidate{uint32(i), float64(l)}
		}
		// The reference: every candidate sorted by before, the first k.
		want := slices.SortedFunc(slices.Values(all), before)[:k]
		got, ok := topKLogits(logits, k, nil)
		if !ok || !slices.Equal(got, want) {
			t.Fatalf("trial %d, k %d of %d: %v, the sorted candidates' %v", trial, k, n, got, want)
		}
		// topK over candidates in another order, −Inf among them.
		rng.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
		if n > 2 {
			all[0].v = math.Inf(-1)
			want = slices.SortedFunc(slices.Values(all), before)[:k]
		}
		if got := topK(all, k); !slices.Equal(got, want) {
			t.Fatalf("trial %d, k %d of %d: topK %v, the sorted candidates' %v", trial, k, n, got, want)
		}
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, at := range []int{0, 5} {
			logits := []float32{1, 2, 3, 4, 5, 6, 7}
			logits[at] = bad
			if _, ok := topKLogits(logits, 3, nil); ok {
				t.Errorf("%v at %d: taken", bad, at)
			}
		}
	}
}

// BenchmarkExpWeights times the exponentials of 32000 candidates (a
// temperature-only pick's weights) one by one (detmath.Exp, the
// reference), four lanes at a time and eight, in the same run: x_scalar
// is the scalar time over each kernel's.
func BenchmarkExpWeights(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]candidate, 32000)
	for i := range src {
		src[i] = candidate{uint32(i), rng.NormFloat64() * 3}
	}
	dst := make([]candidate, len(src))
	was4, was8 := useExp4, useExp8
	defer func() { useExp4, useExp8 = was4, was8 }()
	timed := func(four, eight bool) float64 {
		useExp4, useExp8 = four, eight
		const reps = 200
		start := time.Now()
		for range reps {
			expWeights(dst, src, 0.5, 0.8)
		}
		return float64(time.Since(start).Nanoseconds()) / reps
	}
	for _, k := range []struct {
		name        string
		four, eight bool
	}{{"scalar", false, false}, {"lanes4", true, false}, {"lanes8", true, true}} {
		if k.four && !was4 || k.eight && !was8 {
			continue
		}
		b.Run(k.name, func(b *testing.B) {
			var ref, got float64
			for b.Loop() {
				ref += timed(false, false)
				got += timed(k.four, k.eight)
			}
			b.ReportMetric(got/float64(b.N), "ns/pick")
			b.ReportMetric(ref/got, "x_scalar")
		})
	}
}
