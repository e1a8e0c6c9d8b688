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

// det_exp is e^x in float64 as gguf/detmath.Exp computes it (math.Exp's
// amd64 FMA path: x reduced by k·ln2 in two fused steps, the Taylor series
// of e^(r/16) in fused multiply-adds, four squarings through (y+2)·y, and
// 2^k applied in two steps where the result is subnormal), operation for
// operation, so the same bits as the CPU's.
DEV double det_exp(double x) {
	const double log2e = 1.4426950408889634073599246810018920, ln2u = 0.69314718055966295651160180568695068359375,
		     ln2l = 0.28235290563031577122588448175013436025525412068e-12;
	if (x != x) {
		return x;
	}
	if (x > 7.09782712893384e+02) { // past float64's range (+Inf too)
		return bitcast<double>(0x7ff0000000000000ull);
	}
	if (x == bitcast<double>(0xfff0000000000000ull)) {
		return 0;
	}
	double kf = log2e * x;
	// Rounded to nearest even; outside int32's range, int32's least (the
	// x86 conversion's "indefinite"), which ends below as an underflow.
	double r = __builtin_rint(kf);
	i64 k = r >= -2147483648.0 && r <= 2147483647.0 ? (i64)r : -2147483648ll;
	kf = (double)k;
	x = __builtin_fma(-kf, ln2u, x);
	x = __builtin_fma(-kf, ln2l, x);
	x = x * 0.0625;
	double p = 2.4801587301587301587e-5;
	p = __builtin_fma(p, x, 1.9841269841269841270e-4);
	p = __builtin_fma(p, x, 1.3888888888888888889e-3);
	p = __builtin_fma(p, x, 8.3333333333333333333e-3);
	p = __builtin_fma(p, x, 4.1666666666666666667e-2);
	p = __builtin_fma(p, x, 1.6666666666666666667e-1);
	p = __builtin_fma(p, x, 0.5);
	p = __builtin_fma(p, x, 1);
	x = x * p;
	for (int i = 0; i < 3; i++) {
		x = x * (x + 2);
	}
	x = __builtin_fma(x, x + 2, 1);
	i64 b = k + 0x3ff;
	if (b >= 0x7ff) {
		return bitcast<double>(0x7ff0000000000000ull);
	}
	if (b > 0) {
		return x * bitcast<double>((u64)b << 52);
	}
	if (b < -52) {
		return 0;
	}
	x = x * bitcast<double>((u64)(b + 0x3fe) << 52);
	return x * bitcast<double>(1ull << 52);
}

// libm_expf is the C library's expf as ggml's swiglu_oai and its
// softmax's sinks call it, and as the CPU backend evaluates it (gguf/cpu
// libmExpf): det_exp rounded once to float32.
DEV float libm_expf(float xf) { return (float)det_exp((double)xf); }

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
