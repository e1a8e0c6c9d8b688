package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
)

// TestArgMaxMatchesGo holds argMax (the AVX2 kernels where the machine
// has them) to backend.ArgMax, the Go loop, on rows of every length up to 300 and a
// vocabulary's, with ties (the first wins), NaN (never wins), ±0, ±Inf
// and rows of nothing above −Inf, the largest value placed anywhere.
func TestArgMaxMatchesGo(t *testing.T) {
	if !useMax8 {
		t.Log("no AVX2 argmax on this machine (or built with purego): the Go loop serves both")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	specials := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1))}
	lengths := []int{32000, 32768, 151936}
	for n := 1; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	for trial, n := range lengths {
		for variant := range 6 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			switch variant {
			case 1: // a tie for the largest, both anywhere
				a, b := rng.IntN(n), rng.IntN(n)
				x[a], x[b] = 9, 9
			case 2: // specials sprinkled
				for range 1 + n/8 {
					x[rng.IntN(n)] = specials[rng.IntN(len(specials))]
				}
			case 3: // nothing above −Inf
				for i := range x {
					x[i] = [2]float32{nan, -inf}[rng.IntN(2)]
				}
			case 4: // all zero of either sign
				for i := range x {
					x[i] = specials[3+rng.IntN(2)]
				}
			case 5: // the largest last
				x[n-1] = 50
			}
			if got, want := argMax(x), backend.ArgMax(x); got != want {
				t.Fatalf("length %d (trial %d), variant %d: argMax %d (%v), backend.ArgMax %d (%v)", n, trial, variant, got, x[got], want, x[want])
			}
		}
	}
}

// BenchmarkArgMax times argMax against backend.ArgMax, the Go loop, over a 32000-token
// vocabulary's logits, the largest in the middle.
func BenchmarkArgMax(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, 32000)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	x[len(x)/2] = 40
	var sink int
	b.Run("argMax", func(b *testing.B) {
		for range b.N {
			sink += argMax(x)
		}
	})
	b.Run("go", func(b *testing.B) {
		for range b.N {
			sink += backend.ArgMax(x)
		}
	})
	_ = sink
}
