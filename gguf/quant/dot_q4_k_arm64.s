//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q4_K·Q8_K, one block a round (144 bytes: fp16 d, dmin | 12 bytes of
// 6-bit scales and mins | 128 bytes of nibbles; sub-block pair j takes the
// low nibbles of bytes 32j..32j+31 for activations 64j.., the high ones
// for 64j+32..). SDOT gives each of the eight sub-blocks' Σ q·a in the
// lanes of its own vector; SUM4 folds them to two vectors, multiplied by
// the scales lane-wise. The mins meet the activation's 16-element sums
// (bsums) in SMULL/SMLAL. All exact; KPARTIAL finishes.

// SUBPAIR does sub-blocks 2J (into V16+2J) and 2J+1 (into V17+2J).
#define SUBPAIR(J) \
	ADD $(16+32*J), R1, R5 \
	ADD $(4+64*J), R2, R6 \
	VLD1 (R5), [V0.B16, V1.B16] \
	VLD1 (R6), [V2.B16, V3.B16, V4.B16, V5.B16] \
	VAND V30.B16, V0.B16, V7.B16 \
	VAND V30.B16, V1.B16, V8.B16 \
	VUSHR $4, V0.B16, V0.B16 \
	VUSHR $4, V1.B16, V1.B16 \
	SDOT(16+2*J, 7, 2) \
	SDOT(16+2*J, 8, 3) \
	SDOT(17+2*J, 0, 4) \
	SDOT(17+2*J, 1, 5)

// func q4Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q4Kdot(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD blocks+24(FP), R3
	MOVD $0, R9 // lane
	VMOVI $15, V30.B16

loop:
	// Scales (R13) and mins (R14) as ggml's get_scale_min_k4, a byte each.
	MOVWU 4(R1), R10
	MOVWU 8(R1), R11
	MOVWU 12(R1), R12
	ANDW  $0x3f3f3f3f, R10, R13
	ANDW  $0x0f0f0f0f, R12, R15
	LSRW  $6, R10, R10
	ANDW  $0x03030303, R10, R10
	ORRW  R10<<4, R15, R15
	ORR   R15<<32, R13, R13
	ANDW  $0x3f3f3f3f, R11, R14
	LSRW  $4, R12, R12
	ANDW  $0x0f0f0f0f, R12, R12
	LSRW  $6, R11, R11
	ANDW  $0x03030303, R11, R11
	ORRW  R11<<4, R12, R12
	ORR   R12<<32, R14, R14

	// Σ bsum·min into V6: mins widened and paired with bsums 2j, 2j+1.
	VMOV  R14, V27.D[0]
	VUXTL V27.B8, V27.H8
	VZIP1 V27.H8, V27.H8, V28.H8
	VZIP2 V27.H8, V27.H8, V29.H8
	ADD   $260, R2, R5
	VLD1  (R5), [V10.H8, V11.H8]
	SMULL(6, 10, 28)
	SMLAL2(6, 10, 28)
	SMLAL(6, 11, 29)
	SMLAL2(6, 11, 29)

	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	SUBPAIR(0)
	SUBPAIR(1)
	SUBPAIR(2)
	SUBPAIR(3)
	SUM4(V16, V17, V18, V19)
	SUM4(V20, V21, V22, V23)

	// Scales to int32 lanes, times the sub-block sums.
	VMOV   R13, V24.D[0]
	VUXTL  V24.B8, V24.H8
	VUXTL  V24.H4, V25.S4
	VUXTL2 V24.H8, V26.S4
	MUL(16, 16, 25)
	MLA(16, 20, 26)
	KPARTIAL(V16, V6, (R1), 2(R1), (R2), (R0)(R9<<2))

	ADD  $1, R9
	AND  $7, R9
	ADD  $144, R1
	ADD  $292, R2
	SUBS $1, R3
	BNE  loop
	RET
