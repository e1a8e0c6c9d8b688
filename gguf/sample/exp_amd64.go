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

// expCands8 is expCands4 on whole chunks of eight, with AVX-512
// (exp_amd64.s).
//
//go:noescape
func expCands8(dst, src *candidate, n int, top, t float64) int

// useExp4: the kernel needs FMA and, for its integer steps, AVX2.
var useExp4 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useExp8: the eight-lane kernel needs AVX512F (and the OS's saving of
// its registers, which cpu.X86 checks).
var useExp8 = useExp4 && cpu.X86.HasAVX512F
