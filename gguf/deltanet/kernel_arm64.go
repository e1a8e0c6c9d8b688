//go:build arm64 && !purego

package deltanet

// haveKernels: every arm64 processor has NEON. The kernels multiply and add
// separately (FMUL, FADD; never FMLA, whose single rounding would change
// the bits).
const haveKernels = true

// decayRow32 is decayRow's loop over chunks·32 elements.
//
//go:noescape
func decayRow32(acc *[32]float32, row, old, k *float32, decay float32, chunks int)

// updateRow32 is updateRow's loop over chunks·32 elements.
//
//go:noescape
func updateRow32(acc *[32]float32, row, k, q *float32, d float32, chunks int)
