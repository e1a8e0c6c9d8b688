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

// q4_0x8p is q4_0x8 for a one-row Batch: its per-block figures at aux,
// its paired quants (Batch.pairs) at pairs.
//
//go:noescape
func q4_0x8p(acc *[8]float32, x, pairs, aux *byte, groups int)

func rowsQ4_0Pairs(w []byte, stride int, act, aux, pairs []byte, out []float32, streamed bool) {
	groupLoop(Q4_0, w, stride, act, aux, pairs, len(act)/34, out, streamed)
}

// figureGroups adds groups groups of eight Q4_0 blocks at x by a one-row
// batch's row (its figures at aux, its paired quants at pairs) to acc.
func figureGroups(acc *[8]float32, x *byte, _, aux, pairs []byte, groups int) {
	q4_0x8p(acc, x, &pairs[0], &aux[0], groups)
}

// The AVX512-VNNI tiles (tile_vnni_amd64.s).

//go:noescape
func q4_0TileVNNI(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

//go:noescape
func q8_0TileVNNI(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)

//go:noescape
func q8_0PackU(dst, w *byte, rs, blocks int)

// The sixteen-row tiles (tile_z_amd64.s), for AVX-512 with VNNI.

//go:noescape
func q4_0TileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q8_0TileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0PackZ16(dst, w *byte, rs, blocks int)

//go:noescape
func q8_0PackUZ(dst, w *byte, rs, blocks, d int)

// q8_0PackZ packs a sixteen-row tile of Q8_0 for the zTiles kernels: each
// half's groups 32 bytes apart within each 64-byte group, and the
// sixteen d (float16) after them at 512 (tile_z_amd64.s).
func q8_0PackZ(dst, w []byte, rs, blocks int) {
	q8_0PackUZ(&dst[0], &w[0], rs, blocks, 512)
	q8_0PackUZ(&dst[32], &w[8*rs], rs, blocks, 512-16)
}

//go:noescape
func q4KTileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KPackZ(dst, w *byte, rs, blocks int)

//go:noescape
func q6KTileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KTileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q6KPackZ(dst, w *byte, rs, blocks int)

// prefetchRows asks for the first bytes bytes of each of rows rows, rs
// bytes apart from w, to be brought into the L2 cache.
//
//go:noescape
func prefetchRows(w *byte, rs, rows, bytes int)

// The band kernels' repacking, as bandKernel.pack: the sixteen-row tiles'
// of Q4_0 all sixteen rows at once, of the others eight into each half;
// the eight-row AVX2 tiles' q4_0Pack's.

func q4_0PackZ(dst, w []byte, rs, blocks int) { q4_0PackZ16(&dst[0], &w[0], rs, blocks) }

func packHalves(half func(dst, w *byte, rs, blocks int)) func(dst, w []byte, rs, blocks int) {
	return func(dst, w []byte, rs, blocks int) {
		half(&dst[0], &w[0], rs, blocks)
		half(&dst[32], &w[8*rs], rs, blocks)
	}
}

func q4_0PackY(dst, w []byte, rs, blocks int) { q4_0Pack(&dst[0], &w[0], rs, blocks) }

//go:noescape
func q4_0TileY4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileY1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileY3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4_0TileY2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

func q4KPackY(dst, w []byte, rs, blocks int) { q4KPack(&dst[0], &w[0], rs, blocks) }

//go:noescape
func q4KTileY4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileY1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileY3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)

//go:noescape
func q4KTileY2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
