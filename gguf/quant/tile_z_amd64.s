//go:build !purego

#include "textflag.h"
#include "tile_amd64.h"

// Sixteen-row tiles for processors with AVX-512 and AVX512-VNNI
// (tile_simd.go): sixteen weight rows, repacked so that the 64 bytes of
// a group hold four elements of each row (row r in bytes 4r..4r+3), times
// four activation rows (or three, two or one; or five to nine) at once. VPDPBUSD takes the weights as
// unsigned bytes from a register and each activation's four bytes by
// embedded broadcast from memory, so a weight group is loaded once for
// all the activation rows and each row's sum lands in its own lane. Each
// activation row keeps its accumulators in acc: lane j of the sixteen
// rows at 64j, 512 bytes a row; block k of a call adds to lane (lane + k)
// mod 8. The arithmetic per output is VecDot's, as in every tile kernel.
//
// Arguments and registers: BANDARGS (tile_amd64.h), 64 bytes a lane.

// ZOUT reduces activation row i's lanes (at ACC(DI)) by halving, lane
// j += lane j+w for w = 4, 2, 1, as reduce does, stores the sixteen
// rows' results at R9 and moves R9 to the next row's. It leaves the lanes
// zero for the next tile (matMulBand clears acc once a call, not once a
// tile: on 192-wide rows the clear cost half the products' time), with
// whole-vector stores, which the next tile's whole-vector loads of the
// lanes take straight from the store buffer.
#define ZOUT(ACC) \
	VMOVUPS (ACC)(DI), Z0 \
	VMOVUPS (ACC+64)(DI), Z1 \
	VMOVUPS (ACC+128)(DI), Z2 \
	VMOVUPS (ACC+192)(DI), Z3 \
	VADDPS (ACC+256)(DI), Z0, Z0 \
	VADDPS (ACC+320)(DI), Z1, Z1 \
	VADDPS (ACC+384)(DI), Z2, Z2 \
	VADDPS (ACC+448)(DI), Z3, Z3 \
	VADDPS Z2, Z0, Z0 \
	VADDPS Z3, Z1, Z1 \
	VADDPS Z1, Z0, Z0 \
	VMOVUPS Z0, (R9) \
	ADDQ BX, R9 \
	VPXORD Z2, Z2, Z2 \
	VMOVUPS Z2, (ACC)(DI) \
	VMOVUPS Z2, (ACC+64)(DI) \
	VMOVUPS Z2, (ACC+128)(DI) \
	VMOVUPS Z2, (ACC+192)(DI) \
	VMOVUPS Z2, (ACC+256)(DI) \
	VMOVUPS Z2, (ACC+320)(DI) \
	VMOVUPS Z2, (ACC+384)(DI) \
	VMOVUPS Z2, (ACC+448)(DI)

// Q4_0 and Q8_0 (32-element blocks): the eight groups of unsigned quants,
// Q4_0's nibbles n or Q8_0's x+128 (q4_0PackZ, q8_0PackZ), then the rows'
// d: Q4_0's as float32 (576 bytes a block), Q8_0's as the file stores
// them, float16 (544 bytes, the sixteen rows' blocks' own size, so a
// packed copy of weights read from memory reads no more than they do;
// VCVTPH2PS widens them exactly). Σ(n−8)·y = Σ n·y − 8·Σy and Σx·y =
// Σ(x+128)·y − 128·Σy, with Σy from the figures, exactly.

// ZGROUPS loads the block's groups into Z16-Z23.
#define ZGROUPS \
	VMOVDQU32 0(SI), Z16 \
	VMOVDQU32 64(SI), Z17 \
	VMOVDQU32 128(SI), Z18 \
	VMOVDQU32 192(SI), Z19 \
	VMOVDQU32 256(SI), Z20 \
	VMOVDQU32 320(SI), Z21 \
	VMOVDQU32 384(SI), Z22 \
	VMOVDQU32 448(SI), Z23

// ZLOAD loads the groups and a float32 d into Z24; ZLOADH a float16 d.
#define ZLOAD \
	ZGROUPS \
	VMOVUPS 512(SI), Z24

#define ZLOADH \
	ZGROUPS \
	VCVTPH2PS 512(SI), Z24

// ZACT adds the block's partials with activation row i (YA, XA) to its
// lane at ACC(DI)(AX); SHIFT is log2 of the quants' offset. A and B are
// scratch: two chains of four VPDPBUSD. ZDOTS is its sums, ZSCALE the
// rest; ZACTB is ZACT for rows 5 and 7, whose addresses are BX's (Y4BX).
#define ZACT(YA, XA, ACC, A, B, SHIFT) \
	ZDOTS(YA, A, B) \
	ZSCALE(XA, ACC, A, B, SHIFT)

#define ZACTB(YA, XA, ACC, A, B, SHIFT) \
	Y4BX \
	ZDOTS(YA, A, B) \
	X4BX \
	ZSCALE(XA, ACC, A, B, SHIFT)

#define ZDOTS(YA, A, B) \
	VPXORD A, A, A \
	VPXORD B, B, B \
	VPDPBUSD.BCST YA(2), Z16, A \
	VPDPBUSD.BCST YA(6), Z17, B \
	VPDPBUSD.BCST YA(10), Z18, A \
	VPDPBUSD.BCST YA(14), Z19, B \
	VPDPBUSD.BCST YA(18), Z20, A \
	VPDPBUSD.BCST YA(22), Z21, B \
	VPDPBUSD.BCST YA(26), Z22, A \
	VPDPBUSD.BCST YA(30), Z23, B

#define ZSCALE(XA, ACC, A, B, SHIFT) \
	VPADDD B, A, A \
	VPSLLD.BCST $SHIFT, XA(4), B \
	VPSUBD B, A, A \
	VCVTDQ2PS A, A \
	VMULPS.BCST XA(0), Z24, B \
	VMULPS B, A, A \
	VADDPS ACC(DI)(AX*1), A, A \
	VMOVUPS A, ACC(DI)(AX*1)

