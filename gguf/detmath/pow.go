package detmath

import "math"

// Pow is x^y by math.Pow's algorithm (x^y = x^yf · x^yi, the fraction by
// Exp(yf·Log x), the integer by repeated squaring with the powers of two
// kept apart) with this package's Exp and Log. The special cases (y = 0,
// ±0.5 or ±Inf, x = 0, 1 or ±Inf, NaN, and |y| ≥ 2^63) are math.Pow's,
// which computes them exactly.
func Pow(x, y float64) float64 {
	switch {
	case y == 0 || x == 1 || y == 1 || x != x || y != y || x == 0 ||
		math.IsInf(x, 0) || math.IsInf(y, 0) || y == 0.5 || y == -0.5:
		return math.Pow(x, y)
	}
	yi, yf := math.Modf(math.Abs(y))
	if yf != 0 && x < 0 {
		return math.NaN()
	}
	if yi >= 1<<63 {
		return math.Pow(x, y)
	}
	a1, ae := 1.0, 0
	if yf != 0 {
		if yf > 0.5 {
			yf--
			yi++
		}
		a1 = Exp(float64(yf * Log(x)))
	}
	x1, xe := math.Frexp(x)
	for i := int64(yi); i != 0; i >>= 1 {
		if xe < -1<<12 || 1<<12 < xe {
			ae += xe // past float64's exponents: Ldexp over- or underflows
			break
		}
		if i&1 == 1 {
			a1 *= x1
			ae += xe
		}
		x1 = float64(x1 * x1) // rounded: the doubling below would fuse it
		xe <<= 1
		if x1 < .5 {
			x1 += x1
			xe--
		}
	}
	if y < 0 {
		a1 = 1 / a1
		ae = -ae
	}
	return math.Ldexp(a1, ae)
}
