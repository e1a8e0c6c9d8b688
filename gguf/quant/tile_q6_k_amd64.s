//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"
#include "tile_amd64.h"

// Q6_K tile: eight rows of Q6_K times a Q8_K activation. Repacked block
// (2848 bytes): the unsigned 6-bit quants q in groups, sub-block s
// (elements 16s..16s+15) at 128s; at 2048 + 32s the rows' scale s as
// int16 pairs (sc, sc); at 2560 + 32k their scales 2k and 2k+1 as a pair;
// the rows' d at 2816 as float32. VPMADDUBSW pairs of q·a are at most
// 2·63·128, so two add up exactly in int16 before the scale multiplies
// them into int32. Per row, isum = Σ_s sc_s·Σ q·a − 32·Σ_s sc_s·Σ_s a,
// the second from the activation's sums of 16 (its figures), exactly
// Σ_s sc_s·Σ(q−32)·a; then kPartial with no mins.

// Q6PAIR adds groups G and G+1 of sub-block S, scaled, to Y4; their
// activation bytes are dwords SEL0 and SEL1 of Y9 (both lanes).
#define Q6PAIR(S, G, SEL0, SEL1) \
	VMOVDQU (128*(S)+32*(G))(SI), Y2 \
	VPSHUFD $SEL0, Y9, Y1 \
	VPMADDUBSW Y1, Y2, Y2 \
	VMOVDQU (128*(S)+32*(G)+32)(SI), Y0 \
	VPSHUFD $SEL1, Y9, Y1 \
	VPMADDUBSW Y1, Y0, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPMADDWD (2048+32*(S))(SI), Y2, Y2 \
	VPADDD Y2, Y4, Y4

// Q6SUB loads sub-block S's 16 activation bytes into both lanes of Y9
// (one load, and a VPSHUFD a group: loads are the kernel's limit).
#define Q6SUB(S) \
	VBROADCASTI128 (4+16*(S))(DX), Y9 \
	Q6PAIR(S, 0, 0x00, 0x55) \
	Q6PAIR(S, 2, 0xaa, 0xff)

// Q6FIX adds sc_2k·Σa_2k + sc_2k+1·Σa_2k+1 to Y5.
#define Q6FIX(K) \
	VPBROADCASTD (4*(K))(R8), Y1 \
	VPMADDWD (2560+32*(K))(SI), Y1, Y1 \
	VPADDD Y1, Y5, Y5

// KBLOCK leaves the block's partials in Y2: kPartial(isum, 0, d, 0, dy),
// whose min term is 0·(0·dy) (NaN where dy is not finite).
#define KBLOCK \
	VPXOR Y4, Y4, Y4 \
	Q6SUB(0) \
	Q6SUB(1) \
	Q6SUB(2) \
	Q6SUB(3) \
	Q6SUB(4) \
	Q6SUB(5) \
	Q6SUB(6) \
	Q6SUB(7) \
	Q6SUB(8) \
	Q6SUB(9) \
	Q6SUB(10) \
	Q6SUB(11) \
	Q6SUB(12) \
	Q6SUB(13) \
	Q6SUB(14) \
	Q6SUB(15) \
	VPBROADCASTD (R8), Y5 \
	VPMADDWD 2560(SI), Y5, Y5 \
	Q6FIX(1) \
	Q6FIX(2) \
	Q6FIX(3) \
	Q6FIX(4) \
	Q6FIX(5) \
	Q6FIX(6) \
	Q6FIX(7) \
	VPSLLD $5, Y5, Y5 \
	VPSUBD Y5, Y4, Y4 \
	VCVTDQ2PS Y4, Y2 \
	VBROADCASTSS (DX), Y3 \
	VMULPS 2816(SI), Y3, Y6 \
	VMULPS Y6, Y2, Y2 \
	VXORPS Y5, Y5, Y5 \
	VMULPS Y3, Y5, Y6 \
	VMULPS Y6, Y5, Y6 \
	VSUBPS Y6, Y2, Y2

// func q6KTile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q6KTile(SB), NOSPLIT, $0-48
	TILEARGSK
	TILELOOPK(2848, 292, 32)

// QROW(R, X, ROW, QL, LSH, QH, HOP) leaves in R 32 quants of the row's
// block: nibble LSH/4 of the bytes at QL, with the bits of the bytes at QH
// that HOP moves to bits 4-5 above it. Clobbers Y8.
#define QROW(R, X, ROW, QL, LSH, QH, HOP) \
	VMOVDQU ROW(QL), R \
	VPSRLW $LSH, R, R \
	VPAND nib<>(SB), R, R \
	VMOVDQU ROW(QH), Y8 \
	HOP(Y8) \
	VPAND m30<>(SB), Y8, Y8 \
	VPOR Y8, R, R

#define SHL4(V) VPSLLW $4, V, V
#define SHL2(V) VPSLLW $2, V, V
#define SHR2(V) VPSRLW $2, V, V
#define NOSH(V)

// UNIT(M, QL, LSH, QH, HOP) repacks elements 32M..32M+31 (sub-blocks 2M
// and 2M+1) of the eight rows: as ggml's dequantize_row_q6_K, element
// 128c+l (l < 32) is the low nibble of ql[64c+l] with bits 0-1 of
// qh[32c+l]; 128c+32+l the low nibble of ql[64c+32+l] with bits 2-3;
// +64 and +96 the high nibbles with bits 4-5 and 6-7.
#define UNIT(M, QL, LSH, QH, HOP) \
	ROWS8(QROW, QL, LSH, QH, HOP) \
	TRANSPOSE8(256*(M))

#define HALFC(C) \
	UNIT(4*(C), 64*(C), 0, 128+32*(C), SHL4) \
	UNIT(4*(C)+1, 64*(C)+32, 0, 128+32*(C), SHL2) \
	UNIT(4*(C)+2, 64*(C), 4, 128+32*(C), NOSH) \
	UNIT(4*(C)+3, 64*(C)+32, 4, 128+32*(C), SHR2)

// SCROW leaves in R the int8 scales at ROW(OFF..OFF+7) as int16 pairs
// (sc, sc). Clobbers X8.
#define SCROW(R, X, ROW, OFF, _1, _2, _3) \
	VPMOVSXBW ROW(OFF), X \
	VPUNPCKHWD X, X, X8 \
	VPUNPCKLWD X, X, X \
	VINSERTI128 $1, X8, R, R

// PAIRROW leaves in R the sixteen int8 scales at ROW(192) as int16: the
// dwords hold scales 2k and 2k+1.
#define PAIRROW(R, X, ROW, _1, _2, _3, _4) \
	VPMOVSXBW ROW(192), R

DATA nib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib<>(SB), RODATA|NOPTR, $32
DATA m30<>+0(SB)/8, $0x3030303030303030
DATA m30<>+8(SB)/8, $0x3030303030303030
DATA m30<>+16(SB)/8, $0x3030303030303030
DATA m30<>+24(SB)/8, $0x3030303030303030
GLOBL m30<>(SB), RODATA|NOPTR, $32

// func q6KPack(dst, w *byte, rs, blocks int)
TEXT ·q6KPack(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	HALFC(0)
	HALFC(1)
	ROWS8(SCROW, 192, 0, 0, 0)
	TRANSPOSE8(2048)
	ROWS8(SCROW, 200, 0, 0, 0)
	TRANSPOSE8(2304)
	ROWS8(PAIRROW, 0, 0, 0, 0)
	TRANSPOSE8(2560)
	HALVES8(208, 2816)
	ADDQ $210, SI
	ADDQ $2848, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET

// UNITZ and HALFCZ are UNIT and HALFC for the sixteen-row tile: 32
// elements (eight groups, 64 bytes apart) at 512M.
#define UNITZ(M, QL, LSH, QH, HOP) \
	ROWS8(QROW, QL, LSH, QH, HOP) \
	TRANSPOSE8S(512*(M), 64)

#define HALFCZ(C) \
	UNITZ(4*(C), 64*(C), 0, 128+32*(C), SHL4) \
	UNITZ(4*(C)+1, 64*(C)+32, 0, 128+32*(C), SHL2) \
	UNITZ(4*(C)+2, 64*(C), 4, 128+32*(C), NOSH) \
	UNITZ(4*(C)+3, 64*(C)+32, 4, 128+32*(C), SHR2)

// SCROW32 leaves in R the int8 scales at ROW(OFF..OFF+7) as int32.
#define SCROW32(R, X, ROW, OFF, _1, _2, _3) \
	VPMOVSXBD ROW(OFF), R

// func q6KPackZ(dst, w *byte, rs, blocks int)
//
// q6KPackZ repacks eight rows into one half of a sixteen-row Q6_K tile
// of tile_z_amd64.s (rows 0-7 at dst, rows 8-15 at dst+32; 5696 bytes a
// block): the quants q in groups 64 bytes apart, sub-block s (elements
// 16s..16s+15) at 256s; at 4096 + 64s the rows' scale s as int32; at
// 5120 + 64k their scales 2k and 2k+1 as an int16 pair; d at 5632 as
// float32.
TEXT ·q6KPackZ(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	HALFCZ(0)
	HALFCZ(1)
	ROWS8(SCROW32, 192, 0, 0, 0)
	TRANSPOSE8S(4096, 64)
	ROWS8(SCROW32, 200, 0, 0, 0)
	TRANSPOSE8S(4608, 64)
	ROWS8(PAIRROW, 0, 0, 0, 0)
	TRANSPOSE8S(5120, 64)
	HALVES8(208, 5632)
	ADDQ $210, SI
	ADDQ $5696, DI
	DECQ CX
	JNZ  pack
	VZEROUPPER
	RET
