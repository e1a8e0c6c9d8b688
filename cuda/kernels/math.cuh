// math.cuh: expf, tanhf and the activation functions, as the CPU backend
// (gguf/cpu/exp.go, elementwise.go) evaluates them, operation for
// operation, so that a kernel's result is the CPU's bits.
#pragma once
#include "shim.cuh"

// fma32 is the CPU's fma: a·b + c rounded once to float64 (a float32
// product is exact there), then to float32.
DEV float fma32(float a, float b, float c) { return (float)__builtin_fma((double)a, (double)b, (double)c); }

// mesh_expf is ggml's vectorised expf (gguf/cpu expf): at most 1.5 ulp
// from e^x, and the same bits as the CPU.
DEV float mesh_expf(float x) {
	const float shift = 0x1.8p23f;
	float z = fma32(x, 0x1.715476p+0f, shift);
	float n = z - shift;
	float b = fma32(-n, 0x1.7f7d1cp-20f, fma32(-n, 0x1.62e4p-1f, x));
	float u = b * b;
	float j = fma32(fma32(fma32(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fma32(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
			fma32(0x1.ffffecp-1f, b, 1.0f));
	if (x != x) {
		return x;
	}
	if (n > 130) {
		return bitcast<float>(0x7f800000u);
	}
	if (n < -152) {
		return 0;
	}
	if (n >= -126 && n <= 127) {
		return j * bitcast<float>((u32)((i32)n + 127) << 23);
	}
	// Near overflow or in the subnormals: scale in float64, where 2^n is
	// exact, and round once.
	return (float)((double)j * bitcast<double>((u64)((i64)n + 1023) << 52));
}

// libm_expf is the C library's expf as ggml's swiglu_oai and its
// softmax's sinks call it, and as the CPU backend evaluates it (gguf/cpu
// libmExpf: the float64 exponential rounded to float32): e^x in float64 by
// Go's math.exp (FreeBSD's, under 1 ulp), rounded once. It agrees with a
// correctly rounded float64 exponential wherever e^x is not within 2^-29
// of a float32 rounding boundary. Only for x where the float32 result is
// finite and not 0, plus the edges of that range.
DEV float libm_expf(float xf) {
	const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10, log2e = 1.44269504088896338700e+00;
	const double p1 = 1.66666666666666657415e-01, p2 = -2.77777777770155933842e-03, p3 = 6.61375632143793436117e-05,
		     p4 = -1.65339022054652515390e-06, p5 = 4.13813679705723846039e-08;
	double x = (double)xf;
	if (x != x) {
		return xf;
	}
	if (x > 89.0) { // e^x > FLT_MAX: +Inf as float32
		return bitcast<float>(0x7f800000u);
	}
	if (x < -110.0) { // e^x < 2^-150: 0 as float32
		return 0.0f;
	}
	if (x > -0x1p-28 && x < 0x1p-28) {
		return (float)(1.0 + x);
	}
	i64 k = x < 0 ? (i64)(log2e * x - 0.5) : (i64)(log2e * x + 0.5);
	double hi = x - (double)k * ln2_hi, lo = (double)k * ln2_lo;
	double r = hi - lo, t = r * r;
	double c = r - t * (p1 + t * (p2 + t * (p3 + t * (p4 + t * p5))));
	double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
	// |k| <= 160 here: 2^k is a normal float64, the product exact.
	return (float)(y * bitcast<double>((u64)(k + 1023) << 52));
}

// go_min is Go's min on float32: NaN if either is NaN, -0 under +0.
DEV float go_min(float a, float b) {
	if (a != a || b != b) {
		return a != a ? a : b;
	}
	if (a == b) {
		return bitcast<float>(bitcast<u32>(a) | bitcast<u32>(b));
	}
	return a < b ? a : b;
}

DEV float copysign32(float mag, float sgn) {
	return bitcast<float>((bitcast<u32>(mag) & 0x7fffffffu) | (bitcast<u32>(sgn) & 0x80000000u));
}

// mesh_tanhf is Cephes' tanhf, as gguf/cpu tanhf.
DEV float mesh_tanhf(float x) {
	float a = __builtin_fabsf(x);
	if (a > 10) {
		return copysign32(1.0f, x);
	}
	if (a >= 0.625f) {
		float t = 1.0f - 2.0f / (mesh_expf(2.0f * a) + 1.0f);
		return copysign32(t, x);
	}
	float z = x * x;
	float p = ((((-5.70498872745e-3f * z) + 2.06390887954e-2f) * z) - 5.37397155531e-2f) * z + 1.33314422036e-1f;
	p = ((p * z) - 3.33332819422e-1f) * z;
	return (p * x) + x;
}

// silu is x·σ(x), as ggml_v_silu.
DEV float silu(float x) { return x / (1.0f + mesh_expf(-x)); }

// gelu_tanh is GELU's tanh approximation, as ggml_gelu_f32.
DEV float gelu_tanh(float x) {
	const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
	float inner = (sqrt_2_over_pi * x) * (1.0f + ((coef_a * x) * x));
	return (0.5f * x) * (1.0f + mesh_tanhf(inner));
}

// gelu_table is ggml_table_gelu_f16's entry for x: GELU of x rounded to a
// half, rounded to a half (ggml's GeGLU reads that table).
DEV float gelu_table(float x) { return round_half(gelu_tanh(round_half(x))); }
