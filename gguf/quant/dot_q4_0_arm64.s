//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q4_0·Q8_0, eight blocks a round (Q4_0 blocks: fp16 d | 16 bytes of
// nibbles, element j low and j+16 high). The nibbles less 8 are signed
// bytes, which SDOT multiplies exactly; then as Q8_0.

// BLOCK leaves block K's four int32 partial sums in V (number VN); V30
// holds 0x0f bytes and V31 8s.
#define BLOCK(K, V, VN) \
	ADD $(18*(K)+2), R1, R5 \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R5), [V0.B16] \
	VLD1 (R6), [V2.B16, V3.B16] \
	VAND V30.B16, V0.B16, V1.B16 \
	VUSHR $4, V0.B16, V0.B16 \
	VSUB V31.B16, V1.B16, V1.B16 \
	VSUB V31.B16, V0.B16, V0.B16 \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// HALF adds blocks K..K+3 to the accumulator ACC (number AN).
#define HALF(K, ACC, AN) \
	BLOCK(K, V16, 16) \
	BLOCK(K+1, V17, 17) \
	BLOCK(K+2, V18, 18) \
	BLOCK(K+3, V19, 19) \
	SUM4(V16, V17, V18, V19) \
	SCVTF(16, 16) \
	ADD $(18*(K)), R1, R5 \
	ADD $(34*(K)), R2, R6 \
	SCALES4(R5, 18, V20, 20) \
	SCALES4(R6, 34, V21, 21) \
	FMUL(20, 20, 21) \
	FMUL(16, 16, 20) \
	FADD(AN, AN, 16)

// func q4_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q4_0x8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16
	VMOVI $8, V31.B16

loop:
	HALF(0, V28, 28)
	HALF(4, V29, 29)
	ADD  $144, R1
	ADD  $272, R2
	SUBS $1, R3
	BNE  loop

	VST1 [V28.S4, V29.S4], (R0)
	RET
