//go:build (amd64 || arm64) && !purego

package quant

// HaveBand says whether MatMul multiplies a batch by t with a band kernel
// (several activation rows at once) on this machine.
func HaveBand(t Type) bool { return bandFor(t) != nil || floatBandFor(t) != nil }
