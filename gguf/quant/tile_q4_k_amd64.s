//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"
#include "tile_amd64.h"

// Q4_K tile: eight rows of Q4_K times a Q8_K activation. Repacked block
// (2624 bytes): the unsigned nibbles in groups, sub-block s (elements
// 32s..32s+31) at 256s; at 2048 + 32s the rows' scale s as int16 pairs
// (sc, sc); at 2304 + 32j their min j as (m, m); the rows' d at 2560 and
// dmin at 2592 as float32. Per row, isum = Σ_s sc_s·Σ n·a and summs =
// Σ_j m_j·(bsum 2j + bsum 2j+1), exact in int32, then kPartial.

// KSUB adds sub-block S's Σ sc·Σ n·a to Y4.
#define KSUB(S) \
	HALVES(4+32*(S), Y8, Y9) \
	NIB8(256*(S), Y8, Y9, Y2) \
	VPMADDWD (2048+32*(S))(SI), Y2, Y2 \
	VPADDD Y2, Y4, Y4

// KMIN adds m_j·(bsum 2j + bsum 2j+1) to Y5.
#define KMIN(J) \
	VPBROADCASTD (260+4*(J))(DX), Y1 \
	VPMADDWD (2304+32*(J))(SI), Y1, Y1 \
	VPADDD Y1, Y5, Y5

// KBLOCK leaves the block's partials in Y2.
#define KBLOCK \
	HALVES(4, Y8, Y9) \
	NIB8(0, Y8, Y9, Y4) \
	VPMADDWD 2048(SI), Y4, Y4 \
	KSUB(1) \
	KSUB(2) \
	KSUB(3) \
	KSUB(4) \
	KSUB(5) \
	KSUB(6) \
	KSUB(7) \
	VPBROADCASTD 260(DX), Y5 \
	VPMADDWD 2304(SI), Y5, Y5 \
	KMIN(1) \
	KMIN(2) \
	KMIN(3) \
	KMIN(4) \
	KMIN(5) \
	KMIN(6) \
	KMIN(7) \
	VCVTDQ2PS Y4, Y2 \
	VCVTDQ2PS Y5, Y5 \
	VBROADCASTSS (DX), Y3 \
	VMULPS 2560(SI), Y3, Y6 \
	VMULPS 2592(SI), Y3, Y7 \
	VMULPS Y6, Y2, Y2 \
	VMULPS Y7, Y5, Y5 \
	VSUBPS Y5, Y2, Y2

// func q4KTile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q4KTile(SB), NOSPLIT, $0-48
	TILEARGSK
	TILELOOPK(2624, 292, 32)

// NIBROWS(OFF, SHIFT) loads the 32 bytes at OFF of each row's block and
// leaves nibble SHIFT (0 low, 4 high) of each in Y0..Y7.
#define NIBROW(R, X, ROW, OFF, SHIFT, _1, _2) \
	VMOVDQU ROW(OFF), R \
	VPSRLW $SHIFT, R, R \
	VPAND nib<>(SB), R, R

#define NIBROWS(OFF, SHIFT) ROWS8(NIBROW, OFF, SHIFT, 0, 0)

// SCALEROW(R, X, ROW, BITS) leaves in R the row's eight 6-bit scales
// (BITS SCBITS) or mins (MNBITS), unpacked from the 12 bytes at ROW(4) as
// ggml's get_scale_min_k4 does, each as an int16 pair (v, v). Clobbers
// AX, BX, DX, R8, R13.
#define SCALEROW(R, X, ROW, BITS, _1, _2, _3) \
	MOVL ROW(4), AX \
	MOVL ROW(8), BX \
	MOVL ROW(12), DX \
	BITS(R8) \
	VMOVQ R8, X \
	VPMOVZXBD X, R \
	VPSLLD $16, R, Y15 \
	VPOR Y15, R, R

