//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"
#include "tile_arm64.h"

// Q6_K tile: eight rows of Q6_K times a Q8_K activation. Repacked block
// (2592 bytes): per 32 elements m (sub-blocks 2m and 2m+1) 256 bytes, the
// signed quants q−32 of rows 0-3 in groups, then of rows 4-7; at 2048 the
// rows' scales as int32, sub-block s of rows 0-3 at 16s and of rows 4-7
// at 256+16s; at 2560 the rows' d as float32. Per row isum = Σ_s sc_s·Σ
// (q−32)·a, exact in int32, then kPartial with no mins.

// HALF adds sub-blocks 2m and 2m+1 of four rows (quants at R1, scales at
// RS) to V(ACC); the activations are in V4 (2m) and V5 (2m+1).
#define HALF(RS, ACC) \
	VEOR V6.B16, V6.B16, V6.B16 \
	VEOR V7.B16, V7.B16, V7.B16 \
	VLD1.P 64(R1), [V0.B16, V1.B16, V2.B16, V3.B16] \
	SDOTE(6, 0, 4, 0) \
	SDOTE(6, 1, 4, 1) \
	SDOTE(6, 2, 4, 2) \
	SDOTE(6, 3, 4, 3) \
	VLD1.P 64(R1), [V0.B16, V1.B16, V2.B16, V3.B16] \
	SDOTE(7, 0, 5, 0) \
	SDOTE(7, 1, 5, 1) \
	SDOTE(7, 2, 5, 2) \
	SDOTE(7, 3, 5, 3) \
	VLD1.P 32(RS), [V10.S4, V11.S4] \
	MLA(ACC, 6, 10) \
	MLA(ACC, 7, 11)

#define UNIT \
	VLD1.P 32(R11), [V4.B16, V5.B16] \
	HALF(R9, 12) \
	HALF(R10, 13)

// KBLOCK: the min term of kPartial is 0·(0·dy), NaN where dy is not
// finite.
#define KBLOCK \
	ADD  $2048, R1, R9 \
	ADD  $2304, R1, R10 \
	ADD  $4, R2, R11 \
	VEOR V12.B16, V12.B16, V12.B16 \
	VEOR V13.B16, V13.B16, V13.B16 \
	UNIT \
	UNIT \
	UNIT \
	UNIT \
	UNIT \
	UNIT \
	UNIT \
	UNIT \
	SCVTF(12, 12) \
	SCVTF(13, 13) \
	VLD1R (R2), [V8.S4] \
	VLD1 (R10), [V0.S4, V1.S4] \
	FMUL(0, 0, 8) \
	FMUL(1, 1, 8) \
	FMUL(12, 12, 0) \
	FMUL(13, 13, 1) \
	VEOR V2.B16, V2.B16, V2.B16 \
	FMUL(3, 2, 8) \
	FMUL(3, 2, 3) \
	FSUB(6, 12, 3) \
	FSUB(7, 13, 3) \
	ADD  $544, R1 \
	ADD  $292, R2 \
	ADD  $32, R3

// func q6KTile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q6KTile(SB), NOSPLIT, $0-48
	TILEARGS
	TILELOOPK

// QROW(R, QL, QH, NIB, HOP, A, B) leaves in A (elements 0-15) and B
// (16-31) 32 quants less 32 of a row's block: NIB's nibble of the 32
// bytes at QL, with the bits of the bytes at QH that HOP moves to bits
// 4-5. V28 holds 15s, V29 0x30s, V30 32s. Clobbers R14, V24-V27.
#define QROW(R, QL, QH, NIB, HOP, A, B) \
	ADD  $(QL), R, R14 \
	VLD1 (R14), [V26.B16, V27.B16] \
	NIB(V26, A) \
	NIB(V27, B) \
	ADD  $(QH), R, R14 \
	VLD1 (R14), [V24.B16, V25.B16] \
	HOP(V24) \
	HOP(V25) \
	VAND V29.B16, V24.B16, V24.B16 \
	VAND V29.B16, V25.B16, V25.B16 \
	VORR V24.B16, A.B16, A.B16 \
	VORR V25.B16, B.B16, B.B16 \
	VSUB V30.B16, A.B16, A.B16 \
	VSUB V30.B16, B.B16, B.B16

#define LONIB(V, D) VAND V28.B16, V.B16, D.B16
#define HINIB(V, D) VUSHR $4, V.B16, D.B16
#define SHL4(V) VSHL $4, V.B16, V.B16
#define SHL2(V) VSHL $2, V.B16, V.B16
#define SHR2(V) VUSHR $2, V.B16, V.B16
#define NOSH(V)

// ROWS4 repacks 32 quants of four rows.
#define ROWS4(RA, RB, RC, RD, QL, QH, NIB, HOP) \
	QROW(RA, QL, QH, NIB, HOP, V0, V4) \
	QROW(RB, QL, QH, NIB, HOP, V1, V5) \
	QROW(RC, QL, QH, NIB, HOP, V2, V6) \
	QROW(RD, QL, QH, NIB, HOP, V3, V7) \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)

// UNITS repacks 32 elements of the eight rows: as ggml's
// dequantize_row_q6_K, element 128c+l (l < 32) is the low nibble of
// ql[64c+l] with bits 0-1 of qh[32c+l]; 128c+32+l the low nibble of
// ql[64c+32+l] with bits 2-3; +64 and +96 the high nibbles with bits 4-5
// and 6-7.
#define UNITS(QL, QH, NIB, HOP) \
	ROWS4(R6, R7, R8, R9, QL, QH, NIB, HOP) \
	ROWS4(R10, R11, R12, R13, QL, QH, NIB, HOP)

#define HALFC(C) \
	UNITS(64*(C), 128+32*(C), LONIB, SHL4) \
	UNITS(64*(C)+32, 128+32*(C), LONIB, SHL2) \
	UNITS(64*(C), 128+32*(C), HINIB, NOSH) \
	UNITS(64*(C)+32, 128+32*(C), HINIB, SHR2)

// SCROW widens a row's sixteen int8 scales to int32 in vectors number A-D
// (scales 0-3 .. 12-15); VA is vector A. Clobbers R14.
#define SCROW(R, VA, A, B, C, D) \
	LOAD16(R, 192, VA) \
	SXTL2_H(C, A) \
	SXTL_H(A, A) \
	SXTL2_S(B, A) \
	SXTL_S(A, A) \
	SXTL2_S(D, C) \
	SXTL_S(C, C)

#define SCROWS4(RA, RB, RC, RD) \
	SCROW(RA, V0, 0, 4, 8, 12) \
	SCROW(RB, V1, 1, 5, 9, 13) \
	SCROW(RC, V2, 2, 6, 10, 14) \
	SCROW(RD, V3, 3, 7, 11, 15) \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0) \
	VST4.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R0) \
	VST4.P [V12.S4, V13.S4, V14.S4, V15.S4], 64(R0)

// func q6KPack(dst, w *byte, rs, blocks int)
TEXT ·q6KPack(SB), NOSPLIT, $0-32
	PACKARGS
	VMOVI $15, V28.B16
	VMOVI $0x30, V29.B16
	VMOVI $32, V30.B16
pack:
	HALFC(0)
	HALFC(1)
	SCROWS4(R6, R7, R8, R9)
	SCROWS4(R10, R11, R12, R13)
	HALVES8(208)
	PACKNEXT(210)
