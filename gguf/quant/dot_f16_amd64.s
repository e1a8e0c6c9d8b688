//go:build !purego

#include "textflag.h"

// F16·F16, 32 elements a round: element i's product goes to lane i mod 32
// of acc (Y12..Y15 hold lanes 0-7, 8-15, 16-23, 24-31). VCVTPH2PS widens
// exactly, and the product of two halves is exact in float32, so
// multiply-then-add rounds once, as the Go kernel does.

#define LANES(OFF, ACC) \
	VCVTPH2PS OFF(SI), Y0 \
	VCVTPH2PS OFF(DX), Y1 \
	VMULPS Y1, Y0, Y0 \
	VADDPS Y0, ACC, ACC

// func f16x32(acc *[32]float32, x, y *byte, chunks int)
TEXT ·f16x32(SB), NOSPLIT, $0-32
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
	LANES(16, Y13)
	LANES(32, Y14)
	LANES(48, Y15)
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JNZ  loop

	VMOVUPS Y12, 0(DI)
	VMOVUPS Y13, 32(DI)
	VMOVUPS Y14, 64(DI)
	VMOVUPS Y15, 96(DI)
	VZEROUPPER
	RET
