//go:build (amd64 || arm64) && !purego

package quant

// HaveBand says whether MatMul multiplies a batch by t with a band kernel
// (several activation rows at once) on this machine.
func HaveBand(t Type) bool { return bandFor(t) != nil || floatBandFor(t) != nil }

// SetBandTails turns the band kernels of two, three and five to nine
// activation rows on or off (off: a batch goes four rows a call, its last
// rows one at a time) and returns a function that restores the previous
// setting.
func SetBandTails(on bool) (restore func()) {
	old := useBandTails
	useBandTails = on
	return func() { useBandTails = old }
}

// SetOneRowBand makes MatMul take a one-row batch by the band kernels
// always (mode 1), never (-1) or by its rule (0), and returns a function
// that restores the previous setting.
func SetOneRowBand(mode int) (restore func()) {
	old := oneRowBandMode
	oneRowBandMode = mode
	return func() { oneRowBandMode = old }
}

// SetFloatRows turns the AVX-512 float row kernels on or off (off: the
// band kernels take their batches) and returns a function that restores
// the previous setting.
func SetFloatRows(on bool) (restore func()) {
	old := useFloatRows
	useFloatRows = on
	return func() { useFloatRows = old }
}

// SetStreamAhead turns on or off the band kernels' asking for the
// weights they read next while they multiply (off: each chunk's rows
// asked for at once before a call, as before) and returns a function that
// restores the previous setting.
func SetStreamAhead(on bool) (restore func()) {
	old := streamAhead
	streamAhead = on
	return func() { streamAhead = old }
}

// PackedBytes is p's packed tiles and bands.
func PackedBytes(p *Packed) (tiles, bands []byte) { return p.tiles, p.bands }
