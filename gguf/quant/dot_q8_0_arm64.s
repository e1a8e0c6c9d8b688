//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q8_0·Q8_0, eight blocks a round (34-byte blocks: fp16 d | int8 q[32]).
// SDOT multiplies signed bytes into int32 lanes exactly; SUM4 gives four
// blocks' sums in the lanes of one vector, scaled as the Go kernel does:
// float32(sumi) × (dx × dy), each product rounded, then added to the
// accumulator lanes 0-3 (V28) or 4-7 (V29).

// BLOCK leaves block K's four int32 partial sums in V (number VN).
#define BLOCK(K, V, VN) \
	ADD $(34*(K)+2), R1, R5 \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R5), [V0.B16, V1.B16] \
	VLD1 (R6), [V2.B16, V3.B16] \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 0, 2) \
	SDOT(VN, 1, 3)

// func q8_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q8_0x8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]

	ROUNDS32(34, 34, ACCUM4)
