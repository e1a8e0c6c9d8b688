//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// F32·F32, 32 elements a round, lanes as F16's; products rounded before
// the add, as in Go.

#define LANES(OFF, ACC) \
	VMOVUPS OFF(SI), Y0 \
	VMULPS OFF(DX), Y0, Y0 \
	VADDPS Y0, ACC, ACC

// func f32x32(acc *[32]float32, x, y *byte, chunks int)
TEXT ·f32x32(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ chunks+24(FP), CX
	ROUNDSF(32, 128)
