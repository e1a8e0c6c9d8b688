package model

import "github.com/meshnode/meshnode/gguf/quant"

// Hidden rows between stages travel as f32 by default, which keeps a
// split model's logits the whole model's bit for bit; f16 halves the
// bytes per boundary at the cost of rounding every element to 11
// significant bits. These convert with quant's f16 rounding.

// AppendF16 appends src rounded to f16 to dst.
func AppendF16(dst []uint16, src []float32) []uint16 {
	for _, v := range src {
		dst = append(dst, quant.FP32ToFP16(v))
	}
	return dst
}

// F16ToF32 sets dst[i] to src[i] widened, and returns dst[:len(src)];
// dst must be at least as long as src.
func F16ToF32(dst []float32, src []uint16) []float32 {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = quant.FP16ToFP32(h)
	}
	return dst
}

// RoundF16 rounds x to the values f16 can hold, in place: what a stage
// receives when its hidden rows were sent as f16.
func RoundF16(x []float32) {
	for i, v := range x {
		x[i] = quant.FP16ToFP32(quant.FP32ToFP16(v))
	}
}
