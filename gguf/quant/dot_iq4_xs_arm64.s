//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// IQ4_XS·Q8_K, one block a round (136 bytes: fp16 d | uint16 scales_h |
// scales_l[4] | qs[128]). Sub-block ib (32 elements) is laid out as an
// IQ4_NL block: TBL looks its nibbles up in the levels, SDOT dots them
// with the activations into the sub-block's own accumulator; SUM4 folds
// those, multiplied lane-wise by the 6-bit scales less 32 (nibble ib of
// scales_l, bits 2ib of scales_h above it). KPARTIAL finishes.

// SUB dots sub-block IB into accumulator 16+IB; V31 holds the levels.
#define SUB(IB) \
	NIBBLES(8+16*IB) \
	ADD $(4+32*IB), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VTBL V1.B16, [V31.B16], V1.B16 \
	VTBL V0.B16, [V31.B16], V0.B16 \
	SDOT(16+IB, 1, 2) \
	SDOT(16+IB, 0, 3)

DATA zeroHalf<>+0(SB)/2, $0
GLOBL zeroHalf<>(SB), RODATA|NOPTR, $2

// func iq4xsDot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·iq4xsDot(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD blocks+24(FP), R3
	MOVD $0, R9 // lane
	MOVD $zeroHalf<>(SB), R12
	MOVD $0xf6eaddcfbfad9881, R7 // -127 -104 -83 -65 -49 -35 -22 -10
	MOVD $0x7159453526190d01, R8 // 1 13 25 38 53 69 89 113
	VMOV R7, V31.D[0]
	VMOV R8, V31.D[1]
	MOVD $0xfffafffcfffe0000, R7 // shifts 0, -2, -4, ... -14
	MOVD $0xfff2fff4fff6fff8, R8
	VMOV R7, V27.D[0]
	VMOV R8, V27.D[1]
	VMOVI $3, V29.B16
	VMOVI $15, V30.B16
	VMOVI $32, V28.B16
	VEOR  V15.B16, V15.B16, V15.B16 // no min term

loop:
	// The eight scales less 32, as int32 in V10 (0-3) and V11 (4-7): the
	// nibbles of scales_l interleaved, and scales_h's bit pairs above.
	MOVWU  4(R1), R4
	VMOV   R4, V24.S[0]
	VUSHR  $4, V24.B16, V25.B16
	VZIP1  V25.B16, V24.B16, V24.B16
	VAND   V30.B16, V24.B16, V24.B16
	MOVHU  2(R1), R4
	VDUP   R4, V26.H8
	USHL_H(26, 26, 27)
	VAND   V29.B16, V26.B16, V26.B16
	VUZP1  V26.B16, V26.B16, V26.B16
	VSHL   $4, V26.B16, V26.B16
	VORR   V26.B16, V24.B16, V24.B16
	VSUB   V28.B16, V24.B16, V24.B16
	SXTL_H(25, 24)
	SXTL_S(10, 25)
	SXTL2_S(11, 25)

	KZERO8
	SUB(0)
	SUB(1)
	SUB(2)
	SUB(3)
	SUB(4)
	SUB(5)
	SUB(6)
	SUB(7)
	SUM4(V16, V17, V18, V19)
	SUM4(V20, V21, V22, V23)
	MUL(14, 16, 10)
	MLA(14, 20, 11)
	KPARTIAL(V14, V15, (R1), (R12), (R2), (R0)(R9<<2))
	KEND(136)
