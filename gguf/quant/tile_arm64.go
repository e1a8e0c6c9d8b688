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

func rowsQ4_0Figures(w []byte, stride int, act, aux, _ []byte, out []float32, streamed bool) {
	groupLoop(Q4_0, w, stride, act, aux, nil, len(act)/34, out, streamed)
}

// figureGroups adds groups groups of eight Q4_0 blocks at x by a one-row
// batch's row act (its figures at aux) to acc.
func figureGroups(acc *[8]float32, x *byte, act, aux, _ []byte, groups int) {
	q4_0x8f(acc, x, &act[0], &aux[0], groups)
}

// prefetchRows asks for the first bytes bytes of each of rows rows, rs
// bytes apart from w, to be brought into the L2 cache (matMulBand's
// prefetch; no band kernel runs here yet).
//
//go:noescape
func prefetchRows(w *byte, rs, rows, bytes int)
