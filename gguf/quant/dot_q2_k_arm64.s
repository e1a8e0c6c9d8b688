//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q2_K·Q8_K, one block a round (84 bytes: 16 bytes of 4-bit scale and min
// per 16-element sub-block | qs[64] | fp16 d | fp16 dmin). Each 128-element
// half takes 32 bytes of qs; its 2-bit fields at shift 2k are the quants of
// activations 32k..32k+31 of the half, sub-blocks 2k and 2k+1 of it. SDOT
// gives each sub-block's Σ q·a in its own accumulator; SUM4 folds them,
// multiplied by the scales lane-wise; the mins meet the bsums in
// SMULL/SMLAL. KPARTIAL finishes.

// GROUP dots the 2-bit fields of V0, V1 picked by FIELD with the next 32
// activations (R6) into accumulators A and A+1; V29 holds 0x03.
#define GROUP(FIELD, A) \
	FIELD(V0, V2) \
	FIELD(V1, V3) \
	VLD1.P 32(R6), [V4.B16, V5.B16] \
	SDOT(A, 2, 4) \
	SDOT(A+1, 3, 5)

#define FLD0(S, D) VAND V29.B16, S.B16, D.B16
#define FLD2(S, D) \
	VUSHR $2, S.B16, D.B16 \
	VAND V29.B16, D.B16, D.B16
#define FLD4(S, D) \
	VUSHR $4, S.B16, D.B16 \
	VAND V29.B16, D.B16, D.B16
#define FLD6(S, D) VUSHR $6, S.B16, D.B16

// HALF does the 128 elements whose qs start at Q(R1), activations at
// A(R2), with int32 scales numbered SA (0-3) and SB (4-7), into V14.
#define HALF(Q, A, SA, SB) \
	ADD $Q, R1, R5 \
	VLD1 (R5), [V0.B16, V1.B16] \
	ADD $A, R2, R6 \
	KZERO8 \
	GROUP(FLD0, 16) \
	GROUP(FLD2, 18) \
	GROUP(FLD4, 20) \
	GROUP(FLD6, 22) \
	SUM4(V16, V17, V18, V19) \
	SUM4(V20, V21, V22, V23) \
	MLA(14, 16, SA) \
	MLA(14, 20, SB)

// func q2Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q2Kdot(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD blocks+24(FP), R3
	MOVD $0, R9 // lane
	VMOVI $3, V29.B16
	VMOVI $15, V30.B16

loop:
	VLD1   (R1), [V24.B16]
	VAND   V30.B16, V24.B16, V25.B16 // scales
	VUSHR  $4, V24.B16, V26.B16 // mins
	VUXTL  V25.B8, V27.H8
	VUXTL2 V25.B16, V28.H8
	VUXTL  V27.H4, V10.S4
	VUXTL2 V27.H8, V11.S4
	VUXTL  V28.H4, V12.S4
	VUXTL2 V28.H8, V13.S4
	VUXTL  V26.B8, V27.H8
	VUXTL2 V26.B16, V28.H8
	ADD    $260, R2, R5
	VLD1   (R5), [V8.H8, V9.H8]
	SMULL(6, 8, 27)
	SMLAL2(6, 8, 27)
	SMLAL(6, 9, 28)
	SMLAL2(6, 9, 28)
	VEOR   V14.B16, V14.B16, V14.B16
	HALF(16, 4, 10, 11)
	HALF(48, 132, 12, 13)
	KPARTIAL(V14, V6, 80(R1), 82(R1), (R2), (R0)(R9<<2))
	KEND(84)
