//go:build !purego

package sample

import "golang.org/x/sys/cpu"

// expCands4 sets dst[i].v = exp((src[i].v−top)/t) for whole chunks of
// four of the first n candidates, to the bit, until a chunk where exp
// leaves its ordinary path; it returns the candidates it did
// (exp_amd64.s). dst may be src.
//
//go:noescape
func expCands4(dst, src *candidate, n int, top, t float64) int

// useExp4: the kernel needs FMA and, for its integer steps, AVX2.
var useExp4 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// expWeights sets dst[i].v to e^((src[i].v−top)/t), as exp computes it,
// for each of src (dst as long; it may be src): four at a time where the
// CPU can, the rest one by one.
func expWeights(dst, src []candidate, top, t float64) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); {
		if useExp4 && len(src)-i >= 4 {
			i += expCands4(&dst[i], &src[i], len(src)-i, top, t)
		}
		// A chunk the kernel left (or the tail): one at a time.
		for end := min(i+4, len(src)); i < end; i++ {
			dst[i].v = exp((src[i].v - top) / t)
		}
	}
}
