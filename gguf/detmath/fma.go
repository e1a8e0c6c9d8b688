package detmath

import "math"

// FMA32 is a·b + c rounded once to float32, as a float32 fused
// multiply-add instruction computes it (x86's vfmadd231ss, arm64's fmadd,
// CUDA's fma.rn.f32), on every platform. The product is exact in float64,
// but the sum's rounding to float64 can land on a float32 tie that the
// exact sum is not on, and rounding that tie to even would round twice:
// there the sum's exact error (TwoSum) says which way the exact sum lies.
// Results in float32's subnormal range may still be rounded twice.
func FMA32(a, b, c float32) float32 {
	p, cc := float64(float64(a)*float64(b)), float64(c) // exact; the conversion keeps Go from fusing it into the sums below
	s := p + cc
	const low = 1<<29 - 1 // the float64 fraction bits float32 lacks
	bits := math.Float64bits(s)
	if bits&low != 1<<28 || math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s) // not a float32 tie: one rounding in effect
	}
	bv := s - p
	e := (p - (s - bv)) + (cc - bv) // s + e = a·b + c exactly
	switch {
	case e == 0:
		return float32(s) // a true tie: to even
	case (e > 0) == (s > 0):
		return float32(math.Float64frombits(bits&^low + 1<<29)) // beyond the tie, away from zero
	}
	return float32(math.Float64frombits(bits &^ low)) // short of it, toward zero
}
