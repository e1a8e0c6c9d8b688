//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

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
	ROUNDSF(16, 64)
