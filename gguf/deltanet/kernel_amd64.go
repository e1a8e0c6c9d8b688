//go:build amd64 && !purego

package deltanet

import "golang.org/x/sys/cpu"

// haveKernels: the row kernels need AVX (256-bit float multiplies and adds;
// no FMA, whose single rounding would change the bits).
var haveKernels = cpu.X86.HasAVX

// decayRow32 is decayRow's loop over chunks·32 elements.
//
//go:noescape
func decayRow32(acc *[32]float32, row, old, k *float32, decay float32, chunks int)

// updateRow32 is updateRow's loop over chunks·32 elements.
//
//go:noescape
func updateRow32(acc *[32]float32, row, k, q *float32, d float32, chunks int)
