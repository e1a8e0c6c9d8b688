//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q5_K·Q8_K, one block a round (176 bytes: fp16 d, dmin | 12 bytes of
// 6-bit scales and mins | qh[32] | 128 bytes of nibbles). As Q4_K, with a
// fifth bit over each nibble: bit 2j of qh[l] over the low nibble of
// byte l of sub-block pair j, bit 2j+1 over the high one.

// FIFTH inserts bit 0 of each byte of Q (qh, shifted) above the nibble
// in D, and moves Q on to its next bit. V31 holds 0x01 bytes.
#define FIFTH(Q, D) \
	VAND V31.B16, Q.B16, V9.B16 \
	VSLI $4, V9.B16, D.B16 \
	VUSHR $1, Q.B16, Q.B16

// SUBPAIR does sub-blocks 2J (into V16+2J) and 2J+1 (into V17+2J); V12
// and V13 hold qh shifted right by 2J.
#define SUBPAIR(J) \
	ADD $(48+32*J), R1, R5 \
	ADD $(4+64*J), R2, R6 \
	VLD1 (R5), [V0.B16, V1.B16] \
	VLD1 (R6), [V2.B16, V3.B16, V4.B16, V5.B16] \
	VAND V30.B16, V0.B16, V7.B16 \
	VAND V30.B16, V1.B16, V8.B16 \
	VUSHR $4, V0.B16, V0.B16 \
	VUSHR $4, V1.B16, V1.B16 \
	FIFTH(V12, V7) \
	FIFTH(V13, V8) \
	FIFTH(V12, V0) \
	FIFTH(V13, V1) \
	SDOT(16+2*J, 7, 2) \
	SDOT(16+2*J, 8, 3) \
	SDOT(17+2*J, 0, 4) \
	SDOT(17+2*J, 1, 5)

// func q5Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q5Kdot(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD blocks+24(FP), R3
	MOVD $0, R9 // lane
	VMOVI $15, V30.B16
	VMOVI $1, V31.B16

loop:
	KSCALEMIN
	KZERO8
	ADD  $16, R1, R5
	VLD1 (R5), [V12.B16, V13.B16]
	SUBPAIR(0)
	SUBPAIR(1)
	SUBPAIR(2)
	SUBPAIR(3)
	KSCALED
	KPARTIAL(V16, V6, (R1), 2(R1), (R2), (R0)(R9<<2))
	KEND(176)
