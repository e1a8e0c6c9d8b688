package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// siluValues are the inputs TestSiLUGLUMatchesGo tries: a stride
// through every float32 bit pattern (ordinary: those where expf(-x) takes
// its ordinary branch, which the SIMD kernel does itself; all: every one,
// mixed, so that it hands chunks back), a dense sweep of the range
// activations take, and the edges of expf's branches.
func siluValues() (ordinary, all, dense, edges []float32) {
	for b := uint64(0); b < 1<<32; b += 4099 {
		x := math.Float32frombits(uint32(b))
		all = append(all, x)
		if math.Abs(float64(x)) < 87 {
			ordinary = append(ordinary, x)
		}
	}
	for x := float32(-30); x < 30; x += 0.00097 {
		dense = append(dense, x)
	}
	// expf(-x) changes branch near |x| = 87.3 (2^±126), 88.7, 89.9 (n =
	// 130) and 103.3 (n = -152).
	for _, edge := range []float32{87.3, 88.0, 88.7, 89.9, 90.1, 103.3, 104.9} {
		for _, s := range []float32{1, -1} {
			for d := float32(-0.5); d < 0.5; d += 0.0137 {
				edges = append(edges, s*(edge+d))
			}
		}
	}
	edges = append(edges, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	rng.Shuffle(len(edges), func(i, j int) { edges[i], edges[j] = edges[j], edges[i] })
	return ordinary, all, dense, edges
}

// siluUps are the up values for siluValues: normal, as many as all.
func siluUps(n int) []float32 {
	rng := rand.New(rand.NewPCG(3, 4))
	up := make([]float32, n)
	for i := range up {
		up[i] = float32(rng.NormFloat64())
	}
	return up
}

// simdSets runs f under each set of SIMD kernels this machine has: the
// AVX-512 kernel with the AVX2 one after it (as it runs), AVX2 alone, and
// AVX-512 alone (its chunk stops and tails go straight to Go).
func simdSets(t *testing.T, f func(t *testing.T)) {
	defer func(w8, w16 bool) { useSiLU8, useSiLU16 = w8, w16 }(useSiLU8, useSiLU16)
	ran := false
	for _, set := range []struct {
		name    string
		have    bool
		w8, w16 bool
	}{
		{"avx512+avx2", haveSiLU16, true, true},
		{"avx2", haveSiLU8, true, false},
		{"avx512", haveSiLU16, false, true},
	} {
		if !set.have {
			continue
		}
		ran = true
		useSiLU8, useSiLU16 = set.w8, set.w16
		t.Run(set.name, f)
	}
	if !ran {
		t.Skip("no SIMD SiLU on this machine (or built with purego)")
	}
}

// simdLengths are lengths for siluValues' slices that leave every kind
// of tail after chunks of sixteen and eight.
func simdLengths(n int) []int { return []int{n, n - 1, 47, 31, 16, 13, 8, 7, 1, 0} }

// TestSiLUGLUMatchesGo holds siluGLU's SIMD kernels, where this machine
// has them, to the Go kernel (silu(x)·up) bit for bit on siluValues, with
// lengths that leave a tail.
func TestSiLUGLUMatchesGo(t *testing.T) {
	ordinary, all, dense, edges := siluValues()
	up := siluUps(len(all))
	simdSets(t, func(t *testing.T) {
		for _, xs := range [][]float32{ordinary, dense, all, edges} {
			for _, n := range simdLengths(len(xs)) {
				got := make([]float32, n)
				siluGLU(got, xs[:n], up[:n])
				for i := range n {
					want := silu(xs[i]) * up[i]
					if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
						t.Fatalf("n=%d: silu(%g)·%g = %g (%#08x), Go %g (%#08x)", n, xs[i], up[i],
							got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
					}
				}
			}
		}
	})
}

// BenchmarkSiLUGLU times one thread of SiLU-GLU over a prefill's
// feed-forward activations (64 tokens of 8192) with the widest kernels
// this machine has, and reports x_go and x_avx2: the Go kernel's time and
// the AVX2 kernel's (where the AVX-512 one runs) over that, on the same
// data in the same run.
func BenchmarkSiLUGLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 64 * 8192
	gate, up, dst := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range gate {
		gate[i], up[i] = float32(3*rng.NormFloat64()), float32(rng.NormFloat64())
	}
	timeWith := func(w8, w16 bool) float64 {
		defer func(a, c bool) { useSiLU8, useSiLU16 = a, c }(useSiLU8, useSiLU16)
		useSiLU8, useSiLU16 = w8, w16
		best := math.Inf(1)
		for range 3 {
			start := time.Now()
			siluGLU(dst, gate, up)
			best = min(best, time.Since(start).Seconds())
		}
		return best
	}
	goTime, avx2Time := timeWith(false, false), timeWith(useSiLU8, false)
	b.SetBytes(int64(4 * n))
	for b.Loop() {
		siluGLU(dst, gate, up)
	}
	per := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(goTime/per, "x_go")
	if useSiLU16 {
		b.ReportMetric(avx2Time/per, "x_avx2")
	}
}