#define Q40x4 \
	ZLOAD \
	ZACT(YR0, FG0, 0, Z0, Z1, 3) \
	ZACT(YR1, FG1, 512, Z2, Z3, 3) \
	ZACT(YR2, FG2, 1024, Z4, Z5, 3) \
	ZACT(YR3, FG3, 1536, Z6, Z7, 3)

#define Q80x4 \
	ZLOADH \
	ZACT(YR0, FG0, 0, Z0, Z1, 7) \
	ZACT(YR1, FG1, 512, Z2, Z3, 7) \
	ZACT(YR2, FG2, 1024, Z4, Z5, 7) \
	ZACT(YR3, FG3, 1536, Z6, Z7, 7)

// Five to nine rows: a window of up to eight drafts is one call, each
// tile's weights loaded and looped over once, where calls of four and
// the rest loaded them again for each (for a single row, on 192-wide rows
// as dear as a call of two). Row i's scratch is Z2i and Z2i+1 up to row
// 7 (Z16-Z24 hold the block), row 8's Z25 and Z26.
#define Q40x5 \
	Q40x4 \
	ZACT(YR4, FG4, 2048, Z8, Z9, 3)

#define Q40x6 \
	Q40x5 \
	ZACTB(YB5, XB5, 2560, Z10, Z11, 3)

#define Q40x7 \
	Q40x6 \
	ZACT(YR6, FG6, 3072, Z12, Z13, 3)

#define Q40x8 \
	Q40x7 \
	ZACTB(YB7, XB7, 3584, Z14, Z15, 3)

#define Q40x9 \
	Q40x8 \
	ZACT(YR8, FG8, 4096, Z25, Z26, 3)

#define Q80x5 \
	Q80x4 \
	ZACT(YR4, FG4, 2048, Z8, Z9, 7)

#define Q80x6 \
	Q80x5 \
	ZACTB(YB5, XB5, 2560, Z10, Z11, 7)

#define Q80x7 \
	Q80x6 \
	ZACT(YR6, FG6, 3072, Z12, Z13, 7)

#define Q80x8 \
	Q80x7 \
	ZACTB(YB7, XB7, 3584, Z14, Z15, 7)

#define Q80x9 \
	Q80x8 \
	ZACT(YR8, FG8, 4096, Z25, Z26, 7)

#define Q40x3 \
	ZLOAD \
	ZACT(YR0, FG0, 0, Z0, Z1, 3) \
	ZACT(YR1, FG1, 512, Z2, Z3, 3) \
	ZACT(YR2, FG2, 1024, Z4, Z5, 3)

#define Q80x3 \
	ZLOADH \
	ZACT(YR0, FG0, 0, Z0, Z1, 7) \
	ZACT(YR1, FG1, 512, Z2, Z3, 7) \
	ZACT(YR2, FG2, 1024, Z4, Z5, 7)

#define Q40x2 \
	ZLOAD \
	ZACT(YR0, FG0, 0, Z0, Z1, 3) \
	ZACT(YR1, FG1, 512, Z2, Z3, 3)

#define Q80x2 \
	ZLOADH \
	ZACT(YR0, FG0, 0, Z0, Z1, 7) \
	ZACT(YR1, FG1, 512, Z2, Z3, 7)

#define Q40x1 \
	ZLOAD \
	ZACT(YR0, FG0, 0, Z0, Z1, 3)

#define Q80x1 \
	ZLOADH \
	ZACT(YR0, FG0, 0, Z0, Z1, 7)

#define OUT4 \
	ZOUT(0) \
	ZOUT(512) \
	ZOUT(1024) \
	ZOUT(1536)

#define OUT5 \
	OUT4 \
	ZOUT(2048)

#define OUT6 \
	OUT5 \
	ZOUT(2560)

#define OUT7 \
	OUT6 \
	ZOUT(3072)

#define OUT8 \
	OUT7 \
	ZOUT(3584)

#define OUT9 \
	OUT8 \
	ZOUT(4096)

#define OUT3 \
	ZOUT(0) \
	ZOUT(512) \
	ZOUT(1024)

#define OUT2 \
	ZOUT(0) \
	ZOUT(512)

// func q4_0TileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ4(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x4, OUT4)

// func q4_0TileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ1(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x1, ZOUT(0))

// func q8_0TileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ4(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x4, OUT4)

// func q8_0TileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ1(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x1, ZOUT(0))

// func q4_0TileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ5(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x5, OUT5)

// func q8_0TileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ5(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x5, OUT5)

// func q4_0TileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ6(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x6, OUT6)

// func q4_0TileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ7(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x7, OUT7)

// func q4_0TileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ8(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x8, OUT8)

// func q4_0TileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ9(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x9, OUT9)

// func q8_0TileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ6(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x6, OUT6)

// func q8_0TileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ7(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x7, OUT7)

// func q8_0TileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ8(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x8, OUT8)

// func q8_0TileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ9(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x9, OUT9)

// func q4_0TileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ3(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x3, OUT3)

// func q4_0TileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4_0TileZ2(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(576, 34, 8, 64, Q40x2, OUT2)

// func q8_0TileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ3(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x3, OUT3)

// func q8_0TileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q8_0TileZ2(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(544, 34, 8, 64, Q80x2, OUT2)

// ZGROUPS8 loads the eight groups at OFF(SI) into Z16-Z23.
#define ZGROUPS8(OFF) \
	VMOVDQU32 (OFF)(SI), Z16 \
	VMOVDQU32 (OFF+64)(SI), Z17 \
	VMOVDQU32 (OFF+128)(SI), Z18 \
	VMOVDQU32 (OFF+192)(SI), Z19 \
	VMOVDQU32 (OFF+256)(SI), Z20 \
	VMOVDQU32 (OFF+320)(SI), Z21 \
	VMOVDQU32 (OFF+384)(SI), Z22 \
	VMOVDQU32 (OFF+448)(SI), Z23

