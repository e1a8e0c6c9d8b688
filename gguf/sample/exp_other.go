//go:build !amd64 || purego

package sample

// useExp4: no SIMD exponentials here.
var useExp4 = false

// expWeights sets dst[i].v to e^((src[i].v−top)/t) for each of src (dst
// as long; it may be src).
func expWeights(dst, src []candidate, top, t float64) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i].v = exp((x.v - top) / t)
	}
}
