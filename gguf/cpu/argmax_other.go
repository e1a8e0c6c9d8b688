//go:build !amd64 || purego

package cpu

import "github.com/meshnode/meshnode/gguf/backend"

// useMax8: no SIMD argmax here.
var useMax8 = false

// argMax is backend.ArgMax.
func argMax(x []float32) int { return backend.ArgMax(x) }