// Q4_K (5248 bytes a block repacked, q4KPackZ): per row, isum =
// Σ_s sc_s·Σ n·a over the eight sub-blocks of 32 and summs =
// Σ_j m_j·(bsum 2j + bsum 2j+1) (the activation block's own bsums,
// broadcast), exact in int32; then kPartial. A sub-block's Σ n·a is two
// VPDPBUSD chains of 16 elements each, whose sums (at most 16·15·128 in
// size) fit an int16: so VPDPWSSD with the scale as an int32 (its high
// word 0) multiplies each exactly by sc (the chain's high word, its
// sign, meets that 0) and adds it to isum.

// KZSUB adds sub-block S's sc·Σ n·a with activation row YA to ISUM,
// with the sub-block's groups in Z16-Z23. A and B are scratch.
#define KZSUB(S, YA, A, B, ISUM) \
	VPXORD A, A, A \
	VPXORD B, B, B \
	VPDPBUSD.BCST YA(4+32*(S)), Z16, A \
	VPDPBUSD.BCST YA(8+32*(S)), Z17, B \
	VPDPBUSD.BCST YA(12+32*(S)), Z18, A \
	VPDPBUSD.BCST YA(16+32*(S)), Z19, B \
	VPDPBUSD.BCST YA(20+32*(S)), Z20, A \
	VPDPBUSD.BCST YA(24+32*(S)), Z21, B \
	VPDPBUSD.BCST YA(28+32*(S)), Z22, A \
	VPDPBUSD.BCST YA(32+32*(S)), Z23, B \
	VPDPWSSD (4096+64*(S))(SI), A, ISUM \
	VPDPWSSD (4096+64*(S))(SI), B, ISUM

// KZMINS leaves in M row YA's summs, with the min pairs in Z16-Z23.
#define KZMINS(YA, M) \
	VPXORD M, M, M \
	VPDPWSSD.BCST YA(260), Z16, M \
	VPDPWSSD.BCST YA(264), Z17, M \
	VPDPWSSD.BCST YA(268), Z18, M \
	VPDPWSSD.BCST YA(272), Z19, M \
	VPDPWSSD.BCST YA(276), Z20, M \
	VPDPWSSD.BCST YA(280), Z21, M \
	VPDPWSSD.BCST YA(284), Z22, M \
	VPDPWSSD.BCST YA(288), Z23, M

// KZEND adds kPartial(isum, summs, d, dmin, dy) of row YA to its lane at
// ACC(DI)(AX); d and dmin are in Z24, Z25. Clobbers T1, T2.
#define KZEND(YA, ISUM, M, T1, T2, ACC) \
	VCVTDQ2PS ISUM, ISUM \
	VCVTDQ2PS M, M \
	VMULPS.BCST YA(0), Z24, T1 \
	VMULPS.BCST YA(0), Z25, T2 \
	VMULPS T1, ISUM, ISUM \
	VMULPS T2, M, M \
	VSUBPS M, ISUM, ISUM \
	VADDPS ACC(DI)(AX*1), ISUM, ISUM \
	VMOVUPS ISUM, ACC(DI)(AX*1)

#define KZSUB4(S) \
	ZGROUPS8(512*(S)) \
	KZSUB(S, YR0, Z0, Z1, Z8) \
	KZSUB(S, YR1, Z2, Z3, Z9) \
	KZSUB(S, YR2, Z4, Z5, Z10) \
	KZSUB(S, YR3, Z6, Z7, Z11)

#define Q4Kx4 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	KZSUB4(0) \
	KZSUB4(1) \
	KZSUB4(2) \
	KZSUB4(3) \
	KZSUB4(4) \
	KZSUB4(5) \
	KZSUB4(6) \
	KZSUB4(7) \
	ZGROUPS8(4608) \
	KZMINS(YR0, Z0) \
	KZMINS(YR1, Z1) \
	KZMINS(YR2, Z2) \
	KZMINS(YR3, Z3) \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZEND(YR0, Z8, Z0, Z12, Z13, 0) \
	KZEND(YR1, Z9, Z1, Z14, Z15, 512) \
	KZEND(YR2, Z10, Z2, Z12, Z13, 1024) \
	KZEND(YR3, Z11, Z3, Z14, Z15, 1536)

#define KZSUB3(S) \
	ZGROUPS8(512*(S)) \
	KZSUB(S, YR0, Z0, Z1, Z8) \
	KZSUB(S, YR1, Z2, Z3, Z9) \
	KZSUB(S, YR2, Z4, Z5, Z10)

#define Q4Kx3 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	KZSUB3(0) \
	KZSUB3(1) \
	KZSUB3(2) \
	KZSUB3(3) \
	KZSUB3(4) \
	KZSUB3(5) \
	KZSUB3(6) \
	KZSUB3(7) \
	ZGROUPS8(4608) \
	KZMINS(YR0, Z0) \
	KZMINS(YR1, Z1) \
	KZMINS(YR2, Z2) \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZEND(YR0, Z8, Z0, Z12, Z13, 0) \
	KZEND(YR1, Z9, Z1, Z14, Z15, 512) \
	KZEND(YR2, Z10, Z2, Z12, Z13, 1024)

#define KZSUB2(S) \
	ZGROUPS8(512*(S)) \
	KZSUB(S, YR0, Z0, Z1, Z8) \
	KZSUB(S, YR1, Z2, Z3, Z9)

#define Q4Kx2 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	KZSUB2(0) \
	KZSUB2(1) \
	KZSUB2(2) \
	KZSUB2(3) \
	KZSUB2(4) \
	KZSUB2(5) \
	KZSUB2(6) \
	KZSUB2(7) \
	ZGROUPS8(4608) \
	KZMINS(YR0, Z0) \
	KZMINS(YR1, Z1) \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZEND(YR0, Z8, Z0, Z12, Z13, 0) \
	KZEND(YR1, Z9, Z1, Z14, Z15, 512)

#define KZSUB1(S) \
	ZGROUPS8(512*(S)) \
	KZSUB(S, YR0, Z0, Z1, Z8)

#define Q4Kx1 \
	VPXORD Z8, Z8, Z8 \
	KZSUB1(0) \
	KZSUB1(1) \
	KZSUB1(2) \
	KZSUB1(3) \
	KZSUB1(4) \
	KZSUB1(5) \
	KZSUB1(6) \
	KZSUB1(7) \
	ZGROUPS8(4608) \
	KZMINS(YR0, Z0) \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZEND(YR0, Z8, Z0, Z12, Z13, 0)

// Q4_K of five to nine rows, built a row at a time: row i's isum in
// Z8+i (row 8's in Z30), its summs in Zi (row 8's in Z31), the scratch
// pairs taken in turn. KZZEROn clears the first n rows' isums, KZSUBn
// does a sub-block for them, KZMINSn and KZENDSn their mins and ends;
// from row 5 on, BX holds row 4's address through the block (Y4BX).
#define KZZERO4 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11

#define KZMINS4 \
	KZMINS(YR0, Z0) \
	KZMINS(YR1, Z1) \
	KZMINS(YR2, Z2) \
	KZMINS(YR3, Z3)

#define KZENDS4 \
	KZEND(YR0, Z8, Z0, Z26, Z27, 0) \
	KZEND(YR1, Z9, Z1, Z28, Z29, 512) \
	KZEND(YR2, Z10, Z2, Z26, Z27, 1024) \
	KZEND(YR3, Z11, Z3, Z28, Z29, 1536)

#define KZZERO5 \
	KZZERO4 \
	VPXORD Z12, Z12, Z12

#define KZSUB5(S) \
	KZSUB4(S) \
	KZSUB(S, YR4, Z0, Z1, Z12)

#define KZMINS5 \
	KZMINS4 \
	KZMINS(YR4, Z4)

#define KZENDS5 \
	KZENDS4 \
	KZEND(YR4, Z12, Z4, Z26, Z27, 2048)

#define KZZERO6 \
	KZZERO5 \
	Y4BX \
	VPXORD Z13, Z13, Z13

#define KZSUB6(S) \
	KZSUB5(S) \
	KZSUB(S, YB5, Z2, Z3, Z13)

#define KZMINS6 \
	KZMINS5 \
	KZMINS(YB5, Z5)

#define KZENDS6 \
	KZENDS5 \
	KZEND(YB5, Z13, Z5, Z28, Z29, 2560)

#define KZZERO7 \
	KZZERO6 \
	VPXORD Z14, Z14, Z14

#define KZSUB7(S) \
	KZSUB6(S) \
	KZSUB(S, YR6, Z4, Z5, Z14)

#define KZMINS7 \
	KZMINS6 \
	KZMINS(YR6, Z6)

#define KZENDS7 \
	KZENDS6 \
	KZEND(YR6, Z14, Z6, Z26, Z27, 3072)

#define KZZERO8 \
	KZZERO7 \
	VPXORD Z15, Z15, Z15

#define KZSUB8(S) \
	KZSUB7(S) \
	KZSUB(S, YB7, Z6, Z7, Z15)

#define KZMINS8 \
	KZMINS7 \
	KZMINS(YB7, Z7)

#define KZENDS8 \
	KZENDS7 \
	KZEND(YB7, Z15, Z7, Z28, Z29, 3584)

#define KZZERO9 \
	KZZERO8 \
	VPXORD Z30, Z30, Z30

#define KZSUB9(S) \
	KZSUB8(S) \
	KZSUB(S, YR8, Z0, Z1, Z30)

#define KZMINS9 \
	KZMINS8 \
	KZMINS(YR8, Z31)

#define KZENDS9 \
	KZENDS8 \
	KZEND(YR8, Z30, Z31, Z26, Z27, 4096)

#define Q4Kx5 \
	KZZERO5 \
	KZSUB5(0) \
	KZSUB5(1) \
	KZSUB5(2) \
	KZSUB5(3) \
	KZSUB5(4) \
	KZSUB5(5) \
	KZSUB5(6) \
	KZSUB5(7) \
	ZGROUPS8(4608) \
	KZMINS5 \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZENDS5

#define Q4Kx6 \
	KZZERO6 \
	KZSUB6(0) \
	KZSUB6(1) \
	KZSUB6(2) \
	KZSUB6(3) \
	KZSUB6(4) \
	KZSUB6(5) \
	KZSUB6(6) \
	KZSUB6(7) \
	ZGROUPS8(4608) \
	KZMINS6 \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZENDS6

#define Q4Kx7 \
	KZZERO7 \
	KZSUB7(0) \
	KZSUB7(1) \
	KZSUB7(2) \
	KZSUB7(3) \
	KZSUB7(4) \
	KZSUB7(5) \
	KZSUB7(6) \
	KZSUB7(7) \
	ZGROUPS8(4608) \
	KZMINS7 \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZENDS7

#define Q4Kx8 \
	KZZERO8 \
	KZSUB8(0) \
	KZSUB8(1) \
	KZSUB8(2) \
	KZSUB8(3) \
	KZSUB8(4) \
	KZSUB8(5) \
	KZSUB8(6) \
	KZSUB8(7) \
	ZGROUPS8(4608) \
	KZMINS8 \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZENDS8

