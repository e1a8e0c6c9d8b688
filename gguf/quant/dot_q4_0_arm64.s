//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q4_0·Q8_0, eight blocks a round (Q4_0 blocks: fp16 d | 16 bytes of
// nibbles, element j low and j+16 high). The nibbles less 8 are signed
// bytes, which SDOT multiplies exactly; then as Q8_0.

// BLOCK leaves block K's four int32 partial sums in V (number VN); V31
// holds 8s.
#define BLOCK(K, V, VN) \
	NIBBLES(18*(K)+2) \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VSUB V31.B16, V1.B16, V1.B16 \
	VSUB V31.B16, V0.B16, V0.B16 \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// func q4_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q4_0x8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16
	VMOVI $8, V31.B16

	ROUNDS32(18, 34, ACCUM4)
