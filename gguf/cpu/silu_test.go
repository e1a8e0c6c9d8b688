package cpu

import (
	"math"
	"math/rand/v2"
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

// TestSiLUGLUMatchesGo holds siluGLU's SIMD kernel, where this machine
// has one, to the Go kernel (silu(x)·up) bit for bit on siluValues, with
// lengths that leave a tail.
func TestSiLUGLUMatchesGo(t *testing.T) {
	if !haveSiLU8 {
		t.Skip("no SIMD SiLU on this machine (or built with purego)")
	}
	ordinary, all, dense, edges := siluValues()
	up := siluUps(len(all))
	for _, xs := range [][]float32{ordinary, dense, all, edges} {
		for _, n := range []int{len(xs), len(xs) - 1, 13, 8, 7, 1, 0} {
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
}

// BenchmarkSiLUGLU times one thread of SiLU-GLU over a prefill's
// feed-forward activations (64 tokens of 8192) and reports x_go: the
// rate over that of the Go kernel on the same data, in the same run.
func BenchmarkSiLUGLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 64 * 8192
	gate, up, dst := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range gate {
		gate[i], up[i] = float32(3*rng.NormFloat64()), float32(rng.NormFloat64())
	}
	goTime := math.Inf(1)
	func() {
		defer func(old bool) { useSiLU8 = old }(useSiLU8)
		useSiLU8 = false
		for range 3 {
			start := time.Now()
			siluGLU(dst, gate, up)
			goTime = min(goTime, time.Since(start).Seconds())
		}
	}()
	b.SetBytes(int64(4 * n))
	for b.Loop() {
		siluGLU(dst, gate, up)
	}
	per := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(goTime/per, "x_go")
}

// TestExpSubMatchesGo holds expSub (the softmax's exponentials, SIMD
// where this machine has it) to the Go expf(x−m) bit for bit on
// siluValues, with several m and lengths that leave a tail.
func TestExpSubMatchesGo(t *testing.T) {
	ordinary, all, dense, edges := siluValues()
	for _, m := range []float32{0, 3.5, -20, 87.5, float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, xs := range [][]float32{ordinary, dense, all, edges} {
			for _, n := range []int{len(xs), len(xs) - 1, 13, 8, 7, 1, 0} {
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
}