#define Q4Kx9 \
	KZZERO9 \
	KZSUB9(0) \
	KZSUB9(1) \
	KZSUB9(2) \
	KZSUB9(3) \
	KZSUB9(4) \
	KZSUB9(5) \
	KZSUB9(6) \
	KZSUB9(7) \
	ZGROUPS8(4608) \
	KZMINS9 \
	VMOVUPS 5120(SI), Z24 \
	VMOVUPS 5184(SI), Z25 \
	KZENDS9

// func q4KTileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ4(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx4, OUT4)

// func q4KTileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ1(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx1, ZOUT(0))

// func q4KTileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ3(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx3, OUT3)

// func q4KTileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ2(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx2, OUT2)

// Q6_K (5696 bytes a block repacked, q6KPackZ): per row, isum =
// Σ_s sc_s·Σ q·a − 32·Σ_s sc_s·Σ_s a over the sixteen sub-blocks of 16,
// the second from the activation's sums of 16 (its figures, VPDPWSSD
// with the rows' scale pairs), exactly Σ_s sc_s·Σ(q−32)·a; then kPartial
// with no mins: isum·(d·dy) − 0·(0·dy), as the Go kernel computes it (the
// second term is NaN where dy is not finite).

// Q6ZSUB adds sub-block S's sc·Σ q·a with activation row YA to ISUM;
// the sub-block's four groups are in G0-G3. A is scratch.
#define Q6ZSUB(S, YA, A, ISUM, G0, G1, G2, G3) \
	VPXORD A, A, A \
	VPDPBUSD.BCST YA(4+16*(S)), G0, A \
	VPDPBUSD.BCST YA(8+16*(S)), G1, A \
	VPDPBUSD.BCST YA(12+16*(S)), G2, A \
	VPDPBUSD.BCST YA(16+16*(S)), G3, A \
	VPMULLD (4096+64*(S))(SI), A, A \
	VPADDD A, ISUM, ISUM

// Q6ZPAIR does sub-blocks 2T and 2T+1 for row YA, one chain each.
#define Q6ZPAIR(T, YA, A, B, ISUM) \
	Q6ZSUB(2*(T), YA, A, ISUM, Z16, Z17, Z18, Z19) \
	Q6ZSUB(2*(T)+1, YA, B, ISUM, Z20, Z21, Z22, Z23)

// Q6ZFIX subtracts 32·Σ_s sc_s·Σ_s a of row FA from ISUM, with the
// scale pairs in Z16-Z23. M is scratch.
#define Q6ZFIX(FA, ISUM, M) \
	VPXORD M, M, M \
	VPDPWSSD.BCST FA(0), Z16, M \
	VPDPWSSD.BCST FA(4), Z17, M \
	VPDPWSSD.BCST FA(8), Z18, M \
	VPDPWSSD.BCST FA(12), Z19, M \
	VPDPWSSD.BCST FA(16), Z20, M \
	VPDPWSSD.BCST FA(20), Z21, M \
	VPDPWSSD.BCST FA(24), Z22, M \
	VPDPWSSD.BCST FA(28), Z23, M \
	VPSLLD $5, M, M \
	VPSUBD M, ISUM, ISUM

// Q6ZEND adds the partial of row YA to its lane at ACC(DI)(AX); d is in
// Z24, zeros in Z26. Clobbers T1, T2.
#define Q6ZEND(YA, ISUM, T1, T2, ACC) \
	VCVTDQ2PS ISUM, ISUM \
	VMULPS.BCST YA(0), Z24, T1 \
	VMULPS T1, ISUM, ISUM \
	VMULPS.BCST YA(0), Z26, T2 \
	VMULPS T2, Z26, T2 \
	VSUBPS T2, ISUM, ISUM \
	VADDPS ACC(DI)(AX*1), ISUM, ISUM \
	VMOVUPS ISUM, ACC(DI)(AX*1)

#define Q6ZPAIR4(T) \
	ZGROUPS8(512*(T)) \
	Q6ZPAIR(T, YR0, Z0, Z1, Z8) \
	Q6ZPAIR(T, YR1, Z2, Z3, Z9) \
	Q6ZPAIR(T, YR2, Z4, Z5, Z10) \
	Q6ZPAIR(T, YR3, Z6, Z7, Z11)

#define Q6Kx4 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	Q6ZPAIR4(0) \
	Q6ZPAIR4(1) \
	Q6ZPAIR4(2) \
	Q6ZPAIR4(3) \
	Q6ZPAIR4(4) \
	Q6ZPAIR4(5) \
	Q6ZPAIR4(6) \
	Q6ZPAIR4(7) \
	ZGROUPS8(5120) \
	Q6ZFIX(FG0, Z8, Z0) \
	Q6ZFIX(FG1, Z9, Z1) \
	Q6ZFIX(FG2, Z10, Z2) \
	Q6ZFIX(FG3, Z11, Z3) \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZEND(YR0, Z8, Z12, Z13, 0) \
	Q6ZEND(YR1, Z9, Z14, Z15, 512) \
	Q6ZEND(YR2, Z10, Z12, Z13, 1024) \
	Q6ZEND(YR3, Z11, Z14, Z15, 1536)

#define Q6ZPAIR3(T) \
	ZGROUPS8(512*(T)) \
	Q6ZPAIR(T, YR0, Z0, Z1, Z8) \
	Q6ZPAIR(T, YR1, Z2, Z3, Z9) \
	Q6ZPAIR(T, YR2, Z4, Z5, Z10)

#define Q6Kx3 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	Q6ZPAIR3(0) \
	Q6ZPAIR3(1) \
	Q6ZPAIR3(2) \
	Q6ZPAIR3(3) \
	Q6ZPAIR3(4) \
	Q6ZPAIR3(5) \
	Q6ZPAIR3(6) \
	Q6ZPAIR3(7) \
	ZGROUPS8(5120) \
	Q6ZFIX(FG0, Z8, Z0) \
	Q6ZFIX(FG1, Z9, Z1) \
	Q6ZFIX(FG2, Z10, Z2) \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZEND(YR0, Z8, Z12, Z13, 0) \
	Q6ZEND(YR1, Z9, Z14, Z15, 512) \
	Q6ZEND(YR2, Z10, Z12, Z13, 1024)

#define Q6ZPAIR2(T) \
	ZGROUPS8(512*(T)) \
	Q6ZPAIR(T, YR0, Z0, Z1, Z8) \
	Q6ZPAIR(T, YR1, Z2, Z3, Z9)

#define Q6Kx2 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	Q6ZPAIR2(0) \
	Q6ZPAIR2(1) \
	Q6ZPAIR2(2) \
	Q6ZPAIR2(3) \
	Q6ZPAIR2(4) \
	Q6ZPAIR2(5) \
	Q6ZPAIR2(6) \
	Q6ZPAIR2(7) \
	ZGROUPS8(5120) \
	Q6ZFIX(FG0, Z8, Z0) \
	Q6ZFIX(FG1, Z9, Z1) \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZEND(YR0, Z8, Z12, Z13, 0) \
	Q6ZEND(YR1, Z9, Z14, Z15, 512)

#define Q6ZPAIR1(T) \
	ZGROUPS8(512*(T)) \
	Q6ZPAIR(T, YR0, Z0, Z1, Z8)

#define Q6Kx1 \
	VPXORD Z8, Z8, Z8 \
	Q6ZPAIR1(0) \
	Q6ZPAIR1(1) \
	Q6ZPAIR1(2) \
	Q6ZPAIR1(3) \
	Q6ZPAIR1(4) \
	Q6ZPAIR1(5) \
	Q6ZPAIR1(6) \
	Q6ZPAIR1(7) \
	ZGROUPS8(5120) \
	Q6ZFIX(FG0, Z8, Z0) \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZEND(YR0, Z8, Z12, Z13, 0)

// Q6_K of five to nine rows, built a row at a time: row i's isum in
// Z8+i (row 8's in Z25), the scratch pairs taken in turn. Q6ZZEROn clears
// the first n rows' isums, Q6ZPAIRn does two sub-blocks for them,
// Q6ZFIXESn and Q6ZENDSn their fixes and ends; from row 5 on, BX holds
// row 4's address through the block (Y4BX), and rows 5 and 7 take their
// fixes with it holding row 4's figures instead (Q6ZFIXB).
#define Q6ZFIXB(FA, ISUM, M) \
	X4BX \
	Q6ZFIX(FA, ISUM, M) \
	Y4BX

#define Q6ZZERO4 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11

#define Q6ZFIXES4 \
	Q6ZFIX(FG0, Z8, Z0) \
	Q6ZFIX(FG1, Z9, Z2) \
	Q6ZFIX(FG2, Z10, Z4) \
	Q6ZFIX(FG3, Z11, Z6)

#define Q6ZENDS4 \
	Q6ZEND(YR0, Z8, Z27, Z28, 0) \
	Q6ZEND(YR1, Z9, Z29, Z30, 512) \
	Q6ZEND(YR2, Z10, Z27, Z28, 1024) \
	Q6ZEND(YR3, Z11, Z29, Z30, 1536)

#define Q6ZZERO5 \
	Q6ZZERO4 \
	VPXORD Z12, Z12, Z12

#define Q6ZPAIR5(T) \
	Q6ZPAIR4(T) \
	Q6ZPAIR(T, YR4, Z0, Z1, Z12)

#define Q6ZFIXES5 \
	Q6ZFIXES4 \
	Q6ZFIX(FG4, Z12, Z0)

#define Q6ZENDS5 \
	Q6ZENDS4 \
	Q6ZEND(YR4, Z12, Z27, Z28, 2048)

#define Q6ZZERO6 \
	Q6ZZERO5 \
	Y4BX \
	VPXORD Z13, Z13, Z13

#define Q6ZPAIR6(T) \
	Q6ZPAIR5(T) \
	Q6ZPAIR(T, YB5, Z2, Z3, Z13)

#define Q6ZFIXES6 \
	Q6ZFIXES5 \
	Q6ZFIXB(XB5, Z13, Z2)

#define Q6ZENDS6 \
	Q6ZENDS5 \
	Q6ZEND(YB5, Z13, Z29, Z30, 2560)

#define Q6ZZERO7 \
	Q6ZZERO6 \
	VPXORD Z14, Z14, Z14

#define Q6ZPAIR7(T) \
	Q6ZPAIR6(T) \
	Q6ZPAIR(T, YR6, Z4, Z5, Z14)

#define Q6ZFIXES7 \
	Q6ZFIXES6 \
	Q6ZFIX(FG6, Z14, Z4)

#define Q6ZENDS7 \
	Q6ZENDS6 \
	Q6ZEND(YR6, Z14, Z27, Z28, 3072)

#define Q6ZZERO8 \
	Q6ZZERO7 \
	VPXORD Z15, Z15, Z15

#define Q6ZPAIR8(T) \
	Q6ZPAIR7(T) \
	Q6ZPAIR(T, YB7, Z6, Z7, Z15)

#define Q6ZFIXES8 \
	Q6ZFIXES7 \
	Q6ZFIXB(XB7, Z15, Z6)

#define Q6ZENDS8 \
	Q6ZENDS7 \
	Q6ZEND(YB7, Z15, Z29, Z30, 3584)

#define Q6ZZERO9 \
	Q6ZZERO8 \
	VPXORD Z25, Z25, Z25

#define Q6ZPAIR9(T) \
	Q6ZPAIR8(T) \
	Q6ZPAIR(T, YR8, Z0, Z1, Z25)

#define Q6ZFIXES9 \
	Q6ZFIXES8 \
	Q6ZFIX(FG8, Z25, Z0)

#define Q6ZENDS9 \
	Q6ZENDS8 \
	Q6ZEND(YR8, Z25, Z27, Z28, 4096)

#define Q6Kx5 \
	Q6ZZERO5 \
	Q6ZPAIR5(0) \
	Q6ZPAIR5(1) \
	Q6ZPAIR5(2) \
	Q6ZPAIR5(3) \
	Q6ZPAIR5(4) \
	Q6ZPAIR5(5) \
	Q6ZPAIR5(6) \
	Q6ZPAIR5(7) \
	ZGROUPS8(5120) \
	Q6ZFIXES5 \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZENDS5

#define Q6Kx6 \
	Q6ZZERO6 \
	Q6ZPAIR6(0) \
	Q6ZPAIR6(1) \
	Q6ZPAIR6(2) \
	Q6ZPAIR6(3) \
	Q6ZPAIR6(4) \
	Q6ZPAIR6(5) \
	Q6ZPAIR6(6) \
	Q6ZPAIR6(7) \
	ZGROUPS8(5120) \
	Q6ZFIXES6 \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZENDS6

#define Q6Kx7 \
	Q6ZZERO7 \
	Q6ZPAIR7(0) \
	Q6ZPAIR7(1) \
	Q6ZPAIR7(2) \
	Q6ZPAIR7(3) \
	Q6ZPAIR7(4) \
	Q6ZPAIR7(5) \
	Q6ZPAIR7(6) \
	Q6ZPAIR7(7) \
	ZGROUPS8(5120) \
	Q6ZFIXES7 \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZENDS7

#define Q6Kx8 \
	Q6ZZERO8 \
	Q6ZPAIR8(0) \
	Q6ZPAIR8(1) \
	Q6ZPAIR8(2) \
	Q6ZPAIR8(3) \
	Q6ZPAIR8(4) \
	Q6ZPAIR8(5) \
	Q6ZPAIR8(6) \
	Q6ZPAIR8(7) \
	ZGROUPS8(5120) \
	Q6ZFIXES8 \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZENDS8

#define Q6Kx9 \
	Q6ZZERO9 \
	Q6ZPAIR9(0) \
	Q6ZPAIR9(1) \
	Q6ZPAIR9(2) \
	Q6ZPAIR9(3) \
	Q6ZPAIR9(4) \
	Q6ZPAIR9(5) \
	Q6ZPAIR9(6) \
	Q6ZPAIR9(7) \
	ZGROUPS8(5120) \
	Q6ZFIXES9 \
	VMOVUPS 5632(SI), Z24 \
	VPXORD Z26, Z26, Z26 \
	Q6ZENDS9

// func q6KTileZ4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ4(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx4, OUT4)

// func q6KTileZ1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ1(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx1, ZOUT(0))

// func q6KTileZ3(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ3(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx3, OUT3)

// func q6KTileZ2(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ2(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx2, OUT2)

// func q4KTileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ5(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx5, OUT5)

// func q4KTileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ6(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx6, OUT6)

// func q4KTileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ7(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx7, OUT7)

// func q4KTileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ8(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx8, OUT8)

// func q4KTileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q4KTileZ9(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5248, 292, 32, 64, Q4Kx9, OUT9)

// func q6KTileZ5(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ5(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx5, OUT5)

// func q6KTileZ6(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ6(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx6, OUT6)

// func q6KTileZ7(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ7(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx7, OUT7)

// func q6KTileZ8(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ8(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx8, OUT8)

// func q6KTileZ9(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int, pf *byte, pfLines, pfSpan, pfSkip, pfCol int)
TEXT ·q6KTileZ9(SB), NOSPLIT, $0-120
	BANDARGS(6)
	BANDLOOP(5696, 292, 32, 64, Q6Kx9, OUT9)

// func prefetchRows(w *byte, rs, rows, bytes int)
//
// prefetchRows asks for the lines of the first bytes bytes of each of
// rows rows, rs bytes apart, to be brought into L2 (PREFETCHT1).
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ rs+8(FP), R9
	MOVQ rows+16(FP), CX
	MOVQ bytes+24(FP), DX
	TESTQ CX, CX
	JZ   pdone
prow:
	XORQ AX, AX
