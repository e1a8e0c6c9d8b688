//go:build (!amd64 && !arm64) || purego

package quant

// No assembly kernels here: the pure-Go ones serve.
const haveSIMD = false

var (
	simdDots       = map[Type]dotFunc{}
	simdQuantizers = map[Type]func(x []float32, y []byte){}
)
