//go:build !purego

#include "textflag.h"
#include "tile_amd64.h"

// Eight-row tiles of four activation rows at once, for AVX2 (tile_simd.go,
// where the sixteen-row AVX-512 tiles are not): q4_0Pack's layout (eight
// rows, 32 bytes a group), each weight group loaded once into a register
// for the four activation rows, each activation's four bytes broadcast
// from memory (a load, where the one-row tile spends a shuffle). Each
// activation row keeps its accumulators in acc: lane j of the eight rows
// at 32j, 256 bytes a row. Arguments and registers: BANDARGS
// (tile_amd64.h), 32 bytes a lane.

// YACT adds the block's partials with activation row i (YA, FA) to its
// lane at ACC(DI)(AX): Σ n·y − 8·Σy (VPMADDUBSW's pairs are at most
// 2·15·128, so eight add up exactly in int16), then float32(sumi)·(dx·dy),
// as q4_0Tile does. The groups are in Y8-Y15, the rows' d in Y6, 1s (int16)
// in Y7.
#define YACT(YA, FA, ACC) \
	VPBROADCASTD YA(2), Y1 \
	VPMADDUBSW Y1, Y8, Y2 \
	VPBROADCASTD YA(6), Y1 \
	VPMADDUBSW Y1, Y9, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(10), Y1 \
	VPMADDUBSW Y1, Y10, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(14), Y1 \
	VPMADDUBSW Y1, Y11, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(18), Y1 \
	VPMADDUBSW Y1, Y12, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(22), Y1 \
	VPMADDUBSW Y1, Y13, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(26), Y1 \
	VPMADDUBSW Y1, Y14, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(30), Y1 \
	VPMADDUBSW Y1, Y15, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPMADDWD Y7, Y2, Y2 \
	VPBROADCASTD FA(4), Y3 \
	VPSLLD $3, Y3, Y3 \
	VPSUBD Y3, Y2, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VBROADCASTSS FA(0), Y3 \
	VMULPS Y6, Y3, Y3 \
	VMULPS Y3, Y2, Y2 \
	VADDPS ACC(DI)(AX*1), Y2, Y2 \
	VMOVUPS Y2, ACC(DI)(AX*1)

// YOUT reduces activation row i's lanes (at ACC(DI)) by halving and
// stores the eight rows' results at R9, then moves R9 on by BX; it leaves
// the lanes zero for the next tile, as ZOUT does.
#define YOUT(ACC) \
	VMOVUPS (ACC)(DI), Y0 \
	VMOVUPS (ACC+32)(DI), Y1 \
	VMOVUPS (ACC+64)(DI), Y2 \
	VMOVUPS (ACC+96)(DI), Y3 \
	VADDPS (ACC+128)(DI), Y0, Y0 \
	VADDPS (ACC+160)(DI), Y1, Y1 \
	VADDPS (ACC+192)(DI), Y2, Y2 \
	VADDPS (ACC+224)(DI), Y3, Y3 \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y3, Y1, Y1 \
	VADDPS Y1, Y0, Y0 \
	VMOVUPS Y0, (R9) \
	ADDQ BX, R9 \
	VPXOR Y2, Y2, Y2 \
	VMOVUPS Y2, (ACC)(DI) \
	VMOVUPS Y2, (ACC+32)(DI) \
	VMOVUPS Y2, (ACC+64)(DI) \
	VMOVUPS Y2, (ACC+96)(DI) \
	VMOVUPS Y2, (ACC+128)(DI) \
	VMOVUPS Y2, (ACC+160)(DI) \
	VMOVUPS Y2, (ACC+192)(DI) \
	VMOVUPS Y2, (ACC+224)(DI)

// YLOAD loads the block's groups into Y8-Y15 and its d into Y6.
#define YLOAD \
	VMOVDQU 0(SI), Y8 \
	VMOVDQU 32(SI), Y9 \
	VMOVDQU 64(SI), Y10 \
	VMOVDQU 96(SI), Y11 \
	VMOVDQU 128(SI), Y12 \
	VMOVDQU 160(SI), Y13 \
	VMOVDQU 192(SI), Y14 \
	VMOVDQU 224(SI), Y15 \
	VMOVUPS 256(SI), Y6

// ONES fills the int16 lanes of Y7 with 1s.
#define ONES \
	VPCMPEQW Y7, Y7, Y7 \
	VPSRLW $15, Y7, Y7

