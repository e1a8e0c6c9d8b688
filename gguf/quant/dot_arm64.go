//go:build !purego

package quant

import "golang.org/x/sys/cpu"

// The arm64 kernels use SDOT (the dot-product extension of Armv8.2, in
// every Apple M-series and Jetson Orin/Xavier core). FP16 conversion
// (FCVTL) is part of base Advanced SIMD.
var haveSIMD = cpu.ARM64.HasASIMDDP

// simdDots are the kernels with an assembly version on this architecture.
var simdDots = map[Type]dotFunc{
	F32:    dotF32SIMD,
	F16:    dotF16SIMD,
	BF16:   dotBF16SIMD,
	Q4_0:   dotQ4_0SIMD,
	Q4_1:   dotQ4_1SIMD,
	Q5_0:   dotQ5_0SIMD,
	Q5_1:   dotQ5_1SIMD,
	Q8_0:   dotQ8_0SIMD,
	IQ4_NL: dotIQ4_NLSIMD,
	IQ4_XS: dotIQ4_XSSIMD,
	Q2_K:   dotQ2_KSIMD,
	Q3_K:   dotQ3_KSIMD,
	Q4_K:   dotQ4_KSIMD,
	Q5_K:   dotQ5_KSIMD,
	Q6_K:   dotQ6_KSIMD,
}

// simdQuantizers are the quantisers with an assembly version here.
var simdQuantizers = map[Type]func(x []float32, y []byte){
	Q8_0: quantizeQ8_0SIMD,
	Q8_K: quantizeQ8_KSIMD,
}
