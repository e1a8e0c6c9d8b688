//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"
#include "tile_amd64.h"

// Q4_0 tile: eight rows of Q4_0 times a Q8_0 activation. Repacked block
// (288 bytes): unsigned nibbles n in groups (256), the rows' d as float32
// (32). Σ(n−8)·y = Σ n·y − 8·Σy, with Σy from the activation's figures
// (float32 dy, int32 Σy a block), exactly.

// TBLOCK adds block J's partials to ACC.
#define TBLOCK(J, ACC) \
	HALVES(34*(J)+2, Y5, Y6) \
	NIB8(288*(J), Y5, Y6, Y2) \
	VPMADDWD Y7, Y2, Y2 \
	VPBROADCASTD (8*(J)+4)(R8), Y3 \
	VPSLLD $3, Y3, Y3 \
	VPSUBD Y3, Y2, Y2 \
	SCALEADD(Y2, 288*(J)+256, 8*(J), ACC)

// func q4_0Tile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q4_0Tile(SB), NOSPLIT, $0-48
	TILEARGS
	ONES16(X7, Y7)
	TILELOOP(288, 34, 8)

// UNPACK leaves in R the 32 nibbles of the block at ROW(2): elements 0-15
// (low nibbles) then 16-31; Y14 holds 0x0f bytes. Clobbers X15.
#define UNPACK(R, X, ROW, _1, _2, _3, _4) \
	VMOVDQU ROW(2), X \
	VPSRLW $4, X, X15 \
	VINSERTI128 $1, X15, R, R \
	VPAND Y14, R, R

// func q4_0Pack(dst, w *byte, rs, blocks int)
TEXT ·q4_0Pack(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	BCASTB(0x0f, X14, Y14)
	ROWS8(UNPACK, 0, 0, 0, 0)
	TRANSPOSE8(0)
	HALVES8(0, 256)
	ADDQ $18, SI
	ADDQ $288, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET
