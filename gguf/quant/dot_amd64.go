//go:build !purego

package quant

import "golang.org/x/sys/cpu"

// The amd64 kernels use AVX2 and F16C (fp16 scales and elements). Every
// AVX2 processor has F16C, but a hypervisor may hide either.
var haveSIMD = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// simdDots are the kernels with an assembly version on this architecture.
var simdDots = map[Type]dotFunc{
	F32:    dotF32SIMD,
	F16:    dotF16SIMD,
	BF16:   dotBF16SIMD,
	Q4_0:   groupDot(Q4_0),
	Q4_1:   groupDot(Q4_1),
	Q5_0:   groupDot(Q5_0),
	Q5_1:   groupDot(Q5_1),
	Q8_0:   groupDot(Q8_0),
	IQ4_NL: groupDot(IQ4_NL),
	MXFP4:  groupDot(MXFP4),
	IQ4_XS: dotIQ4_XSSIMD,
	Q2_K:   dotQ2_KSIMD,
	Q3_K:   dotQ3_KSIMD,
	Q4_K:   dotQ4_KSIMD,
	Q5_K:   dotQ5_KSIMD,
	Q6_K:   dotQ6_KSIMD,
}

// simdQuantizers are the quantisers with an assembly version here.
var simdQuantizers = map[Type]func(x []float32, y []byte){
	F16:  quantizeF16SIMD,
	Q8_0: quantizeQ8_0SIMD,
	Q8_K: quantizeQ8_KSIMD,
}

// simdTiles are the tile kernels (tile_simd.go) on this machine.
var simdTiles = map[Type]*tileKernel{
	Q4_0: {chunk: 32, packed: 288, short: 8, pack: q4_0Pack, dot: q4_0Tile},
	Q8_0: {chunk: 32, packed: 544, short: 8, pack: q8_0Pack, dot: q8_0Tile},
	Q4_K: {chunk: 8, packed: 2624, pack: q4KPack, dot: q4KTile},
	Q6_K: {chunk: 8, packed: 2848, pack: q6KPack, dot: q6KTile},
}

// figureDots are rows kernels that take a one-row Batch's per-block
// figures and paired quants.
var figureDots = map[Type]figureRows{
	Q4_0: rowsQ4_0Pairs,
}

// pairedRows: one-row Q8_0 batches keep their quants paired, for
// rowsQ4_0Pairs.
const pairedRows = true

// haveVNNI: AVX512-VNNI, in its 256-bit form (AVX512VL), for vnniTiles.
var haveVNNI = haveSIMD && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

// vnniTiles replace simdTiles' kernels where the CPU has AVX512-VNNI.
var vnniTiles = map[Type]*tileKernel{
	Q4_0: {chunk: 32, packed: 288, short: 8, pack: q4_0Pack, dot: q4_0TileVNNI},
	Q8_0: {chunk: 32, packed: 288, short: 8, pack: q8_0PackU, dot: q8_0TileVNNI},
}

// haveZ: zTiles' 512-bit kernels need AVX512F and AVX512-VNNI, which
// haveVNNI has.
var haveZ = haveVNNI

// zTiles are the sixteen-row tile kernels (tile_z_amd64.s), where the
// CPU has AVX-512 with VNNI.
//
// A one-row batch takes them where they were measured faster than the
// eight-row VNNI tiles or the row kernels (BenchmarkMatMulOneRow, cached
// weights, docs/engine.md "One-token products"): rows of Q4_0 up to 2048
// elements, of Q8_0 from 256 to 2048 (on shorter rows the eight-row tiles
// cost the same), of Q4_K and Q6_K up to 1024; where the weights are
// read from memory, rows of every width from those least (oneRowBand).
var zTiles = map[Type]*bandKernel{
	Q4_0: {h: 16, chunk: 32, packed: 576, oneMin: 1, oneMax: 64, oneStreamed: true, pack: q4_0PackZ, dot4: q4_0TileZ4, dot3: q4_0TileZ3, dot2: q4_0TileZ2, dot1: q4_0TileZ1,
		wide: []bandDot{q4_0TileZ5, q4_0TileZ6, q4_0TileZ7, q4_0TileZ8, q4_0TileZ9}},
	Q8_0: {h: 16, chunk: 32, packed: 544, oneMin: 8, oneMax: 64, oneStreamed: true, pack: q8_0PackZ, dot4: q8_0TileZ4, dot3: q8_0TileZ3, dot2: q8_0TileZ2, dot1: q8_0TileZ1,
		wide: []bandDot{q8_0TileZ5, q8_0TileZ6, q8_0TileZ7, q8_0TileZ8, q8_0TileZ9}},
	Q4_K: {h: 16, chunk: 4, packed: 5248, oneMin: 1, oneMax: 4, oneStreamed: true, pack: packHalves(q4KPackZ), dot4: q4KTileZ4, dot3: q4KTileZ3, dot2: q4KTileZ2, dot1: q4KTileZ1,
		wide: []bandDot{q4KTileZ5, q4KTileZ6, q4KTileZ7, q4KTileZ8, q4KTileZ9}},
	Q6_K: {h: 16, chunk: 4, packed: 5696, oneMin: 1, oneMax: 4, oneStreamed: true, pack: packHalves(q6KPackZ), dot4: q6KTileZ4, dot3: q6KTileZ3, dot2: q6KTileZ2, dot1: q6KTileZ1,
		wide: []bandDot{q6KTileZ5, q6KTileZ6, q6KTileZ7, q6KTileZ8, q6KTileZ9}, narrowStreamed: true},
}

