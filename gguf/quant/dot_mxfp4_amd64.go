//go:build !purego

package quant

// mxfp4x8 adds the partials of 8·groups MXFP4·Q8_0 blocks to acc.
//
//go:noescape
func mxfp4x8(acc *[8]float32, x, y *byte, groups int)

func dotMXFP4SIMD(row, act []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		mxfp4x8(&acc, &row[0], &act[0], nb/8)
	}
	blocksMXFP4(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}