// SCBITS and MNBITS leave in D the scales or mins of q[0:4] in AX,
// q[4:8] in BX, q[8:12] in DX, one a byte: j < 4 from q[j] (q[j+4] for
// mins) & 63; j ≥ 4 from the nibble of q[j+4] and the top bits of q[j-4]
// (q[j] for mins). D is R8 (R13 is clobbered).
#define SCBITS(D) \
	MOVL AX, D \
	ANDL $0x3f3f3f3f, D \
	MOVL DX, R13 \
	ANDL $0x0f0f0f0f, R13 \
	SHRL $6, AX \
	ANDL $0x03030303, AX \
	SHLL $4, AX \
	ORL  AX, R13 \
	SHLQ $32, R13 \
	ORQ  R13, D

#define MNBITS(D) \
	MOVL BX, D \
	ANDL $0x3f3f3f3f, D \
	MOVL DX, R13 \
	SHRL $4, R13 \
	ANDL $0x0f0f0f0f, R13 \
	SHRL $6, BX \
	ANDL $0x03030303, BX \
	SHLL $4, BX \
	ORL  BX, R13 \
	SHLQ $32, R13 \
	ORQ  R13, D

#define SCALEROWS(BITS) ROWS8(SCALEROW, BITS, 0, 0, 0)

DATA nib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib<>(SB), RODATA|NOPTR, $32

// func q4KPack(dst, w *byte, rs, blocks int)
TEXT ·q4KPack(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	NIBROWS(16, 0)
	TRANSPOSE8(0)
	NIBROWS(16, 4)
	TRANSPOSE8(256)
	NIBROWS(48, 0)
	TRANSPOSE8(512)
	NIBROWS(48, 4)
	TRANSPOSE8(768)
	NIBROWS(80, 0)
	TRANSPOSE8(1024)
	NIBROWS(80, 4)
	TRANSPOSE8(1280)
	NIBROWS(112, 0)
	TRANSPOSE8(1536)
	NIBROWS(112, 4)
	TRANSPOSE8(1792)
	SCALEROWS(SCBITS)
	TRANSPOSE8(2048)
	SCALEROWS(MNBITS)
	TRANSPOSE8(2304)
	HALVES8(0, 2560)
	HALVES8(2, 2592)
	ADDQ $144, SI
	ADDQ $2624, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET

// SCALEROW32 is SCALEROW with each scale as one int32, for the
// sixteen-row tile's VPDPWSSD.
#define SCALEROW32(R, X, ROW, BITS, _1, _2, _3) \
	MOVL ROW(4), AX \
	MOVL ROW(8), BX \
	MOVL ROW(12), DX \
	BITS(R8) \
	VMOVQ R8, X \
	VPMOVZXBD X, R

// func q4KPackZ(dst, w *byte, rs, blocks int)
//
// q4KPackZ repacks eight rows into one half of a sixteen-row Q4_K tile
// of tile_z_amd64.s (rows 0-7 at dst, rows 8-15 at dst+32; 5248 bytes a
// block): the nibbles in groups 64 bytes apart, sub-block s at 512s; at
// 4096 + 64s the rows' scale s as int32; at 4608 + 64j their min j as
// int16 pairs (m, m); d at 5120 and dmin at 5184 as float32.
TEXT ·q4KPackZ(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	NIBROWS(16, 0)
	TRANSPOSE8S(0, 64)
	NIBROWS(16, 4)
	TRANSPOSE8S(512, 64)
	NIBROWS(48, 0)
	TRANSPOSE8S(1024, 64)
	NIBROWS(48, 4)
	TRANSPOSE8S(1536, 64)
	NIBROWS(80, 0)
	TRANSPOSE8S(2048, 64)
	NIBROWS(80, 4)
	TRANSPOSE8S(2560, 64)
	NIBROWS(112, 0)
	TRANSPOSE8S(3072, 64)
	NIBROWS(112, 4)
	TRANSPOSE8S(3584, 64)
	ROWS8(SCALEROW32, SCBITS, 0, 0, 0)
	TRANSPOSE8S(4096, 64)
	SCALEROWS(MNBITS)
	TRANSPOSE8S(4608, 64)
	HALVES8(0, 5120)
	HALVES8(2, 5184)
	ADDQ $144, SI
	ADDQ $5248, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET
