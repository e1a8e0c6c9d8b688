package cpu

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
