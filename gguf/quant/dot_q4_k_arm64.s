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
	KSCALEMIN
	KZERO8
	SUBPAIR(0)
	SUBPAIR(1)
	SUBPAIR(2)
	SUBPAIR(3)
	KSCALED
	KPARTIAL(V16, V6, (R1), 2(R1), (R2), (R0)(R9<<2))
	KEND(144)
