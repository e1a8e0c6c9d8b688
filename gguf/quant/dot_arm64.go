//go:build !purego

package quant

import (
	"maps"

	"golang.org/x/sys/cpu"
)

// Every arm64 core has Advanced SIMD, which the float kernels and the
// quantisers need. The integer kernels also need SDOT, the dot-product
// extension of Armv8.2 (FEAT_DotProd): every Apple M-series and Jetson
// Xavier/Orin core has it; Cortex-A57/A72 (Jetson Nano, Raspberry Pi 4)
// do not, and use the Go kernels for the quantised types.
const haveSIMD = true

// simdDots are the kernels with an assembly version on this machine.
var simdDots = neonDots(cpu.ARM64.HasASIMDDP)

func neonDots(sdot bool) map[Type]dotFunc {
	m := map[Type]dotFunc{
		F32:  dotF32SIMD,
		F16:  dotF16SIMD,
		BF16: dotBF16SIMD,
	}
	if sdot {
		maps.Copy(m, map[Type]dotFunc{
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
		})
	}
	return m
}

// simdQuantizers are the quantisers with an assembly version here.
var simdQuantizers = map[Type]func(x []float32, y []byte){
	Q8_0: quantizeQ8_0SIMD,
	Q8_K: quantizeQ8_KSIMD,
}

// simdTiles are the tile kernels (tile_simd.go) on this machine: they
// need SDOT.
var simdTiles = neonTiles(cpu.ARM64.HasASIMDDP)

func neonTiles(sdot bool) map[Type]*tileKernel {
	if !sdot {
		return map[Type]*tileKernel{}
	}
	return map[Type]*tileKernel{
		Q4_0: {chunk: 32, packed: 288, short: 8, pack: q4_0Pack, dot: q8Tile},
		Q8_0: {chunk: 32, packed: 288, short: 8, pack: q8_0Pack, dot: q8Tile},
		Q4_K: {chunk: 8, packed: 2624, pack: q4KPack, dot: q4KTile},
		Q6_K: {chunk: 8, packed: 2592, pack: q6KPack, dot: q6KTile},
	}
}

// figureDots are rows kernels that take a one-row Batch's per-block
// figures (and need SDOT).
var figureDots = neonFigureDots(cpu.ARM64.HasASIMDDP)

func neonFigureDots(sdot bool) map[Type]figureRows {
	if !sdot {
		return map[Type]figureRows{}
	}
	return map[Type]figureRows{Q4_0: rowsQ4_0Figures}
}

// pairedRows: no kernel here takes a one-row batch's paired quants.
const pairedRows = false

// No VNNI here (tile_simd.go).
const haveVNNI = false

var vnniTiles = map[Type]*tileKernel{}

// No band kernels here (tile_simd.go): a batch takes the eight-row SDOT
// tiles one activation row at a time.
const haveZ = false

var zTiles, yTiles = map[Type]*bandKernel{}, map[Type]*bandKernel{}

// haveFMA: every NEON machine has fused multiply-add.
const haveFMA = true

// zFloatBands: no AVX-512 here.
var zFloatBands = map[Type]floatBand4{}

// zFloatRows: no AVX-512 here.
var zFloatRows = map[Type][maxFloatRows]floatRows{}

// floatBandRows: Batch keeps its float rows widened for the float band
// kernels (tile_float.go) here.
const floatBandRows = true

// widenF16SIMD: the Go loop widens halves here.
var widenF16SIMD func(x []float32, src []byte)
