//go:build !amd64 || purego

package greedyhead

// haveKernels: no assembly here (see Available).
const haveKernels = false

func rows16x4(packed []byte, scale []float32, blocks, n int, x []int8, corr []int32, t []float32, approx []float32, os int, lanes []float32) {
	rows16Go(packed, scale, blocks, n, x, 4, corr, t, approx, os, lanes)
}

func rows16x1(packed []byte, scale []float32, blocks, n int, x []int8, corr int32, t float32, approx []float32, lanes []float32) {
	rows16Go(packed, scale, blocks, n, x, 1, []int32{corr}, []float32{t}, approx, 0, lanes)
}

func above(x []float32, floor float32, idx []int32, limit int) ([]int32, bool) {
	return aboveGo(x, 0, floor, idx[:0], limit)
}
