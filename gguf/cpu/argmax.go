package cpu

import "math"

var negInf = float32(math.Inf(-1))

// argMaxGo is argMax's Go loop: the first largest element's index, NaN
// skipped (it is never larger), 0 where nothing is above −Inf.
func argMaxGo(x []float32) int {
	best, at := negInf, 0
	for i, l := range x {
		if l > best {
			best, at = l, i
		}
	}
	return at
}
