package cpu

import "math"

// expf is e^x in float32, by ggml's vectorised expf (ggml_v_expf, from
// ARM's optimized-routines): range reduction to x = n·ln2 + b, a degree-5
// polynomial in b, and a scale by 2^n; at most 1.5 ulp from e^x. It is
// what llama.cpp's SiLU and softmax use on x86 and ARM, and, unlike
// math.Exp, whose assembly differs between amd64 and arm64, it gives the
// same bits on every platform: a receipt's serve replays anywhere.
func expf(x float32) float32 {
	// fma rounds once to float64 (a float32 product is exact there), then
	// to float32.
	fma := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
	z := fma(x, expLog2e, expShift)
	n := z - expShift
	b := fma(-n, expLn2Lo, fma(-n, expLn2Hi, x))
	u := b * b
	j := fma(fma(fma(expC5, b, expC4), u, fma(expC3, b, expC2)), u, fma(expC1, b, 1))
	switch {
	case x != x: // NaN
		return x
	case n > 130:
		return float32(math.Inf(1))
	case n < -152:
		return 0
	case n >= -126 && n <= 127:
		return j * math.Float32frombits(uint32(int32(n)+127)<<23)
	}
	// Near overflow or in the subnormals: scale in float64, where 2^n is
	// exact, and round once.
	return float32(float64(j) * math.Ldexp(1, int(n)))
}

// expf's constants (float32, as its fma takes them): log2(e), the shift
// whose addition rounds to an integer, ln 2 in two parts, and the
// polynomial's coefficients.
const (
	expLog2e = 0x1.715476p+0
	expShift = 0x1.8p23
	expLn2Hi = 0x1.62e4p-1
	expLn2Lo = 0x1.7f7d1cp-20
	expC5    = 0x1.0e4020p-7
	expC4    = 0x1.573e2ep-5
	expC3    = 0x1.555e66p-3
	expC2    = 0x1.fffdb6p-2
	expC1    = 0x1.ffffecp-1
)

// tanhf is tanh in float32, as Cephes' tanhf computes it: an odd
// polynomial below 0.625, where 1 − 2/(e^{2x}+1) would cancel, that
// formula (through expf) above, ±1 beyond 10. Like expf, the same bits on
// every platform.
func tanhf(x float32) float32 {
	a := float32(math.Abs(float64(x)))
	switch {
	case a > 10:
		return float32(math.Copysign(1, float64(x)))
	case a >= 0.625:
		t := 1 - 2/(expf(2*a)+1)
		return float32(math.Copysign(float64(t), float64(x)))
	}
	z := x * x
	p := float32(float32(float32(float32(float32(-5.70498872745e-3*z)+2.06390887954e-2)*z)-5.37397155531e-2)*z) + 1.33314422036e-1
	p = float32(float32(p*z)-3.33332819422e-1) * z
	return float32(float32(p*x) + x)
}
