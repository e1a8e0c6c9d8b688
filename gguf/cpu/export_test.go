package cpu

import "time"

// SetParallelProduct sets the least product MatMul hands to the workers
// (0: every product), for benchmarks to compare, and returns the old.
func SetParallelProduct(n int) int {
	old := parallelProduct
	parallelProduct = n
	return old
}

// SetParallelElems sets the least work elementwise kernels hand to the
// workers (0: all of it), for benchmarks to compare, and returns the old.
func SetParallelElems(n int) int {
	old := parallelElems
	parallelElems = n
	return old
}

// Packed reports whether MatMul has packed w's rows for batches of one
// row (rows 1) or more.
func Packed(w any, rows int) bool {
	return w.(*weight).packed[min(rows, 2)-1] != nil
}

// SetPack has the backends made next pack the rows of weights that stay
// in cache (on) or not, and returns a function that restores the
// previous setting.
func SetPack(on bool) (restore func()) {
	old := packWeights
	packWeights = on
	return func() { packWeights = old }
}

// SetClock replaces b's clock, which times the one-row products it tunes
// (onerow.go).
func SetClock(b *Backend, now func() time.Time) { b.now = now }