// yTiles are the eight-row AVX2 tile kernels of four activation rows at
// once (tile_y_amd64.s), for batches where zTiles has no kernel (or the
// CPU no AVX-512). A one-row batch takes Q4_K's for rows up to 768
// elements; Q4_0's row kernel is faster than its band kernel at every
// width measured.
var yTiles = map[Type]*bandKernel{
	Q4_0: {h: 8, chunk: 32, packed: 288, pack: q4_0PackY, dot4: q4_0TileY4, dot3: q4_0TileY3, dot2: q4_0TileY2, dot1: q4_0TileY1},
	Q4_K: {h: 8, chunk: 8, packed: 2624, oneMin: 1, oneMax: 3, pack: q4KPackY, dot4: q4KTileY4, dot3: q4KTileY3, dot2: q4KTileY2, dot1: q4KTileY1},
}

// haveFMA: the F16 float band kernel (tile_float_amd64.s) uses FMA.
var haveFMA = cpu.X86.HasFMA

// zFloatBands are the float band kernels' AVX-512 forms, where zTiles run
// (tile_float_amd64.s).
var zFloatBands = map[Type]floatBand4{
	F16:  f16Band4Z,
	BF16: bf16Band4Z,
	F32:  f32Band4Z,
}

// zFloatRows are the float row kernels of one to eight activation rows
// (tile_float_amd64.s), where zTiles run.
var zFloatRows = map[Type][maxFloatRows]floatRows{
	F16:  {f16Rows1Z, f16Rows2Z, f16Rows3Z, f16Rows4Z, f16Rows5Z, f16Rows6Z, f16Rows7Z, f16Rows8Z},
	BF16: {bf16Rows1Z, bf16Rows2Z, bf16Rows3Z, bf16Rows4Z, bf16Rows5Z, bf16Rows6Z, bf16Rows7Z, bf16Rows8Z},
	F32:  {f32Rows1Z, f32Rows2Z, f32Rows3Z, f32Rows4Z, f32Rows5Z, f32Rows6Z, f32Rows7Z, f32Rows8Z},
}

//go:noescape
func f16Rows5Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows6Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows7Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows8Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows5Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows6Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows7Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows8Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows5Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows6Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows7Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows8Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows1Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows2Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows3Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Rows4Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows1Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows2Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows3Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func bf16Rows4Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows1Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows2Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows3Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f32Rows4Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)

//go:noescape
func f16Band4Z(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)

//go:noescape
func bf16Band4Z(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)

//go:noescape
func f32Band4Z(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)

// floatBandRows: Batch keeps its float rows widened for the float band
// kernels (tile_float.go) here.
const floatBandRows = true

// f32ToF16 narrows n floats (a multiple of 8) at src to halves at dst as
// FP32ToFP16 does (quant_f16_amd64.s).
//
//go:noescape
func f32ToF16(dst *byte, src *float32, n int)

// quantizeF16SIMD is Quantize's F16 case eight floats at a time: the
// activations of every float-weight product, and the keys and queries
// attention keeps and scores as halves.
func quantizeF16SIMD(x []float32, y []byte) {
	n := len(x) &^ 7
	if n > 0 {
		f32ToF16(&y[0], &x[0], n)
	}
	for i := n; i < len(x); i++ {
		putLE16(y[2*i:], FP32ToFP16(x[i]))
	}
}

// f16ToF32 widens n halves (a multiple of 8) at src to floats at dst
// (quant_f16_amd64.s).
//
//go:noescape
func f16ToF32(dst *float32, src *byte, n int)

// widenF16SIMD sets x to the values of the first len(x) halves at src,
// eight at a time: a batch's F16 rows widened for the float kernels.
var widenF16SIMD = func(x []float32, src []byte) {
	n := len(x) &^ 7
	if n > 0 {
		f16ToF32(&x[0], &src[0], n)
	}
	for i := n; i < len(x); i++ {
		x[i] = FP16ToFP32(le16(src[2*i:]))
	}
}
