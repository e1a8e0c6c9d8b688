package detmath

import "math"

// Exp is e^x as math.Exp computes it on amd64 with FMA (src/math/
// exp_amd64.s: Shibata's method, from SLEEF): x reduced by k·ln2 in two
// fused steps, the Taylor series of e^(r/16) in fused multiply-adds, four
// squarings through (y+2)·y, and the scaling by 2^k, in two steps where
// the result is subnormal. math.Exp's arm64 assembly is another
// algorithm, and its amd64 path without FMA rounds otherwise; math.FMA
// rounds once wherever it runs, and the products here are kept from
// fusing by their conversions, so Exp is the same bits everywhere.
func Exp(x float64) float64 {
	const (
		log2e = 1.4426950408889634073599246810018920
		ln2u  = 0.69314718055966295651160180568695068359375
		ln2l  = 0.28235290563031577122588448175013436025525412068e-12
		over  = 7.09782712893384e+02
	)
	switch {
	case x != x:
		return x
	case x > over: // past float64's range (+Inf too)
		return math.Inf(1)
	case math.IsInf(x, -1):
		return 0
	}
	kf := float64(log2e * x)
	// CVTSD2SL: round to nearest even; out of int32's range, its
	// "indefinite" value, which ends below as an underflow.
	k := int64(math.MinInt32)
	if r := math.RoundToEven(kf); r >= math.MinInt32 && r <= math.MaxInt32 {
		k = int64(r)
	}
	kf = float64(k)
	x = math.FMA(-kf, ln2u, x)
	x = math.FMA(-kf, ln2l, x)
	x = float64(x * 0.0625)
	p := 2.4801587301587301587e-5
	p = math.FMA(p, x, 1.9841269841269841270e-4)
	p = math.FMA(p, x, 1.3888888888888888889e-3)
	p = math.FMA(p, x, 8.3333333333333333333e-3)
	p = math.FMA(p, x, 4.1666666666666666667e-2)
	p = math.FMA(p, x, 1.6666666666666666667e-1)
	p = math.FMA(p, x, 0.5)
	p = math.FMA(p, x, 1)
	x = float64(x * p)
	for range 3 {
		x = float64(x * float64(x+2))
	}
	x = math.FMA(x, float64(x+2), 1)
	// ldexp, as the assembly does it.
	b := k + 0x3ff
	switch {
	case b >= 0x7ff:
		return math.Inf(1)
	case b > 0:
		return float64(x * math.Float64frombits(uint64(b)<<52))
	case b < -52:
		return 0
	}
	x = float64(x * math.Float64frombits(uint64(b+0x3fe)<<52))
	return float64(x * math.Float64frombits(1<<52))
}
