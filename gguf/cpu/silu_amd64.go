//go:build !purego

package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// siluGLU8 sets dst[i] = silu(gate[i])·up[i] for the elements of whole
// chunks of eight, with silu's arithmetic bit for bit, until a chunk
// where expf leaves its ordinary branch (a NaN, or e^-x near or past the
// float32 range); it returns the chunks it did.
//
//go:noescape
func siluGLU8(dst, gate, up *float32, chunks int, k *[16]float64) int

// siluGLU16 is siluGLU8 on AVX-512, sixteen elements a chunk: the same
// operations in the same order, twice the lanes.
//
//go:noescape
func siluGLU16(dst, gate, up *float32, chunks int, k *[16]float64) int

// haveSiLU8: siluGLU8 needs AVX2 and FMA (its float64 fused multiply-adds);
// haveSiLU16, AVX-512 (F).
var (
	haveSiLU8  = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	haveSiLU16 = haveSiLU8 && cpu.X86.HasAVX512F
)

// useSiLU8 and useSiLU16 let tests hold the kernels to each other and to
// the Go one.
var useSiLU8, useSiLU16 = haveSiLU8, haveSiLU16

// siluConsts are expf's constants as siluGLU8 reads them: the float32
// constants widened to float64, then float32 ones (two to a slot).
var siluConsts = func() (k [16]float64) {
	for i, c := range []float32{expLog2e, expShift, expLn2Hi, expLn2Lo, expC5, expC4, expC3, expC2, expC1, 1} {
		k[i] = float64(c)
	}
	pair := func(lo, hi float32) float64 {
		return math.Float64frombits(uint64(math.Float32bits(lo)) | uint64(math.Float32bits(hi))<<32)
	}
	k[10] = pair(expShift, -126)
	k[11] = pair(127, 1)
	k[12] = math.Float64frombits(1 << 31) // the float32 sign bit
	return k
}()

// siluGLU sets dst[i] = silu(gate[i])·up[i].
func siluGLU(dst, gate, up []float32) {
	n := len(gate)
	dst, up = dst[:n], up[:n]
	for i := 0; i < n; {
		if useSiLU16 && n-i >= 16 {
			i += 16 * siluGLU16(&dst[i], &gate[i], &up[i], (n-i)/16, &siluConsts)
		}
		if useSiLU8 && n-i >= 8 {
			i += 8 * siluGLU8(&dst[i], &gate[i], &up[i], (n-i)/8, &siluConsts)
		}
		// A chunk the kernels stopped at, or the tail.
		for end := min(n, i+8); i < end; i++ {
			dst[i] = silu(gate[i]) * up[i]
		}
	}
}

// expSub8 sets dst[i] = expf(src[i]−m) for the elements of whole chunks
// of eight, with expf's arithmetic bit for bit, until a chunk where expf
// leaves its ordinary branch; it returns the chunks it did. dst may be
// src.
//
//go:noescape
func expSub8(dst, src *float32, chunks int, m float32, k *[16]float64) int

// expSub16 is expSub8 on AVX-512, sixteen elements a chunk.
//
//go:noescape
func expSub16(dst, src *float32, chunks int, m float32, k *[16]float64) int

// expSub sets dst[i] = expf(src[i]−m): a softmax's exponentials. dst may
// be src.
func expSub(dst, src []float32, m float32) {
	n := len(src)
	dst = dst[:n]
	for i := 0; i < n; {
		if useSiLU16 && n-i >= 16 {
			i += 16 * expSub16(&dst[i], &src[i], (n-i)/16, m, &siluConsts)
		}
		if useSiLU16 && n-i > 0 && n-i < 16 {
			// The tail, as a chunk padded with m (whose e^0 is in the
			// ordinary branch): a softmax's rows seldom come in sixteens.
			var pad [16]float32
			for k := copy(pad[:], src[i:]); k < len(pad); k++ {
				pad[k] = m
			}
			if expSub16(&pad[0], &pad[0], 1, m, &siluConsts) == 1 {
				i += copy(dst[i:], pad[:n-i])
			}
		}
		if useSiLU8 && n-i >= 8 {
			i += 8 * expSub8(&dst[i], &src[i], (n-i)/8, m, &siluConsts)
		}
		// A chunk the kernels stopped at, or the tail.
		for end := min(n, i+8); i < end; i++ {
			dst[i] = expf(src[i] - m)
		}
	}
}

// sumLanes16 adds x[16c+l] to part[l] in float64 for each of chunks
// chunks of sixteen, chunk by chunk (AVX2).
//
//go:noescape
func sumLanes16(x *float32, chunks int, part *[16]float64)

// sumLanes is sumLanesGo, by sumLanes16 where the machine has AVX2.
func sumLanes(x []float32, part *[16]float64) {
	if !useSiLU8 || len(x) < 16 {
		sumLanesGo(x, part)
		return
	}
	sumLanes16(&x[0], len(x)/16, part)
}

// scaleMax16 is scaleMaxGo on AVX-512, a masked last chunk (nothing past
// x[n-1] is touched).
//
//go:noescape
func scaleMax16(x *float32, n int, s float32) float32

// scaleMax is scaleMaxGo, by scaleMax16 where the machine has AVX-512.
func scaleMax(x []float32, s float32) float32 {
	if !useSiLU16 || len(x) == 0 {
		return scaleMaxGo(x, s)
	}
	return scaleMax16(&x[0], len(x), s)
}

// scaleBy is scaleByGo, by scaleMax16 (its maximum unused: one more
// instruction a chunk) where the machine has AVX-512.
func scaleBy(x []float32, s float32) {
	if !useSiLU16 || len(x) == 0 {
		scaleByGo(x, s)
		return
	}
	scaleMax16(&x[0], len(x), s)
}
