package kernels

import (
	"fmt"

	"github.com/meshnode/meshnode/cuda/driver"
)

// The launch shapes, one function per kernel family: the grid and block a
// problem of the given size takes, as the kernels' comments state them.

// Limits every shape respects (CUDA's, for compute capability 3.0 on).
const (
	MaxThreadsPerBlock = 1024
	MaxGridX           = 1<<31 - 1
	MaxGridYZ          = 65535
)

// Kernel constants shared with the sources.
const (
	// MatVecRows is the weight rows per 128-thread block (one per warp).
	MatVecRows = 4
	// BatchRows is the activation rows a MatVecBatch warp takes.
	BatchRows = 8
	// MaxHeadDim bounds an attention head (ATT_MAX_HEAD).
	MaxHeadDim = 256
)

// Shape is a launch's grid and block.
type Shape struct{ Grid, Block driver.Dim3 }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func dim(x, y, z int) driver.Dim3 { return driver.Dim3{X: uint32(x), Y: uint32(y), Z: uint32(z)} }

// Check reports a shape CUDA would refuse.
func (s Shape) Check() error {
	g, b := s.Grid, s.Block
	switch {
	case g.X == 0 || g.Y == 0 || g.Z == 0 || b.X == 0 || b.Y == 0 || b.Z == 0:
		return fmt.Errorf("kernels: empty launch %v × %v", g, b)
	case uint64(b.X)*uint64(b.Y)*uint64(b.Z) > MaxThreadsPerBlock:
		return fmt.Errorf("kernels: block %v exceeds %d threads", b, MaxThreadsPerBlock)
	case g.X > MaxGridX || g.Y > MaxGridYZ || g.Z > MaxGridYZ:
		return fmt.Errorf("kernels: grid %v exceeds CUDA's limits", g)
	}
	return nil
}

// Elementwise covers n elements with 256-thread blocks (add, scale,
// softcap, add_bias, glu).
func Elementwise(n int) Shape { return Shape{dim(ceilDiv(n, 256), 1, 1), dim(256, 1, 1)} }

// Quantize covers nblocks activation blocks: a warp per block, eight per
// 256-thread block for Q8_0/Q8_1, four per 128-thread block for Q8_K.
func Quantize(id ID, nblocks int) Shape {
	if id == QuantizeQ8_K {
		return Shape{dim(ceilDiv(nblocks, 4), 1, 1), dim(128, 1, 1)}
	}
	return Shape{dim(ceilDiv(nblocks, 8), 1, 1), dim(256, 1, 1)}
}

// MatVecKind is the kernel for nx activation rows: the one whose warps
// take the fewest rows that cover nx, up to BatchRows (a speculative
// window of two rows pays for two, not eight).
func MatVecKind(nx int) WeightKind {
	switch {
	case nx <= 1:
		return MatVec
	case nx == 2:
		return MatVec2
	case nx <= 4:
		return MatVec4
	}
	return MatVecBatch
}

// MatVecRowsPerWarp is the activation rows a warp of kind k takes.
func MatVecRowsPerWarp(k WeightKind) int {
	switch k {
	case MatVec2:
		return 2
	case MatVec4:
		return 4
	case MatVecBatch:
		return BatchRows
	}
	return 1
}

// MaxMats is how many matrices one matrix launch covers.
const MaxMats = 3

// MatVecShape covers the rows of up to MaxMats matrices (a warp per row,
// each matrix's in whole blocks) and nx activation rows (one to BatchRows
// per warp, as MatVecKind picks).
func MatVecShape(rows [MaxMats]int, nx int) Shape {
	r := MatVecRowsPerWarp(MatVecKind(nx))
	blocks := 0
	for _, n := range rows {
		blocks += ceilDiv(n, MatVecRows)
	}
	return Shape{dim(blocks, ceilDiv(nx, r), 1), dim(32*MatVecRows, 1, 1)}
}

// EmbedShape covers n rows of cols elements.
func EmbedShape(cols, n int) Shape { return Shape{dim(ceilDiv(cols, 256), n, 1), dim(256, 1, 1)} }

// RMSNormShape is a 256-thread block per group of each row.
func RMSNormShape(rows, cols, group int) Shape {
	return Shape{dim(cols/group, rows, 1), dim(256, 1, 1)}
}

// RoPEShape is a thread per rotated pair (pairs: the most of any of the
// tensors), in 128-thread blocks, for each row of each of tensors (1 or 2)
// tensors.
func RoPEShape(rows, tensors, pairs int) Shape {
	return Shape{dim(rows, ceilDiv(pairs, 128), tensors), dim(128, 1, 1)}
}

// StoreKVShape covers the wider of a row's keys and values, for each row,
// keys and values apart (z).
func StoreKVShape(rows, kd, vd int) Shape {
	return Shape{dim(ceilDiv(max(kd, vd), 256), rows, 2), dim(256, 1, 1)}
}

// AttendShape is a 256-thread block per head and query row.
func AttendShape(heads, rows int) Shape { return Shape{dim(heads, rows, 1), dim(256, 1, 1)} }

// AttendKeysChunk is how many keys one block of attend_scores takes
// (ATT_CHUNK in ops.cuh).
const AttendKeysChunk = 128

// AttendScoresShape is a 256-thread block per head, query row and chunk
// of AttendKeysChunk keys (chunks of them).
func AttendScoresShape(heads, rows, chunks int) Shape {
	return Shape{dim(heads, rows, chunks), dim(256, 1, 1)}
}

// AttendValuesShape is a 256-thread block per head, query row and eight
// of a head's dv output elements (a warp each).
func AttendValuesShape(heads, rows, dv int) Shape {
	return Shape{dim(heads, rows, ceilDiv(dv, 8)), dim(256, 1, 1)}
}

// AttendChunk is how many query rows one attention launch takes so that
// their scores (capacity floats per row and head) fit budget bytes: at
// least one.
func AttendChunk(rows, heads, capacity, budget int) int {
	per := heads * capacity * 4
	return max(1, min(rows, budget/max(per, 1), MaxGridYZ))
}

// ArgMaxShape is a block of 1024 per row.
func ArgMaxShape(rows int) Shape { return Shape{dim(rows, 1, 1), dim(1024, 1, 1)} }

// MoERouteShape is a thread per row, in 64-thread blocks.
func MoERouteShape(rows int) Shape { return Shape{dim(ceilDiv(rows, 64), 1, 1), dim(64, 1, 1)} }

// MatVecGatherShape covers the rows of one expert matrix (a warp per
// row) for each of pairs (row, rank) pairs.
func MatVecGatherShape(rows, pairs int) Shape {
	return Shape{dim(ceilDiv(rows, MatVecRows), pairs, 1), dim(32*MatVecRows, 1, 1)}
}
