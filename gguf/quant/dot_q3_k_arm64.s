//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q3_K·Q8_K, one block a round (110 bytes: hmask[32] | qs[64] | 12 bytes
// of 6-bit scales | fp16 d). As Q2_K's quants, each with a high bit: bit
// 4c+k of hmask[l] for the field at shift 2k of byte l of half c; the
// quant is the 3-bit value less 4, a signed byte that SDOT multiplies
// exactly. The scales (less 32) multiply the sub-block sums lane-wise.
// KPARTIAL finishes, with no min term.

// GROUP dots the quants of field FIELD with high bit HB (a shift macro)
// with the next 32 activations (R6) into accumulators A and A+1. V0, V1
// hold qs, V26, V27 hmask; V29 0x03, V28 0x01, V31 4s.
#define GROUP(FIELD, HB, A) \
	FIELD(V0, V2) \
	FIELD(V1, V3) \
	HB(V26, V4) \
	HB(V27, V5) \
	VAND V28.B16, V4.B16, V4.B16 \
	VAND V28.B16, V5.B16, V5.B16 \
	VSLI $2, V4.B16, V2.B16 \
	VSLI $2, V5.B16, V3.B16 \
	VSUB V31.B16, V2.B16, V2.B16 \
	VSUB V31.B16, V3.B16, V3.B16 \
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
#define HBIT0(S, D) VORR S.B16, S.B16, D.B16
#define HBIT1(S, D) VUSHR $1, S.B16, D.B16
#define HBIT2(S, D) VUSHR $2, S.B16, D.B16
#define HBIT3(S, D) VUSHR $3, S.B16, D.B16
#define HBIT4(S, D) VUSHR $4, S.B16, D.B16
#define HBIT5(S, D) VUSHR $5, S.B16, D.B16
#define HBIT6(S, D) VUSHR $6, S.B16, D.B16
#define HBIT7(S, D) VUSHR $7, S.B16, D.B16

// HALF does the 128 elements whose qs start at Q(R1), activations at
// A(R2), high bits by HA..HD, with int32 scales numbered SA (0-3) and SB
// (4-7), into V14.
#define HALF(Q, A, HA, HB, HC, HD, SA, SB) \
	ADD $Q, R1, R5 \
	VLD1 (R5), [V0.B16, V1.B16] \
	ADD $A, R2, R6 \
	KZERO8 \
	GROUP(FLD0, HA, 16) \
	GROUP(FLD2, HB, 18) \
	GROUP(FLD4, HC, 20) \
	GROUP(FLD6, HD, 22) \
	SUM4(V16, V17, V18, V19) \
	SUM4(V20, V21, V22, V23) \
	MLA(14, 16, SA) \
	MLA(14, 20, SB)

DATA zeroHalf<>+0(SB)/2, $0
GLOBL zeroHalf<>(SB), RODATA|NOPTR, $2

// func q3Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q3Kdot(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD blocks+24(FP), R3
	MOVD $0, R9 // lane
	MOVD $zeroHalf<>(SB), R12
	MOVD $0x0f0f0f0f0f0f0f0f, R11
	VMOVI $1, V28.B16
	VMOVI $3, V29.B16
	VMOVI $32, V30.B16
	VMOVI $4, V31.B16
	VEOR  V15.B16, V15.B16, V15.B16 // no min term

loop:
	// The sixteen 6-bit scales as unpackQ3KScales: byte j < 8 of the
	// first eight has the low nibble of scale j, its high nibble that of
	// scale j+8; bits 2(j/4) of byte 8+j%4 are scale j's top two.
	MOVD  96(R1), R4
	MOVWU 104(R1), R5
	AND   R11, R4, R6 // low nibbles 0-7
	LSR   $4, R4, R4
	AND   R11, R4, R4 // low nibbles 8-15
	ANDW  $0x03030303, R5, R7 // top bits of 0-3
	LSRW  $2, R5, R5
	ANDW  $0x03030303, R5, R8 // 4-7
	ORR   R8<<32, R7, R7
	ORR   R7<<4, R6, R6
	LSRW  $2, R5, R5
	ANDW  $0x03030303, R5, R7 // 8-11
	LSRW  $2, R5, R5
	ANDW  $0x03030303, R5, R8 // 12-15
	ORR   R8<<32, R7, R7
	ORR   R7<<4, R4, R4
	VMOV  R6, V24.D[0]
	VMOV  R4, V24.D[1]
	VSUB  V30.B16, V24.B16, V24.B16 // less 32
	SXTL_H(25, 24)
	SXTL2_H(24, 24)
	SXTL_S(10, 25)
	SXTL2_S(11, 25)
	SXTL_S(12, 24)
	SXTL2_S(13, 24)

	VLD1 (R1), [V26.B16, V27.B16] // hmask
	VEOR V14.B16, V14.B16, V14.B16
	HALF(32, 4, HBIT0, HBIT1, HBIT2, HBIT3, 10, 11)
	HALF(64, 132, HBIT4, HBIT5, HBIT6, HBIT7, 12, 13)
	KPARTIAL(V14, V15, 108(R1), (R12), (R2), (R0)(R9<<2))
	KEND(110)