// TestExpSubMatchesGo holds expSub (the softmax's exponentials, SIMD
// where this machine has it) to the Go expf(x−m) bit for bit on
// siluValues, with several m and lengths that leave a tail.
func TestExpSubMatchesGo(t *testing.T) {
	ordinary, all, dense, edges := siluValues()
	simdSets(t, func(t *testing.T) {
		for _, m := range []float32{0, 3.5, -20, 87.5, float32(math.Inf(1)), float32(math.Inf(-1))} {
			for _, xs := range [][]float32{ordinary, dense, all, edges} {
				for _, n := range simdLengths(len(xs)) {
					got := make([]float32, n)
					expSub(got, xs[:n], m)
					for i := range n {
						want := expf(xs[i] - m)
						if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
							t.Fatalf("m=%g, n=%d: expf(%g−m) = %g (%#08x), Go %g (%#08x)", m, n, xs[i],
								got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
						}
					}
				}
			}
		}
	})
}

// TestSoftmaxSum holds softmaxSum to its order written out, sixteen
// running sums then the tail, bit for bit, with the SIMD lanes and
// without, on exponentials whose sum rounds (spanning 2^-60 to 1, so the
// order shows in the last bits), at lengths that leave every tail.
func TestSoftmaxSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 1000)
	for i := range x {
		x[i] = expf(float32(-60 * rng.Float64()))
	}
	want := func(x []float32) float64 {
		var s [16]float64
		n := len(x) / 16 * 16
		for i, v := range x[:n] {
			s[i%16] += float64(v)
		}
		sum := ((s[0] + s[4]) + (s[8] + s[12])) + ((s[1] + s[5]) + (s[9] + s[13])) +
			(((s[2] + s[6]) + (s[10] + s[14])) + ((s[3] + s[7]) + (s[11] + s[15])))
		for _, v := range x[n:] {
			sum += float64(v)
		}
		return sum
	}
	orders := 0
	defer func(w bool) { useSiLU8 = w }(useSiLU8)
	for _, simd := range []bool{haveSiLU8, false} {
		useSiLU8 = simd
		for _, n := range []int{0, 1, 15, 16, 17, 100, 511, 1000} {
			got, w := softmaxSum(x[:n]), want(x[:n])
			if math.Float64bits(got) != math.Float64bits(w) {
				t.Fatalf("simd %v, %d values: %v (%#x), want %v (%#x)", simd, n, got, math.Float64bits(got), w, math.Float64bits(w))
			}
			var seq float64
			for _, v := range x[:n] {
				seq += float64(v)
			}
			if seq != w {
				orders++
			}
		}
	}
	if orders == 0 {
		t.Error("no length's sum depends on the order: the test cannot tell orders apart")
	}
}

// TestScaleMatchesGo holds the softmax's scaling (scaleMax, scaleBy; SIMD
// where the machine has it) to the Go loops bit for bit, the maximum
// skipping NaNs as Go's does, at every length to 40 and at 1000, with
// nothing past the slice touched (the SIMD tail is masked).
func TestScaleMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	lengths := []int{1000}
	for n := range 41 {
		lengths = append(lengths, n)
	}
	simdSets(t, func(t *testing.T) {
		for _, n := range lengths {
			x := make([]float32, n+16)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 10)
			}
			if n > 3 {
				x[n/2], x[n-2] = float32(math.NaN()), float32(math.NaN())
				x[1] = float32(math.Inf(-1))
			}
			want := slices.Clone(x)
			got := slices.Clone(x)
			s := float32(0.1443)
			wm := scaleMaxGo(want[:n], s)
			gm := scaleMax(got[:n], s)
			if math.Float32bits(gm) != math.Float32bits(wm) {
				t.Fatalf("n=%d: max %v, Go %v", n, gm, wm)
			}
			scaleByGo(want[:n], 1/s)
			scaleBy(got[:n], 1/s)
			for i := range x {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d: [%d] %v, Go %v", n, i, got[i], want[i])
				}
			}
		}
	})
}
