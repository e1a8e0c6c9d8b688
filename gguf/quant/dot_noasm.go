//go:build (!amd64 && !arm64) || purego

package quant

// No assembly kernels here: the pure-Go ones serve.
const haveSIMD = false

var (
	simdDots       = map[Type]dotFunc{}
	simdQuantizers = map[Type]func(x []float32, y []byte){}
)

// simdTiles is empty: matMulTiles has no tile kernels to run here.
var simdTiles = map[Type]struct{}{}

func matMulTiles(Type, []byte, *Packed, int, int, *Batch, []float32, int) int { return 0 }

var figureDots = map[Type]figureRows{}

const pairedRows = false

func rowsSIMD(Type, []byte, int, *Activation, []float32, bool) bool { return false }

const haveVNNI = false

var useVNNI = false

const haveZ = false

var useZ, useY = false, false

// floatBandRows: Batch keeps its float rows widened for the float band
// kernels (tile_float.go); none here.
const floatBandRows = false

// WideRowsFor: no WideRows kernels here.
func WideRowsFor(Type) bool { return false }

// WideRows has no kernels here; it reports false.
func WideRows(Type, []byte, int, int, int, []float32, int, int, []float32, int) bool { return false }

// widenF16SIMD: the Go loop widens halves here.
var widenF16SIMD func(x []float32, src []byte)

// Packed has nothing here: no kernel repacks rows.
type Packed struct{}

// Pack returns nil: no kernel here repacks rows.
func Pack(Type, []byte, int, int) *Packed { return nil }

// PackOn returns nil: no kernel here repacks rows.
func PackOn(Type, []byte, int, int, func(int, func(int))) *Packed { return nil }

// Bytes is 0.
func (*Packed) Bytes() int { return 0 }

// Serves is false.
func (*Packed) Serves(Type, int, int) bool { return false }

// Rows returns the zero Packed.
func (*Packed) Rows(int, int) Packed { return Packed{} }

// PacksStreamed: nothing is packed without the assembly.
func PacksStreamed(Type, int) bool { return false }

// StreamedBand: no band kernels without the assembly.
func StreamedBand(Type, int) bool { return false }

// RowsAhead: no row kernels' asks without the assembly.
func RowsAhead(Type, int) bool { return false }
