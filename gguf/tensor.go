package gguf

import "github.com/meshnode/meshnode/gguf/quant"

// TensorInfo is one entry of the tensor index.
type TensorInfo struct {
	Name string
	Type quant.Type
	// Dims is ggml's ne: Dims[0] is the row length (the fastest-varying
	// dimension), Dims[1] the number of rows, and so on.
	Dims []int64
	// Offset is the tensor's offset from the start of the data section.
	Offset uint64
	// Size is the tensor's size in bytes.
	Size uint64
}

// Elements is the number of elements (the product of Dims).
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// RowLen is the number of elements in one row (Dims[0]).
func (t TensorInfo) RowLen() int64 {
	if len(t.Dims) == 0 {
		return 1
	}
	return t.Dims[0]
}

// Rows is the number of rows: Elements / RowLen.
func (t TensorInfo) Rows() int64 {
	if t.RowLen() == 0 {
		return 0
	}
	return t.Elements() / t.RowLen()
}

// RowSize is the size of one row in bytes.
func (t TensorInfo) RowSize() int64 {
	return t.RowLen() / int64(t.Type.BlockSize()) * int64(t.Type.TypeSize())
}
