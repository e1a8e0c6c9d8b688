//go:build !purego

#include "textflag.h"

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
	VMOVUPS 0(DI), Y12
	VMOVUPS 32(DI), Y13
	VMOVUPS 64(DI), Y14
	VMOVUPS 96(DI), Y15

loop:
	LANES(0, Y12)
	LANES(32, Y13)
	LANES(64, Y14)
	LANES(96, Y15)
	ADDQ $128, SI
	ADDQ $128, DX
	DECQ CX
	JNZ  loop

	VMOVUPS Y12, 0(DI)
	VMOVUPS Y13, 32(DI)
	VMOVUPS Y14, 64(DI)
	VMOVUPS Y15, 96(DI)
	VZEROUPPER
	RET
