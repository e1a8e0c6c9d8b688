//go:build !purego

package quant

// The AVX2 tile kernels (tile_simd.go) and their repacking.

//go:noescape
func q4_0Tile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

//go:noescape
func q4_0Pack(dst, w *byte, rs, blocks int)

//go:noescape
func q8_0Tile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

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