#define Q40Y4 \
	YLOAD \
	YACT(YR0, FG0, 0) \
	YACT(YR1, FG1, 256) \
	YACT(YR2, FG2, 512) \
	YACT(YR3, FG3, 768)

#define Q40Y3 \
	YLOAD \
	YACT(YR0, FG0, 0) \
	YACT(YR1, FG1, 256) \
	YACT(YR2, FG2, 512)

#define Q40Y2 \
	YLOAD \
	YACT(YR0, FG0, 0) \
	YACT(YR1, FG1, 256)

#define Q40Y1 \
	YLOAD \
	YACT(YR0, FG0, 0)

#define YOUT4 \
	YOUT(0) \
	YOUT(256) \
	YOUT(512) \
	YOUT(768)

#define YOUT3 \
	YOUT(0) \
	YOUT(256) \
	YOUT(512)

#define YOUT2 \
	YOUT(0) \
	YOUT(256)

// func q4_0TileY4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileY4(SB), NOSPLIT, $0-120
	BANDARGS(5)
	ONES
	BANDLOOP(288, 34, 8, 32, Q40Y4, YOUT4)

// func q4_0TileY1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileY1(SB), NOSPLIT, $0-120
	BANDARGS(5)
	ONES
	BANDLOOP(288, 34, 8, 32, Q40Y1, YOUT(0))

// func q4_0TileY3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileY3(SB), NOSPLIT, $0-120
	BANDARGS(5)
	ONES
	BANDLOOP(288, 34, 8, 32, Q40Y3, YOUT3)

// func q4_0TileY2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileY2(SB), NOSPLIT, $0-120
	BANDARGS(5)
	ONES
	BANDLOOP(288, 34, 8, 32, Q40Y2, YOUT2)

// Q4_K (q4KPack's layout, 2624 bytes a block of eight rows): per
// sub-block, its eight groups loaded once into Y8-Y15 for the four
// activation rows, Σ n·a by VPMADDUBSW pairs summed in int16 (eight add
// up exactly, as in q4KTile), scaled into int32 by VPMADDWD with the
// rows' (sc, sc) pairs; then the mins and kPartial, as q4KTile does.

// KYSUB adds sub-block S's sc·Σ n·a with activation row YA to ISUM.
#define KYSUB(S, YA, ISUM) \
	VPBROADCASTD YA(4+32*(S)), Y1 \
	VPMADDUBSW Y1, Y8, Y2 \
	VPBROADCASTD YA(8+32*(S)), Y1 \
	VPMADDUBSW Y1, Y9, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(12+32*(S)), Y1 \
	VPMADDUBSW Y1, Y10, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(16+32*(S)), Y1 \
	VPMADDUBSW Y1, Y11, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(20+32*(S)), Y1 \
	VPMADDUBSW Y1, Y12, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(24+32*(S)), Y1 \
	VPMADDUBSW Y1, Y13, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(28+32*(S)), Y1 \
	VPMADDUBSW Y1, Y14, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(32+32*(S)), Y1 \
	VPMADDUBSW Y1, Y15, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPMADDWD (2048+32*(S))(SI), Y2, Y2 \
	VPADDD Y2, ISUM, ISUM

#define KYGROUPS(OFF) \
	VMOVDQU (OFF)(SI), Y8 \
	VMOVDQU (OFF+32)(SI), Y9 \
	VMOVDQU (OFF+64)(SI), Y10 \
	VMOVDQU (OFF+96)(SI), Y11 \
	VMOVDQU (OFF+128)(SI), Y12 \
	VMOVDQU (OFF+160)(SI), Y13 \
	VMOVDQU (OFF+192)(SI), Y14 \
	VMOVDQU (OFF+224)(SI), Y15

