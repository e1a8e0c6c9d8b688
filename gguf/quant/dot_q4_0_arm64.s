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

// The same for a one-row Batch, whose per-block figures (float32 dy,
// int32 Σy a block, at R3) give the activation scales as float32 and
// −8·Σy for four blocks at once, in place of subtracting 8 from every
// nibble.

// BLOCKF leaves block K's Σ n·y, four int32 partial sums, in V (VN).
#define BLOCKF(K, V, VN) \
	NIBBLES(18*(K)+2) \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// FIGURES4 scales blocks K..K+3 (sums in V16) into accumulator AN.
// Clobbers R4-R6, V16, V20-V22.
#define FIGURES4(K, AN) \
	ADD $(8*(K)), R3, R6 \
	VLD2 (R6), [V20.S4, V21.S4] \
	VSHL $3, V21.S4, V21.S4 \
	VSUB V21.S4, V16.S4, V16.S4 \
	SCVTF(16, 16) \
	ADD $(18*(K)), R1, R5 \
	SCALES4(R5, 18, V22, 22) \
	FMUL(22, 22, 20) \
	FMUL(16, 16, 22) \
	FADD(AN, AN, 16)

// func q4_0x8f(acc *[8]float32, x, y, aux *byte, groups int)
TEXT ·q4_0x8f(SB), NOSPLIT, $0-40
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD aux+24(FP), R3
	MOVD groups+32(FP), R7
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16

loopf:
	QUADS(BLOCKF, 0)
	FIGURES4(0, 28)
	QUADS(BLOCKF, 4)
	FIGURES4(4, 29)
	ADD  $(8*18), R1
	ADD  $(8*34), R2
	ADD  $64, R3
	SUBS $1, R7
	BNE  loopf
	VST1 [V28.S4, V29.S4], (R0)
	RET
