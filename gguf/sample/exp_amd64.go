//go:build !purego

package sample

import "golang.org/x/sys/cpu"

// expCands4 sets dst[i].v = detmath.Exp((src[i].v−top)/t) for whole chunks of
// four of the first n candidates, to the bit, until a chunk where exp
// leaves its ordinary path; it returns the candidates it did
// (exp_amd64.s). dst may be src.
//
//go:noescape
func expCands4(dst, src *candidate, n int, top, t float64) int

// useExp4: the kernel needs FMA and, for its integer steps, AVX2.
var useExp4 = cpu.X86.HasAVX2 && cpu.X86.HasFMA
