//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// F16·F16, 32 elements a round: element i's product goes to lane i mod 32
// of acc (V16..V23 hold lanes 0-3, 4-7, ..., 28-31). FCVTL widens exactly
// and the product of two halves is exact in float32, so a fused
// multiply-add (FMLA) rounds once, exactly as the Go kernel's
// multiply-then-add does.

// func f16x32(acc *[32]float32, x, y *byte, chunks int)
TEXT ·f16x32(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD chunks+24(FP), R3
	LOADACC32

loop:
	VLD1.P 64(R1), [V0.H8, V1.H8, V2.H8, V3.H8]
	VLD1.P 64(R2), [V4.H8, V5.H8, V6.H8, V7.H8]
	F16LANES(0, 4, 16)
	F16LANES(1, 5, 18)
	F16LANES(2, 6, 20)
	F16LANES(3, 7, 22)
	SUBS $1, R3
	BNE  loop

	STOREACC32
	RET
