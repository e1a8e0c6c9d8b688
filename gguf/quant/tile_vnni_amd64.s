//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"
#include "tile_amd64.h"

// Q4_0 and Q8_0 tiles for processors with AVX512-VNNI (and AVX512VL, for
// its 256-bit form): VPDPBUSD multiplies unsigned bytes by signed ones
// and adds each group of four into an int32 lane, with no int16 step to
// saturate, so one instruction does a group of eight rows. The weights
// are unsigned: Q4_0's nibbles n as q4_0Pack leaves them, Q8_0's quants
// plus 128 (q8_0PackU: 256 bytes of x+128 in groups, then d as float32);
// the activation's Σy takes the offset back out: Σ(n−8)·y = Σ n·y −
// 8·Σy, Σ x·y = Σ(x+128)·y − 128·Σy, exactly. Two accumulators a block
// keep the chains of VPDPBUSD short.

// VGROUP adds group K of block J (repacked at 288J), whose four
// activation bytes are dword SEL of both lanes of A.
#define VGROUP(J, K, A, SEL, ACC) \
	VMOVDQU (288*(J)+32*(K))(SI), Y0 \
	VPSHUFD $SEL, A, Y1 \
	VPDPBUSD Y1, Y0, ACC

// VBLOCK adds block J's partials to ACC; SHIFT is log2 of the offset.
// The activation's 32 bytes come in two loads (each half in both lanes),
// and VPSHUFD spreads each group's four bytes, rather than a broadcast
// load a group.
#define VBLOCK(J, ACC, SHIFT) \
	VPXOR Y2, Y2, Y2 \
	VPXOR Y4, Y4, Y4 \
	VBROADCASTI128 (34*(J)+2)(DX), Y5 \
	VBROADCASTI128 (34*(J)+18)(DX), Y6 \
	VGROUP(J, 0, Y5, 0x00, Y2) \
	VGROUP(J, 1, Y5, 0x55, Y4) \
	VGROUP(J, 2, Y5, 0xaa, Y2) \
	VGROUP(J, 3, Y5, 0xff, Y4) \
	VGROUP(J, 4, Y6, 0x00, Y2) \
	VGROUP(J, 5, Y6, 0x55, Y4) \
	VGROUP(J, 6, Y6, 0xaa, Y2) \
	VGROUP(J, 7, Y6, 0xff, Y4) \
	VPADDD Y4, Y2, Y2 \
	VPBROADCASTD (8*(J)+4)(R8), Y3 \
	VPSLLD $SHIFT, Y3, Y3 \
	VPSUBD Y3, Y2, Y2 \
	SCALEADD(Y2, 288*(J)+256, 8*(J), ACC)

#define TBLOCK(J, ACC) VBLOCK(J, ACC, 3)

// func q4_0TileVNNI(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q4_0TileVNNI(SB), NOSPLIT, $0-48
	TILEARGS
	TILELOOP(288, 34, 8)

#undef TBLOCK
#define TBLOCK(J, ACC) VBLOCK(J, ACC, 7)

// func q8_0TileVNNI(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q8_0TileVNNI(SB), NOSPLIT, $0-48
	TILEARGS
	TILELOOP(288, 34, 8)

#define UROW(R, X, ROW, _1, _2, _3, _4) \
	VMOVDQU ROW(2), R \
	VPXOR Y13, R, R

// func q8_0PackU(dst, w *byte, rs, blocks int)
TEXT ·q8_0PackU(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	BCASTB(0x80, X13, Y13)
	ROWS8(UROW, 0, 0, 0, 0)
	TRANSPOSE8(0)
	HALVES8(0, 256)
	ADDQ $34, SI
	ADDQ $288, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET

// func q8_0PackUZ(dst, w *byte, rs, blocks, d int)
//
// q8_0PackUZ is q8_0PackU for one half of a sixteen-row tile of
// tile_z_amd64.s (rows 0-7 at dst, rows 8-15 at dst+32): groups 64 bytes
// apart, then the half's eight d as they are stored, float16, at dst+d
// (512 for the first half, 496 for the second: the sixteen d at 512 of
// the tile), 544 bytes a block — the sixteen rows' blocks' own size.
TEXT ·q8_0PackUZ(SB), NOSPLIT, $0-40
	PACKARGS
	MOVQ d+32(FP), R13
pack:
	BCASTB(0x80, X13, Y13)
	ROWS8(UROW, 0, 0, 0, 0)
	TRANSPOSE8S(0, 64)
	HALVES8H(0)
	VMOVDQU X0, (DI)(R13*1)
	ADDQ $34, SI
	ADDQ $544, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET
