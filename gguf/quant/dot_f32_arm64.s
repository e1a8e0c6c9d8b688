//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// F32·F32, 32 elements a round, lanes as F16's; products rounded before
// the add, as in Go.

// func f32x32(acc *[32]float32, x, y *byte, chunks int)
TEXT ·f32x32(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD chunks+24(FP), R3
	LOADACC32

loop:
	VLD1.P 64(R1), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R2), [V4.S4, V5.S4, V6.S4, V7.S4]
	FMUL(0, 0, 4)
	FMUL(1, 1, 5)
	FMUL(2, 2, 6)
	FMUL(3, 3, 7)
	FADD(16, 16, 0)
	FADD(17, 17, 1)
	FADD(18, 18, 2)
	FADD(19, 19, 3)
	VLD1.P 64(R1), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R2), [V4.S4, V5.S4, V6.S4, V7.S4]
	FMUL(0, 0, 4)
	FMUL(1, 1, 5)
	FMUL(2, 2, 6)
	FMUL(3, 3, 7)
	FADD(20, 20, 0)
	FADD(21, 21, 1)
	FADD(22, 22, 2)
	FADD(23, 23, 3)
	SUBS $1, R3
	BNE  loop

	STOREACC32
	RET
