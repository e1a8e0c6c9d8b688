//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// BF16·BF16, 32 elements a round, lanes as F16's. A bfloat16 is the top
// half of a float32: zero-extend and shift. Products are rounded before
// the add, as in Go (they can underflow, so an FMA could differ).

#define LANES(OFF, ACC) \
	VPMOVZXWD OFF(SI), Y0 \
	VPMOVZXWD OFF(DX), Y1 \
	VPSLLD $16, Y0, Y0 \
	VPSLLD $16, Y1, Y1 \
	VMULPS Y1, Y0, Y0 \
	VADDPS Y0, ACC, ACC

// func bf16x32(acc *[32]float32, x, y *byte, chunks int)
TEXT ·bf16x32(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ chunks+24(FP), CX
	ROUNDSF(16, 64)
