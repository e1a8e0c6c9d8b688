//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q5_0·Q8_0, eight blocks a round (22-byte blocks: fp16 d | uint32 qh |
// 16 bytes of nibbles). Element e is its nibble with bit e of qh above
// it, less 16: a signed byte, which SDOT multiplies exactly.

// BLOCK leaves block K's four int32 partial sums in V (number VN); V31
// holds 16s.
#define BLOCK(K, V, VN) \
	NIBBLES(22*(K)+6) \
	FIFTHBITS(22*(K)+2) \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VSUB V31.B16, V1.B16, V1.B16 \
	VSUB V31.B16, V0.B16, V0.B16 \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// func q5_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q5_0x8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16
	VMOVI $16, V31.B16
	FIFTHSETUP

	ROUNDS32(22, 34, ACCUM4)
