package detmath

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fma32Exact is a·b + c rounded once to float32 (nearest, ties to even),
// through math/big.
func fma32Exact(a, b, c float32) float32 {
	p := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	p.Mul(p, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	p.Add(p, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := p.Float32()
	return f
}

// TestFMA32 holds FMA32 to the exact sum rounded once: on sums that
// rounding to float64 first lands on a float32 tie (where converting the
// float64 sum gives the wrong neighbour), on true ties, and on random
// operands of every scale.
func TestFMA32(t *testing.T) {
	one := float32(1)
	ulp := float32(math.Ldexp(1, -23))
	a := float32(math.Ldexp(1+math.Ldexp(1, -23), -24)) // 2⁻²⁴(1 + 2⁻²³)
	b := 1 - ulp                                        // a·b = 2⁻²⁴(1 − 2⁻⁴⁶)
	cases := [][3]float32{
		{a, b, one + ulp},   // just below the tie between 1+2⁻²³ and 1+2⁻²²: its float64 sum is the tie
		{-a, b, -one - ulp}, // the same, negative
		{a, 1 + ulp, one + ulp},
		{float32(math.Ldexp(1, -24)), 1, one + ulp}, // a true tie: to even
		{float32(math.Ldexp(1, -24)), 1, one},
		{3, 5, -15}, {0, 7, float32(math.Copysign(0, -1))}, {1e30, 1e30, 1}, {float32(math.Inf(1)), 1, 2},
	}
	if naive := float32(float64(a)*float64(b) + float64(one+ulp)); naive == fma32Exact(a, b, one+ulp) {
		t.Fatal("the double-rounding case does not round twice through float64: it tests nothing")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		r := func() float32 {
			return float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
		}
		cases = append(cases, [3]float32{r(), r(), r()})
	}
	for _, c := range cases {
		got, want := FMA32(c[0], c[1], c[2]), fma32Exact(c[0], c[1], c[2])
		if math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
			t.Fatalf("FMA32(%g, %g, %g) = %g, want %g", c[0], c[1], c[2], got, want)
		}
	}
}