pline:
	PREFETCHT1 (SI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, DX
	JLT  pline
	PREFETCHT1 -1(SI)(DX*1)
	ADDQ R9, SI
	DECQ CX
	JNZ  prow
pdone:
	RET

// func q4_0PackZ16(dst, w *byte, rs, blocks int)
//
// q4_0PackZ16 repacks sixteen rows of Q4_0 into the sixteen-row tile, as
// q4_0PackZ does eight into each half, with AVX-512 shuffles: each row's
// 16 bytes of nibbles go to a 128-bit lane (four rows a vector), two
// rounds of permutes gather dword j of all sixteen rows (P_j: elements
// 4j..4j+3 in the low nibbles, 16+4j..16+4j+3 in the high), masked and
// shifted into groups j and j+4; the rows' d come by one gather.
//
// Registers: SI rows 0-7 (ROW0-ROW7 of tile_amd64.h), R13 rows 8-15 (the
// same offsets), Z28 and Z29 the first round's permutes, Z30 0x0f bytes,
// Z31 the gather's offsets r·rs.
#define HROW0(OFF) (OFF)(R13)
#define HROW1(OFF) (OFF)(R13)(R9*1)
#define HROW2(OFF) (OFF)(R13)(R9*2)
#define HROW3(OFF) (OFF)(R13)(R10*1)
#define HROW4(OFF) (OFF)(R13)(R9*4)
#define HROW5(OFF) (OFF)(R13)(R11*1)
#define HROW6(OFF) (OFF)(R13)(R10*2)
#define HROW7(OFF) (OFF)(R13)(R12*1)

// LANES4 loads the 16 bytes at OFF of rows A-D into the lanes of Z (X its
// low half).
#define LANES4(Z, X, A, B, C, D, OFF) \
	VMOVDQU A(OFF), X \
	VINSERTI32X4 $1, B(OFF), Z, Z \
	VINSERTI32X4 $2, C(OFF), Z, Z \
	VINSERTI32X4 $3, D(OFF), Z, Z

// NIBGROUPS stores the nibbles of P as groups J (low) and J+4 (high).
#define NIBGROUPS(P, J) \
	VPANDD Z30, P, Z12 \
	VMOVDQU32 Z12, (64*(J))(DI) \
	VPSRLD $4, P, P \
	VPANDD Z30, P, P \
	VMOVDQU32 P, (64*(J)+256)(DI)

TEXT ·q4_0PackZ16(SB), NOSPLIT, $0-32
	PACKARGS
	LEAQ (SI)(R9*8), R13
	VMOVDQU32 zperm01<>(SB), Z28
	VMOVDQU32 zperm23<>(SB), Z29
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z30
	VPBROADCASTD R9, Z31
	VPMULLD zlanes<>(SB), Z31, Z31
	TESTQ CX, CX
	JZ   done
pack:
	LANES4(Z0, X0, ROW0, ROW1, ROW2, ROW3, 2)
	LANES4(Z1, X1, ROW4, ROW5, ROW6, ROW7, 2)
	LANES4(Z2, X2, HROW0, HROW1, HROW2, HROW3, 2)
	LANES4(Z3, X3, HROW4, HROW5, HROW6, HROW7, 2)
	// Dwords 0-1 (Z4, Z5) and 2-3 (Z0, Z2) of rows 0-7 and 8-15.
	VMOVDQA32 Z0, Z4
	VPERMT2D Z1, Z28, Z4
	VPERMT2D Z1, Z29, Z0
	VMOVDQA32 Z2, Z5
	VPERMT2D Z3, Z28, Z5
	VPERMT2D Z3, Z29, Z2
	// P_j: dword j of rows 0-15.
	VSHUFI32X4 $0x44, Z5, Z4, Z6
	VSHUFI32X4 $0xee, Z5, Z4, Z7
	VSHUFI32X4 $0x44, Z2, Z0, Z8
	VSHUFI32X4 $0xee, Z2, Z0, Z9
	NIBGROUPS(Z6, 0)
	NIBGROUPS(Z7, 1)
	NIBGROUPS(Z8, 2)
	NIBGROUPS(Z9, 3)
	// d: the first dword of each row's block, truncated to its fp16.
	KXNORW K1, K1, K1
	VPGATHERDD (SI)(Z31*1), K1, Z10
	VPMOVDW Z10, Y10
	VCVTPH2PS Y10, Z10
	VMOVUPS Z10, 512(DI)
	ADDQ $18, SI
	ADDQ $18, R13
	ADDQ $576, DI
	DECQ CX
	JNZ  pack
done:
	VZEROUPPER
	RET

// zperm01 and zperm23: lane L takes dword (L mod 8)·4 + L/8 (+2) of the
// two vectors of four rows each: dwords 0 and 1 (2 and 3) of rows 0-7.
DATA zperm01<>+0(SB)/4, $0
DATA zperm01<>+4(SB)/4, $4
DATA zperm01<>+8(SB)/4, $8
DATA zperm01<>+12(SB)/4, $12
DATA zperm01<>+16(SB)/4, $16
DATA zperm01<>+20(SB)/4, $20
DATA zperm01<>+24(SB)/4, $24
DATA zperm01<>+28(SB)/4, $28
DATA zperm01<>+32(SB)/4, $1
DATA zperm01<>+36(SB)/4, $5
DATA zperm01<>+40(SB)/4, $9
DATA zperm01<>+44(SB)/4, $13
DATA zperm01<>+48(SB)/4, $17
DATA zperm01<>+52(SB)/4, $21
DATA zperm01<>+56(SB)/4, $25
DATA zperm01<>+60(SB)/4, $29
GLOBL zperm01<>(SB), RODATA|NOPTR, $64
DATA zperm23<>+0(SB)/4, $2
DATA zperm23<>+4(SB)/4, $6
DATA zperm23<>+8(SB)/4, $10
DATA zperm23<>+12(SB)/4, $14
DATA zperm23<>+16(SB)/4, $18
DATA zperm23<>+20(SB)/4, $22
DATA zperm23<>+24(SB)/4, $26
DATA zperm23<>+28(SB)/4, $30
DATA zperm23<>+32(SB)/4, $3
DATA zperm23<>+36(SB)/4, $7
DATA zperm23<>+40(SB)/4, $11
DATA zperm23<>+44(SB)/4, $15
DATA zperm23<>+48(SB)/4, $19
DATA zperm23<>+52(SB)/4, $23
DATA zperm23<>+56(SB)/4, $27
DATA zperm23<>+60(SB)/4, $31
GLOBL zperm23<>(SB), RODATA|NOPTR, $64
DATA zlanes<>+0(SB)/4, $0
DATA zlanes<>+4(SB)/4, $1
DATA zlanes<>+8(SB)/4, $2
DATA zlanes<>+12(SB)/4, $3
DATA zlanes<>+16(SB)/4, $4
DATA zlanes<>+20(SB)/4, $5
DATA zlanes<>+24(SB)/4, $6
DATA zlanes<>+28(SB)/4, $7
DATA zlanes<>+32(SB)/4, $8
DATA zlanes<>+36(SB)/4, $9
DATA zlanes<>+40(SB)/4, $10
DATA zlanes<>+44(SB)/4, $11
DATA zlanes<>+48(SB)/4, $12
DATA zlanes<>+52(SB)/4, $13
DATA zlanes<>+56(SB)/4, $14
DATA zlanes<>+60(SB)/4, $15
GLOBL zlanes<>(SB), RODATA|NOPTR, $64
