package quant

import "slices"

// SetSIMD turns the assembly kernels on or off (on only where the CPU has
// them) and returns a function that restores the previous setting.
func SetSIMD(on bool) (restore func()) {
	old := useSIMD
	useSIMD = on && haveSIMD
	return func() { useSIMD = old }
}

// SIMDTypes lists the weight types with an assembly kernel this machine
// runs, in type order.
func SIMDTypes() []Type {
	var ts []Type
	for t := range simdDots {
		if haveSIMD {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return ts
}

// SIMDQuantTypes lists the types with an assembly quantiser this machine
// runs, in type order.
func SIMDQuantTypes() []Type {
	var ts []Type
	for t := range simdQuantizers {
		if haveSIMD {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return ts
}

// TileTypes lists the weight types with a tile kernel this machine runs,
// in type order.
func TileTypes() []Type {
	var ts []Type
	for t := range simdTiles {
		if haveSIMD {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return ts
}

// Refigure recomputes row i's per-block figures after a test wrote its
// bytes directly.
func Refigure(b *Batch, i int) { b.figures(i) }

// SetTiles turns MatMul's tile kernels on or off and returns a function
// that restores the previous setting.
func SetTiles(on bool) (restore func()) {
	old := useTiles
	useTiles = on
	return func() { useTiles = old }
}

// SetVNNI turns the AVX512-VNNI tile kernels on or off (on only where the
// CPU has them) and returns a function that restores the previous setting.
func SetVNNI(on bool) (restore func()) {
	old := useVNNI
	useVNNI = on && haveVNNI
	return func() { useVNNI = old }
}

// HaveVNNI says whether this machine runs the AVX512-VNNI tile kernels.
func HaveVNNI() bool { return haveVNNI }

// SetZ turns the sixteen-row AVX-512 tile kernels on or off (on only
// where the CPU has them) and returns a function that restores the
// previous setting.
func SetZ(on bool) (restore func()) {
	old := useZ
	useZ = on && haveZ
	return func() { useZ = old }
}

// HaveZ says whether this machine runs the sixteen-row AVX-512 tiles.
func HaveZ() bool { return haveZ }

// SetY turns the eight-row AVX2 tiles of four activation rows at once on
// or off and returns a function that restores the previous setting.
func SetY(on bool) (restore func()) {
	old := useY
	useY = on && haveSIMD
	return func() { useY = old }
}
