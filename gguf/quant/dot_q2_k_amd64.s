//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q2_K·Q8_K, one block a round (84 bytes: 16 bytes of 4-bit scale and min
// per 16-element sub-block | qs[64] | fp16 d | fp16 dmin). Each 128-element
// half takes 32 bytes of qs; its 2-bit fields at shift 2k are the quants of
// activations 32k..32k+31 of the half, sub-blocks 2k and 2k+1 of it. They
// multiply the activations in int16 pairs (VPMADDUBSW), the scales into
// int32 (K16SCALES); the mins meet the bsums in VPMADDWD. KFLUSH finishes,
// eight blocks at a time.

// GROUP adds the 2-bit fields of Y3 at SHIFT, times the 32 activations at
// OFF(DX), times scales 2M and 2M+1 of the half, to Y7; Y14 holds 0x03.
#define GROUP(SHIFT, OFF, M) \
	VPSRLW $SHIFT, Y3, Y0 \
	VPAND Y14, Y0, Y0 \
	VPMADDUBSW OFF(DX), Y0, Y0 \
	K16SCALES(M)

// HALF does the 128 elements whose qs start at Q(SI), activations at
// A(DX); PERM picks the half's eight scales from Y9.
#define HALF(Q, A, PERM) \
	VMOVDQU Q(SI), Y3 \
	VPERMQ $PERM, Y9, Y6 \
	GROUP(0, A, 0) \
	GROUP(2, A+32, 1) \
	GROUP(4, A+64, 2) \
	GROUP(6, A+96, 3)

K16DATA

// func q2Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q2Kdot(SB), 0, $576-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ slots-576(SP), BX
	XORQ R12, R12 // slot
	VMOVUPS (DI), Y12
	BCASTB(0x0f, X15, Y15)
	BCASTB(0x03, X14, Y14)

loop:
	VMOVDQU   (SI), X8
	VPAND     X15, X8, X9
	VPMOVZXBW X9, Y9 // scales, int16
	VPSRLW    $4, X8, X8
	VPAND     X15, X8, X8
	VPMOVZXBW X8, Y8 // mins, int16
	VPMADDWD  260(DX), Y8, Y10 // Σ bsum·min
	VPXOR     Y7, Y7, Y7
	HALF(16, 4, 0x44)
	HALF(48, 132, 0xee)
	KSAVE(Y7, 80(SI))
	KSAVEMIN(Y10, 82(SI))
	KNEXT(Y12, NOP)
	KEND(84, Y12)
