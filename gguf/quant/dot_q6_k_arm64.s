//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q6_K·Q8_K, one block a round (210 bytes: ql[128] | qh[64] | int8
// scales[16] | fp16 d), as two 128-element halves. Element l of a half
// (l < 32) has four 6-bit quants, for activations l, l+32, l+64, l+96:
// low and high nibbles of ql[l] and ql[l+32], each with two bits of qh[l]
// above them. Less 32 they are signed bytes, which SDOT multiplies
// exactly, sixteen activations (one scale's worth) per accumulator; SUM4
// folds those, which are multiplied by the scales lane-wise. KPARTIAL
// finishes, with no min term.

// GROUP puts the 32 quants from ql in L0, L1 (low or high nibbles by
// SHIFT) and the bits of qh made by QH into V6, V7, less 32, and dots
// them with the next 32 activations (R6) into accumulators A and A+1.
// V4, V5 hold qh; V29 32s, V30 0x0f, V31 0x30.
#define GROUP(L0, L1, SHIFT, QH, A) \
	SHIFT(L0, V6) \
	SHIFT(L1, V7) \
	QH(V4, V8) \
	QH(V5, V9) \
	VAND V31.B16, V8.B16, V8.B16 \
	VAND V31.B16, V9.B16, V9.B16 \
	VORR V8.B16, V6.B16, V6.B16 \
	VORR V9.B16, V7.B16, V7.B16 \
	VSUB V29.B16, V6.B16, V6.B16 \
	VSUB V29.B16, V7.B16, V7.B16 \
	VLD1.P 32(R6), [V8.B16, V9.B16] \
	SDOT(A, 6, 8) \
	SDOT(A+1, 7, 9)

#define LOW(S, D) VAND V30.B16, S.B16, D.B16
#define HIGH(S, D) VUSHR $4, S.B16, D.B16
#define QH0(S, D) VSHL $4, S.B16, D.B16
#define QH2(S, D) VSHL $2, S.B16, D.B16
#define QH4(S, D) VORR S.B16, S.B16, D.B16
#define QH6(S, D) VUSHR $2, S.B16, D.B16

// HALF does the 128 elements whose ql start at QL(R1), qh at QH(R1),
// activations at A(R2), with int32 scales in SA (0-3) and SB (4-7), into
// V14.
#define HALF(QL, QH, A, SA, SB) \
	ADD $QL, R1, R5 \
	VLD1 (R5), [V0.B16, V1.B16, V2.B16, V3.B16] \
	ADD $QH, R1, R5 \
	VLD1 (R5), [V4.B16, V5.B16] \
	ADD $A, R2, R6 \
	KZERO8 \
	GROUP(V0, V1, LOW, QH0, 16) \
	GROUP(V2, V3, LOW, QH2, 18) \
	GROUP(V0, V1, HIGH, QH4, 20) \
	GROUP(V2, V3, HIGH, QH6, 22) \
	SUM4(V16, V17, V18, V19) \
	SUM4(V20, V21, V22, V23) \
	MLA(14, 16, SA) \
	MLA(14, 20, SB)

DATA zeroHalf<>+0(SB)/2, $0
GLOBL zeroHalf<>(SB), RODATA|NOPTR, $2

// func q6Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q6Kdot(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD blocks+24(FP), R3
	MOVD $0, R9 // lane
	MOVD $zeroHalf<>(SB), R12
	VMOVI $32, V29.B16
	VMOVI $15, V30.B16
	VMOVI $0x30, V31.B16
	VEOR  V15.B16, V15.B16, V15.B16 // no min term

loop:
	// The sixteen scales as int32: V10 0-3, V11 4-7, V12 8-11, V13 12-15.
	ADD  $192, R1, R5
	VLD1 (R5), [V24.B16]
	SXTL_H(25, 24)
	SXTL2_H(26, 24)
	SXTL_S(10, 25)
	SXTL2_S(11, 25)
	SXTL_S(12, 26)
	SXTL2_S(13, 26)
	VEOR V14.B16, V14.B16, V14.B16
	HALF(0, 128, 4, 10, 11)
	HALF(64, 160, 132, 12, 13)
	KPARTIAL(V14, V15, 208(R1), (R12), (R2), (R0)(R9<<2))
	KEND(210)
