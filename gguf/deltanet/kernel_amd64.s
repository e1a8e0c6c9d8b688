//go:build amd64 && !purego

#include "textflag.h"

// kernel.go's decayRow and updateRow over whole chunks of 32 elements,
// with AVX: the 32 lanes of acc in Y0-Y3, each product rounded before its
// add (VMULPS then VADDPS, as the Go does), so the same bits.

#define LOADACC \
	VMOVUPS 0(DI), Y0 \
	VMOVUPS 32(DI), Y1 \
	VMOVUPS 64(DI), Y2 \
	VMOVUPS 96(DI), Y3

#define STOREACC \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	VZEROUPPER

// func decayRow32(acc *[32]float32, row, old, k *float32, decay float32, chunks int)
TEXT ·decayRow32(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ old+16(FP), DX
	MOVQ k+24(FP), BX
	VBROADCASTSS decay+32(FP), Y8
	MOVQ chunks+40(FP), CX
	LOADACC

decay:
	// old is read before row is written: they may be one buffer.
	VMULPS 0(DX), Y8, Y4
	VMULPS 32(DX), Y8, Y5
	VMULPS 64(DX), Y8, Y6
	VMULPS 96(DX), Y8, Y7
	VMOVUPS Y4, 0(SI)
	VMOVUPS Y5, 32(SI)
	VMOVUPS Y6, 64(SI)
	VMOVUPS Y7, 96(SI)
	VMULPS 0(BX), Y4, Y4
	VMULPS 32(BX), Y5, Y5
	VMULPS 64(BX), Y6, Y6
	VMULPS 96(BX), Y7, Y7
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, BX
	DECQ CX
	JNZ  decay

	STOREACC
	RET

// func updateRow32(acc *[32]float32, row, k, q *float32, d float32, chunks int)
TEXT ·updateRow32(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ k+16(FP), DX
	MOVQ q+24(FP), BX
	VBROADCASTSS d+32(FP), Y8
	MOVQ chunks+40(FP), CX
	LOADACC

update:
	VMULPS 0(DX), Y8, Y4
	VMULPS 32(DX), Y8, Y5
	VMULPS 64(DX), Y8, Y6
	VMULPS 96(DX), Y8, Y7
	VADDPS 0(SI), Y4, Y4
	VADDPS 32(SI), Y5, Y5
	VADDPS 64(SI), Y6, Y6
	VADDPS 96(SI), Y7, Y7
	VMOVUPS Y4, 0(SI)
	VMOVUPS Y5, 32(SI)
	VMOVUPS Y6, 64(SI)
	VMOVUPS Y7, 96(SI)
	VMULPS 0(BX), Y4, Y4
	VMULPS 32(BX), Y5, Y5
	VMULPS 64(BX), Y6, Y6
	VMULPS 96(BX), Y7, Y7
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, BX
	DECQ CX
	JNZ  update

	STOREACC
	RET
