//go:build (amd64 || arm64) && !purego

package quant

// HaveBand says whether MatMul multiplies a batch by t with a band kernel
// (several activation rows at once) on this machine.
func HaveBand(t Type) bool { return bandFor(t) != nil || floatBandFor(t) != nil }

// SetBandTails turns the band kernels of two and three activation rows on
// or off (off: a batch's last rows go one at a time) and returns a
// function that restores the previous setting.
func SetBandTails(on bool) (restore func()) {
	old := useBandTails
	useBandTails = on
	return func() { useBandTails = old }
}
