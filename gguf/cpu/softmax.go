package cpu

import "math"

// softmaxSum is the sum of a softmax's exponentials in float64, added in
// an order fixed for every platform, so that attention's weights are the
// same bits wherever a serve is replayed: sixteen running sums, element
// i into sum i mod 16, over the whole chunks of sixteen; those added
// pairwise, (s_l + s_{l+4}) + (s_{l+8} + s_{l+12}) for l < 4 and those
// four likewise; then the tail in order. Sixteen running sums rather than
// one because one waits on each addition's latency: it took as long as
// the exponentials themselves.
func softmaxSum(x []float32) float64 {
	var p [16]float64
	whole := len(x) &^ 15
	sumLanes(x[:whole], &p)
	var t [4]float64
	for l := range t {
		t[l] = (p[l] + p[4+l]) + (p[8+l] + p[12+l])
	}
	sum := (t[0] + t[1]) + (t[2] + t[3])
	for _, v := range x[whole:] {
		sum += float64(v)
	}
	return sum
}

// sumLanesGo adds x[16c+l] to part[l] in float64 for each whole chunk c
// of sixteen, chunk by chunk: sumLanes' reference.
func sumLanesGo(x []float32, part *[16]float64) {
	for c := 0; c+16 <= len(x); c += 16 {
		for l := range part {
			part[l] += float64(x[c+l])
		}
	}
}

// scaleMaxGo multiplies x by s and returns the largest product (−Inf for
// none; a NaN may be skipped: it makes every weight NaN all the same, as
// it enters the sum): scaleMax's reference.
func scaleMaxGo(x []float32, s float32) float32 {
	m := float32(math.Inf(-1))
	for k, v := range x {
		v *= s
		x[k] = v
		if v > m {
			m = v
		}
	}
	return m
}

// scaleByGo multiplies x by s: scaleBy's reference.
func scaleByGo(x []float32, s float32) {
	for k := range x {
		x[k] *= s
	}
}
