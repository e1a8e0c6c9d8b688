package sample

import "github.com/meshnode/meshnode/gguf/detmath"

// expWeights sets dst[i].v to e^((src[i].v−top)/t), as detmath.Exp computes it,
// for each of src (dst as long; it may be src): eight or four at a time
// where the CPU can (expCands8, expCands4), the rest one by one.
func expWeights(dst, src []candidate, top, t float64) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); {
		if useExp8 && len(src)-i >= 8 {
			i += expCands8(&dst[i], &src[i], len(src)-i, top, t)
		}
		if useExp4 && len(src)-i >= 4 {
			i += expCands4(&dst[i], &src[i], len(src)-i, top, t)
		}
		// A chunk the kernel left (or the tail): one at a time.
		for end := min(i+4, len(src)); i < end; i++ {
			dst[i].v = detmath.Exp((src[i].v - top) / t)
		}
	}
}
