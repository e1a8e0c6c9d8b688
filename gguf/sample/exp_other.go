//go:build !amd64 || purego

package sample

// useExp4 and useExp8: no SIMD exponentials here.
var useExp4, useExp8 = false, false

// expCands4 does none: expWeights takes every candidate one by one.
func expCands4(_, _ *candidate, _ int, _, _ float64) int { return 0 }

// expCands8 does none either.
func expCands8(_, _ *candidate, _ int, _, _ float64) int { return 0 }
