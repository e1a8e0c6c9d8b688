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

// q4_0x8f is q4_0x8 for a one-row Batch, with its per-block figures at
// aux.
//
//go:noescape
func q4_0x8f(acc *[8]float32, x, y, aux *byte, groups int)

func dotQ4_0Figures(row, act, aux, _ []byte, n int) float32 {
	var acc [8]float32
	nb := n / 32
	if nb >= 8 {
		q4_0x8f(&acc, &row[0], &act[0], &aux[0], nb/8)
	}
	blocksQ4_0(&acc, row, act, nb&^7, nb)
	return reduce(acc[:])
}

// prefetchRows asks for the first bytes bytes of each of rows rows, rs
// bytes apart from w, to be brought into the L2 cache (matMulBand's
// prefetch; no band kernel runs here yet).
//
//go:noescape
func prefetchRows(w *byte, rs, rows, bytes int)
