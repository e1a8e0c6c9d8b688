//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q5_1·Q8_1, eight blocks a round (24-byte blocks: fp16 d, m | uint32 qh
// | 16 bytes of nibbles). Element e is its nibble with bit e of qh above
// it (0-31, so also a signed byte); otherwise as Q4_1.

// BLOCK leaves block K's four int32 partial sums in V (number VN).
#define BLOCK(K, V, VN) \
	NIBBLES(24*(K)+8) \
	FIFTHBITS(24*(K)+4) \
	ADD $(36*(K)+4), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// func q5_1x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q5_1x8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16
	FIFTHSETUP

	ROUNDS32(24, 36, ACCUM4MIN)
