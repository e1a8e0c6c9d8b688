package quant

import (
	"math"
	"sync"
)

// FP16ToFP32 widens an IEEE half to float32 (exact).
func FP16ToFP32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f: // inf, nan (payload kept, as ggml's conversion keeps it)
		if mant != 0 {
			mant |= 0x200 // ggml's path goes through a float multiply, which quiets
		}
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: mant × 2^-24, exact in float32.
		f := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// FP32ToFP16 narrows to an IEEE half, rounding to nearest even, as ggml's
// GGML_FP32_TO_FP16 does (NaN becomes the quiet NaN 0x7e00 with f's sign).
func FP32ToFP16(f float32) uint16 {
	// ggml's branch-free method: scaling by 2^112 then 2^-110 makes the
	// float adder do the rounding at the half's precision.
	const scaleToInf = 0x1.0p+112
	const scaleToZero = 0x1.0p-110
	base := float32(float32(abs32(f)*scaleToInf) * scaleToZero)
	w := math.Float32bits(f)
	shl1 := w + w
	sign := w & 0x80000000
	bias := shl1 & 0xff000000
	if bias < 0x71000000 {
		bias = 0x71000000
	}
	base = math.Float32frombits((bias>>1)+0x07800000) + base
	bits := math.Float32bits(base)
	expBits := (bits >> 13) & 0x00007c00
	mantBits := bits & 0x00000fff
	nonsign := expBits + mantBits
	if shl1 > 0xff000000 {
		nonsign = 0x7e00
	}
	return uint16(sign>>16) | uint16(nonsign)
}

// BF16ToFP32 widens a bfloat16 to float32 (exact).
func BF16ToFP32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FP32ToBF16 narrows to bfloat16, rounding to nearest even and quieting NaN,
// as ggml_compute_fp32_to_bf16 does.
func FP32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + ((u >> 16) & 1))) >> 16)
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// le16 reads a little-endian uint16 at b[0:2].
func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

// half reads a little-endian fp16 at b[0:2] as float32.
func half(b []byte) float32 { return FP16ToFP32(le16(b)) }

func putLE16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }

// fp16Table maps every half to its float32: one load beats the branches of
// FP16ToFP32 in the F16 kernels. Built on first use (256 KiB).
var fp16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = FP16ToFP32(uint16(h))
	}
	return &t
})
