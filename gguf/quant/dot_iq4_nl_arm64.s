//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// IQ4_NL·Q8_0, eight blocks a round (18-byte blocks laid out as Q4_0's,
// each nibble an index into the sixteen int8 levels of kvaluesIQ4NL,
// looked up with TBL). SDOT multiplies the signed levels and activations
// exactly; then as Q8_0.

// BLOCK leaves block K's four int32 partial sums in V (number VN); V31
// holds the levels.
#define BLOCK(K, V, VN) \
	NIBBLES(18*(K)+2) \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VTBL V1.B16, [V31.B16], V1.B16 \
	VTBL V0.B16, [V31.B16], V0.B16 \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// func iq4nlx8(acc *[8]float32, x, y *byte, groups int)
TEXT ·iq4nlx8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16
	MOVD $0xf6eaddcfbfad9881, R7 // -127 -104 -83 -65 -49 -35 -22 -10
	MOVD $0x7159453526190d01, R8 // 1 13 25 38 53 69 89 113
	VMOV R7, V31.D[0]
	VMOV R8, V31.D[1]

	ROUNDS32(18, 34, ACCUM4)
