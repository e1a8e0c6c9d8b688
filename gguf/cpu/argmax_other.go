//go:build !amd64 || purego

package cpu

// useMax8: no SIMD argmax here.
var useMax8 = false

// argMax is the first largest element's index, NaN skipped, 0 where
// nothing is above −Inf.
func argMax(x []float32) int { return argMaxGo(x) }
