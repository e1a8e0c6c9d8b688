//go:build !purego

package quant

// The NEON tile kernels (tile_simd.go) and their repacking. Q4_0 is
// repacked as signed bytes (its nibbles less 8), so that Q4_0 and Q8_0
// share one kernel.

//go:noescape
func q8Tile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

//go:noescape
func q4_0Pack(dst, w *byte, rs, blocks int)

//go:noescape
func q8_0Pack(dst, w *byte, rs, blocks int)

//go:noescape
func q4KTile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

//go:noescape
func q4KPack(dst, w *byte, rs, blocks int)

//go:noescape
func q6KTile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

//go:noescape
func q6KPack(dst, w *byte, rs, blocks int)
