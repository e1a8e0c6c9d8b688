package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSNormGroupsSameBits: rmsNorm's four groups at a time give each
// group the bits it gets alone (its squares summed in order), for one to
// nine groups, in place and not, so a window's rows and a row alone agree.
func TestRMSNormGroupsSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, g := range []int{1, 48, 192} {
		w := make([]float32, g)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		for groups := 1; groups <= 9; groups++ {
			x := make([]float32, groups*g)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i%5)-2))
			}
			want := make([]float32, len(x))
			for o := 0; o < len(x); o += g {
				var sum float64
				for _, v := range x[o : o+g] {
					sum += float64(v * v)
				}
				scale := 1 / float32(math.Sqrt(float64(float32(sum/float64(g))+1e-5)))
				for i, v := range x[o : o+g] {
					want[o+i] = float32(v*scale) * w[i]
				}
			}
			got := make([]float32, len(x))
			rmsNorm(got, x, w, 1e-5)
			rmsNorm(x, x, w, 1e-5) // in place
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("groups of %d, %d groups, [%d]: %v (in place %v), alone %v", g, groups, i, got[i], x[i], want[i])
				}
			}
		}
	}
}
