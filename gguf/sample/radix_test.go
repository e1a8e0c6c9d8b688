package sample

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortLikeliest: the radix sort gives beforeNumber's order exactly,
// on both sides of radixMin: float32 logits and float64 ones (penalised),
// ties (a quantised model's logits tie often), −0 beside +0, ±Inf, a
// constant slice, candidates in any order; and it leaves the scratch
// reusable.
func TestSortLikeliest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var buf []keyed
	gen := map[string]func(i int) float64{
		"float32":  func(int) float64 { return float64(float32(rng.NormFloat64() * 3)) },
		"float64":  func(int) float64 { return rng.NormFloat64() * 3 },
		"ties":     func(int) float64 { return float64(rng.IntN(7)) - 3 },
		"zeros":    func(i int) float64 { return []float64{0, math.Copysign(0, -1), 1, -1}[i%4] },
		"infinite": func(i int) float64 { return []float64{math.Inf(-1), math.Inf(1), 0.5, math.Inf(-1), -2}[i%5] },
		"constant": func(int) float64 { return 1.25 },
		"wide":     func(int) float64 { return math.Ldexp(rng.Float64()-0.5, rng.IntN(400)-200) },
	}
	for name, g := range gen {
		for _, n := range []int{1, 7, radixMin - 1, radixMin, radixMin + 1, 1000, 33000} {
			c := make([]candidate, n)
			for i := range c {
				c[i] = candidate{uint32(i), g(i)}
			}
			rng.Shuffle(n, func(i, j int) { c[i], c[j] = c[j], c[i] })
			want := slices.Clone(c)
			slices.SortFunc(want, beforeNumber)
			buf = sortLikeliest(c, buf)
			for i := range c {
				if c[i].id != want[i].id || math.Float64bits(c[i].v) != math.Float64bits(want[i].v) {
					t.Fatalf("%s, %d candidates: at %d, %+v, want %+v", name, n, i, c[i], want[i])
				}
			}
		}
	}
}

// BenchmarkSortLikeliest: the radix sort against the comparison sort it
// replaces, in the same run, on a flat nucleus's candidates (float32
// logits, in the order top-p's partitions leave them).
func BenchmarkSortLikeliest(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := make([]candidate, 25000)
	for i := range src {
		src[i] = candidate{uint32(rng.IntN(32000)), float64(float32(rng.NormFloat64()))}
	}
	c := make([]candidate, len(src))
	var buf []keyed
	var ns [2]float64
	for i, sort := range []func(){
		func() { slices.SortFunc(c, beforeNumber) },
		func() { buf = sortLikeliest(c, buf) },
	} {
		name := []string{"comparison", "radix"}[i]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				copy(c, src)
				sort()
			}
			ns[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if i == 1 && ns[1] > 0 {
				b.ReportMetric(ns[0]/ns[1], "x_comparison")
			}
		})
	}
}

// FuzzSortLikeliest: over arbitrary logits (the bytes read as float64s,
// repeated with their ids shuffled until the radix passes run), the radix
// sort gives beforeNumber's order.
func FuzzSortLikeliest(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x80}, uint64(1))    // 1, −0
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x7f, 0, 0, 0, 0, 0, 0, 0xf0, 0xff}, uint64(2)) // +Inf, −Inf
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		var vals []float64
		for len(b) >= 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(b))
			if v == v {
				vals = append(vals, v)
			}
			b = b[8:]
		}
		if len(vals) == 0 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		c := make([]candidate, radixMin+int(seed%512))
		for i := range c {
			c[i] = candidate{uint32(rng.IntN(1 << 20)), vals[i%len(vals)]}
		}
		want := slices.Clone(c)
		slices.SortFunc(want, beforeNumber)
		sortLikeliest(c, nil)
		for i := range c {
			if c[i].id != want[i].id || math.Float64bits(c[i].v) != math.Float64bits(want[i].v) {
				t.Fatalf("at %d: %+v, want %+v", i, c[i], want[i])
			}
		}
	})
}
