package detmath

import "math"

// Log is the natural logarithm by fdlibm's algorithm (e_log.c, the one
// Go's math/log.go ports): x = 2^k·(1+f) with 1+f in [√2/2, √2), then
// log(1+f) = f − s·(f − R) with s = f/(2+f) and R a degree-14 odd
// polynomial in s, and k·ln2 added in two parts. Within 1 ulp of the
// true value; every product rounded on its own (math.Log is assembly on
// amd64 and fused Go on arm64, so their last bits differ).
func Log(x float64) float64 {
	const (
		ln2Hi = 6.93147180369123816490e-01 // 0x3fe62e42fee00000
		ln2Lo = 1.90821492927058770002e-10 // 0x3dea39ef35793c76
		l1    = 6.666666666666735130e-01   // 0x3FE5555555555593
		l2    = 3.999999999940941908e-01   // 0x3FD999999997FA04
		l3    = 2.857142874366239149e-01   // 0x3FD2492494229359
		l4    = 2.222219843214978396e-01   // 0x3FCC71C51D8E78AF
		l5    = 1.818357216161805012e-01   // 0x3FC7466496CB03DE
		l6    = 1.531383769920937332e-01   // 0x3FC39A09D078C69F
		l7    = 1.479819860511658591e-01   // 0x3FC2F112DF3E5244
	)
	switch {
	case x != x || math.IsInf(x, 1):
		return x
	case x < 0:
		return math.NaN()
	case x == 0:
		return math.Inf(-1)
	}
	f1, ki := math.Frexp(x) // exact
	if f1 < math.Sqrt2/2 {
		f1 *= 2 // exact
		ki--
	}
	f := f1 - 1 // exact (Sterbenz)
	k := float64(ki)
	s := f / (2 + f)
	s2 := float64(s * s)
	s4 := float64(s2 * s2)
	t1 := float64(s2 * float64(l1+float64(s4*float64(l3+float64(s4*float64(l5+float64(s4*l7)))))))
	t2 := float64(s4 * float64(l2+float64(s4*float64(l4+float64(s4*l6)))))
	R := t1 + t2
	hfsq := float64(float64(0.5*f) * f)
	return float64(k*ln2Hi) - ((hfsq - (float64(s*(hfsq+R)) + float64(k*ln2Lo))) - f)
}
