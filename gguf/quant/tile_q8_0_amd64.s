//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"
#include "tile_amd64.h"

// Q8_0 tile: eight rows of Q8_0 times a Q8_0 activation. VPMADDUBSW
// wants one unsigned side, so the weights are repacked as x+128 = 16h + l
// (h, l < 16): two planes of nibbles, 256 bytes each (h, then l), then
// the rows' d as float32 (544 bytes a block). Σx·y = 16·Σh·y + Σl·y −
// 128·Σy, exactly.

// TBLOCK adds block J's partials to ACC.
#define TBLOCK(J, ACC) \
	HALVES(34*(J)+2, Y5, Y6) \
	NIB8(544*(J), Y5, Y6, Y2) \
	NIB8(544*(J)+256, Y5, Y6, Y4) \
	VPMADDWD Y7, Y2, Y2 \
	VPSLLD $4, Y2, Y2 \
	VPMADDWD Y7, Y4, Y4 \
	VPADDD Y4, Y2, Y2 \
	VPBROADCASTD (8*(J)+4)(R8), Y3 \
	VPSLLD $7, Y3, Y3 \
	VPSUBD Y3, Y2, Y2 \
	SCALEADD(Y2, 544*(J)+512, 8*(J), ACC)

// func q8_0Tile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q8_0Tile(SB), NOSPLIT, $0-48
	TILEARGS
	ONES16(X7, Y7)
	TILELOOP(544, 34, 8)

// PLANE(R, ROW, SHIFT) leaves in R the nibble SHIFT (4: high, 0: low) of
// each of the 32 bytes x+128 of the block at ROW(2); Y14 holds 0x0f
// bytes, Y13 0x80 bytes.
#define PLANE(R, X, ROW, SHIFT, _1, _2, _3) \
	VMOVDQU ROW(2), R \
	VPXOR Y13, R, R \
	VPSRLW $SHIFT, R, R \
	VPAND Y14, R, R

// func q8_0Pack(dst, w *byte, rs, blocks int)
TEXT ·q8_0Pack(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	BCASTB(0x0f, X14, Y14)
	BCASTB(0x80, X13, Y13)
	ROWS8(PLANE, 4, 0, 0, 0)
	TRANSPOSE8(0)
	BCASTB(0x0f, X14, Y14)
	BCASTB(0x80, X13, Y13)
	ROWS8(PLANE, 0, 0, 0, 0)
	TRANSPOSE8(256)
	HALVES8(0, 512)
	ADDQ $34, SI
	ADDQ $544, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET
