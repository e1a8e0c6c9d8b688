//go:build !amd64 || purego

package greedyhead

// haveKernels: no assembly here (see Available).
const haveKernels = false

func rows16(packed []byte, scale []float32, blocks, n int, x, _ []int8, k int, corr []int32, t []float32, approx []float32, os int, lanes []float32) {
	rows16Go(packed, scale, blocks, n, x, k, corr, t, approx, os, lanes)
}

func above(x []float32, floor float32, idx []int32, limit int) ([]int32, bool) {
	return aboveGo(x, 0, floor, idx[:0], limit)
}
