package kernels

// The delta net's kernels (delta.cuh): their limits, launch shapes and the
// sequence table they read.

const (
	// DeltaMaxDim bounds the scan's head size (DELTA_MAX_DIM).
	DeltaMaxDim = 256
	// ConvMaxKernel bounds the convolution's width (CONV_MAX_KERNEL).
	ConvMaxKernel = 64
	// DeltaSeqBytes is the size of a delta_seq: four int32 (two row
	// spans) then four device pointers (the previous and next
	// convolution and scan states).
	DeltaSeqBytes = 48
)

// ShortConvShape is a thread per channel, in 256-thread blocks, for each
// sequence.
func ShortConvShape(channels, seqs int) Shape {
	return Shape{dim(ceilDiv(channels, 256), seqs, 1), dim(256, 1, 1)}
}

// DeltaScanShape is a block per value head and sequence, a thread per
// state row (headDim rounded up to a warp).
func DeltaScanShape(heads, headDim, seqs int) Shape {
	return Shape{dim(heads, seqs, 1), dim(ceilDiv(headDim, 32)*32, 1, 1)}
}
