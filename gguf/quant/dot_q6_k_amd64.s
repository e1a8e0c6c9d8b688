//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q6_K·Q8_K, one block a round (210 bytes: ql[128] | qh[64] | int8
// scales[16] | fp16 d), as two 128-element halves. Element l of a half
// (l < 32) has four 6-bit quants, for activations l, l+32, l+64, l+96:
// low and high nibbles of ql[l] and ql[l+32], each with two bits of qh[l]
// above them. For 32 activations at a time the unsigned quants q and the
// constant 32 multiply the activations in int16 pairs (VPMADDUBSW), whose
// difference is Σ(q−32)·a exactly; VPMADDWD then multiplies by the
// sub-block scale (one per 16 elements) into int32. KFLUSH finishes,
// eight blocks at a time.

// QUANTS(M) leaves in Y0 the quants of activation group M: Y3 = ql[0:32],
// Y4 = ql[32:64], Y5 = qh (bytes), Y15 = 0x0f, Y14 = 0x30.
#define Q1 \
	VPAND Y15, Y3, Y0 \
	VPSLLW $4, Y5, Y1 \
	VPAND Y14, Y1, Y1 \
	VPOR Y1, Y0, Y0
#define Q2 \
	VPAND Y15, Y4, Y0 \
	VPSLLW $2, Y5, Y1 \
	VPAND Y14, Y1, Y1 \
	VPOR Y1, Y0, Y0
#define Q3 \
	VPSRLW $4, Y3, Y0 \
	VPAND Y15, Y0, Y0 \
	VPAND Y14, Y5, Y1 \
	VPOR Y1, Y0, Y0
#define Q4 \
	VPSRLW $4, Y4, Y0 \
	VPAND Y15, Y0, Y0 \
	VPSRLW $2, Y5, Y1 \
	VPAND Y14, Y1, Y1 \
	VPOR Y1, Y0, Y0

// GROUP adds Σ scale·(q−32)·a for the 32 activations at OFF(DX) and the
// quants in Y0; Y6 holds the half's scales as int16 in both lanes.
#define GROUP(OFF, M) \
	VMOVDQU OFF(DX), Y1 \
	VPMADDUBSW Y1, Y0, Y0 \
	VPMADDUBSW Y1, Y13, Y1 \
	VPSUBW Y1, Y0, Y0 \
	K16SCALES(M)

// HALF does the 128 elements whose ql start at QL(SI), qh at QH(SI),
// activations at A(DX); PERM picks the half's eight scales from Y9.
#define HALF(QL, QH, A, PERM) \
	VMOVDQU QL(SI), Y3 \
	VMOVDQU (QL+32)(SI), Y4 \
	VMOVDQU QH(SI), Y5 \
	VPERMQ $PERM, Y9, Y6 \
	Q1 \
	GROUP(A, 0) \
	Q2 \
	GROUP(A+32, 1) \
	Q3 \
	GROUP(A+64, 2) \
	Q4 \
	GROUP(A+96, 3)

K16DATA

// func q6Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q6Kdot(SB), 0, $576-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ slots-576(SP), BX
	XORQ R12, R12 // slot
	VMOVUPS (DI), Y12
	KCLEARMIN // no min term
	BCASTB(0x0f, X15, Y15)
	BCASTB(0x30, X14, Y14)
	BCASTB(32, X13, Y13)

loop:
	VPMOVSXBW 192(SI), Y9 // the sixteen scales, int16
	VPXOR Y7, Y7, Y7
	HALF(0, 128, 4, 0x44)
	HALF(64, 160, 132, 0xee)
	KSAVE(Y7, 208(SI))
	KNEXT(Y12, NOP)
	KEND(210, Y12)
