//go:build !amd64 || purego

package cpu

// No SIMD SiLU here: the Go kernel serves.
const haveSiLU8, haveSiLU16 = false, false

var useSiLU8, useSiLU16 = false, false

// siluGLU sets dst[i] = silu(gate[i])·up[i].
func siluGLU(dst, gate, up []float32) {
	for i, x := range gate {
		dst[i] = silu(x) * up[i]
	}
}

// expSub sets dst[i] = expf(src[i]−m): a softmax's exponentials. dst may
// be src.
func expSub(dst, src []float32, m float32) {
	for i, x := range src {
		dst[i] = expf(x - m)
	}
}

// sumLanes is sumLanesGo: no SIMD here.
func sumLanes(x []float32, part *[16]float64) { sumLanesGo(x, part) }

// scaleMax is scaleMaxGo: no SIMD here.
func scaleMax(x []float32, s float32) float32 { return scaleMaxGo(x, s) }

// scaleBy is scaleByGo: no SIMD here.
func scaleBy(x []float32, s float32) { scaleByGo(x, s) }
