//go:build !amd64 || purego

package sample

// useExp4: no SIMD exponentials here.
var useExp4 = false

// expCands4 does none: expWeights takes every candidate one by one.
func expCands4(_, _ *candidate, _ int, _, _ float64) int { return 0 }
