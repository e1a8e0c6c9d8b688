package backend

// Joint is a backend that multiplies one input by several weights in one
// operation (the capability is the interface): a layer's query, key and
// value projections, or its gate and up. The input is converted to the
// weights' activation format once, not once a weight, and the products'
// rows are handed to the workers together, so that three small products
// that would each run on one core share them all. The bits are MatMul's,
// weight by weight.
type Joint interface {
	// MatMuls sets dsts[i] = x · ws[i]ᵀ for every i, as MatMul does. The
	// weights have x's columns; no dst aliases x or another dst.
	MatMuls(dsts []Tensor, ws []Weight, x Tensor)
}