// KYEND adds kPartial(isum, summs, d, dmin, dy) of row YA to its lane
// at ACC(DI)(AX), with the rows' (m, m) min pairs in Y8-Y15. Clobbers
// Y0-Y2.
#define KYEND(YA, ISUM, ACC) \
	VPBROADCASTD YA(260), Y1 \
	VPMADDWD Y8, Y1, Y0 \
	VPBROADCASTD YA(264), Y1 \
	VPMADDWD Y9, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VPBROADCASTD YA(268), Y1 \
	VPMADDWD Y10, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VPBROADCASTD YA(272), Y1 \
	VPMADDWD Y11, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VPBROADCASTD YA(276), Y1 \
	VPMADDWD Y12, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VPBROADCASTD YA(280), Y1 \
	VPMADDWD Y13, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VPBROADCASTD YA(284), Y1 \
	VPMADDWD Y14, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VPBROADCASTD YA(288), Y1 \
	VPMADDWD Y15, Y1, Y1 \
	VPADDD Y1, Y0, Y0 \
	VCVTDQ2PS ISUM, ISUM \
	VCVTDQ2PS Y0, Y0 \
	VBROADCASTSS YA(0), Y1 \
	VMULPS 2560(SI), Y1, Y2 \
	VMULPS Y2, ISUM, ISUM \
	VMULPS 2592(SI), Y1, Y2 \
	VMULPS Y2, Y0, Y0 \
	VSUBPS Y0, ISUM, ISUM \
	VADDPS ACC(DI)(AX*1), ISUM, ISUM \
	VMOVUPS ISUM, ACC(DI)(AX*1)

#define KYSUB4(S) \
	KYGROUPS(256*(S)) \
	KYSUB(S, YR0, Y3) \
	KYSUB(S, YR1, Y4) \
	KYSUB(S, YR2, Y5) \
	KYSUB(S, YR3, Y6)

#define Q4KY4 \
	VPXOR Y3, Y3, Y3 \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	VPXOR Y6, Y6, Y6 \
	KYSUB4(0) \
	KYSUB4(1) \
	KYSUB4(2) \
	KYSUB4(3) \
	KYSUB4(4) \
	KYSUB4(5) \
	KYSUB4(6) \
	KYSUB4(7) \
	KYGROUPS(2304) \
	KYEND(YR0, Y3, 0) \
	KYEND(YR1, Y4, 256) \
	KYEND(YR2, Y5, 512) \
	KYEND(YR3, Y6, 768)

#define KYSUB3(S) \
	KYGROUPS(256*(S)) \
	KYSUB(S, YR0, Y3) \
	KYSUB(S, YR1, Y4) \
	KYSUB(S, YR2, Y5)

#define Q4KY3 \
	VPXOR Y3, Y3, Y3 \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	KYSUB3(0) \
	KYSUB3(1) \
	KYSUB3(2) \
	KYSUB3(3) \
	KYSUB3(4) \
	KYSUB3(5) \
	KYSUB3(6) \
	KYSUB3(7) \
	KYGROUPS(2304) \
	KYEND(YR0, Y3, 0) \
	KYEND(YR1, Y4, 256) \
	KYEND(YR2, Y5, 512)

#define KYSUB2(S) \
	KYGROUPS(256*(S)) \
	KYSUB(S, YR0, Y3) \
	KYSUB(S, YR1, Y4)

#define Q4KY2 \
	VPXOR Y3, Y3, Y3 \
	VPXOR Y4, Y4, Y4 \
	KYSUB2(0) \
	KYSUB2(1) \
	KYSUB2(2) \
	KYSUB2(3) \
	KYSUB2(4) \
	KYSUB2(5) \
	KYSUB2(6) \
	KYSUB2(7) \
	KYGROUPS(2304) \
	KYEND(YR0, Y3, 0) \
	KYEND(YR1, Y4, 256)

#define KYSUB1(S) \
	KYGROUPS(256*(S)) \
	KYSUB(S, YR0, Y3)

#define Q4KY1 \
	VPXOR Y3, Y3, Y3 \
	KYSUB1(0) \
	KYSUB1(1) \
	KYSUB1(2) \
	KYSUB1(3) \
	KYSUB1(4) \
	KYSUB1(5) \
	KYSUB1(6) \
	KYSUB1(7) \
	KYGROUPS(2304) \
	KYEND(YR0, Y3, 0)

// func q4KTileY4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileY4(SB), NOSPLIT, $0-120
	BANDARGS(5)
	BANDLOOP(2624, 292, 32, 32, Q4KY4, YOUT4)

// func q4KTileY1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileY1(SB), NOSPLIT, $0-120
	BANDARGS(5)
	BANDLOOP(2624, 292, 32, 32, Q4KY1, YOUT(0))

// func q4KTileY3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileY3(SB), NOSPLIT, $0-120
	BANDARGS(5)
	BANDLOOP(2624, 292, 32, 32, Q4KY3, YOUT3)

// func q4KTileY2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileY2(SB), NOSPLIT, $0-120
	BANDARGS(5)
	BANDLOOP(2624, 292, 32, 32, Q4KY2, YOUT2)
