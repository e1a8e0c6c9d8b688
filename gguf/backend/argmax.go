package backend

import "math"

// ArgMax is the index of x's first largest element, NaN skipped (it is
// never larger), 0 where nothing is above −Inf: the greedy pick, the
// reference a backend's in-place argmax (model.ArgMaxer) matches.
func ArgMax(x []float32) int {
	best, at := float32(math.Inf(-1)), 0
	for i, l := range x {
		if l > best {
			best, at = l, i
		}
	}
	return at
}
