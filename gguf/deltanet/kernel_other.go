//go:build (!amd64 && !arm64) || purego

package deltanet

// haveKernels: no assembly here; the Go loops do every element.
const haveKernels = false

func decayRow32(*[32]float32, *float32, *float32, *float32, float32, int) {
	panic("deltanet: no row kernels on this machine")
}

func updateRow32(*[32]float32, *float32, *float32, *float32, float32, int) {
	panic("deltanet: no row kernels on this machine")
}
