//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// BF16·BF16, 32 elements a round, lanes as F16's. A bfloat16 is the top
// half of a float32: interleave with zeros (V31). Products are rounded before the add, as
// in Go (they can underflow, so a fused multiply-add could differ).

// LANES does the eight elements in V of x and W of y, into the
// accumulators numbered A and A+1.
#define LANES(V, W, A) \
	VZIP1 V.H8, V31.H8, V8.H8 \
	VZIP1 W.H8, V31.H8, V9.H8 \
	FMUL(8, 8, 9) \
	FADD(A, A, 8) \
	VZIP2 V.H8, V31.H8, V8.H8 \
	VZIP2 W.H8, V31.H8, V9.H8 \
	FMUL(8, 8, 9) \
	FADD(A+1, A+1, 8)

// func bf16x32(acc *[32]float32, x, y *byte, chunks int)
TEXT ·bf16x32(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD chunks+24(FP), R3
	LOADACC32
	VEOR V31.B16, V31.B16, V31.B16

loop:
	VLD1.P 64(R1), [V0.H8, V1.H8, V2.H8, V3.H8]
	VLD1.P 64(R2), [V4.H8, V5.H8, V6.H8, V7.H8]
	LANES(V0, V4, 16)
	LANES(V1, V5, 18)
	LANES(V2, V6, 20)
	LANES(V3, V7, 22)
	SUBS $1, R3
	BNE  loop

	STOREACC32
	RET
