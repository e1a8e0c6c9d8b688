//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q4_K·Q8_K, one block a round (144 bytes: fp16 d, dmin | 12 bytes of
// 6-bit scales and mins | 128 bytes of nibbles; sub-block pair j takes the
// low nibbles of bytes 32j..32j+31 for activations 64j.., the high ones
// for 64j+32..). Nibbles times activations in int16 pairs (VPMADDUBSW),
// times the sub-block scale into int32 (VPMADDWD); the mins meet the
// activation's 16-element sums (bsums) the same way. Both totals are exact,
// and KFLUSH turns them into float32 partials, eight blocks at a time.

// SUBPAIR adds sub-blocks 2J and 2J+1 to Y7.
#define SUBPAIR(J) \
	VMOVDQU (16+32*J)(SI), Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y15, Y0, Y0 \
	VPAND Y15, Y1, Y1 \
	K45SCALE(J)

K45DATA

// func q4Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q4Kdot(SB), 0, $576-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ slots-576(SP), BX
	XORQ R12, R12 // slot
	VMOVUPS (DI), Y14
	K45SETUP

loop:
	KSCALEMIN
	VPXOR Y7, Y7, Y7
	SUBPAIR(0)
	SUBPAIR(1)
	SUBPAIR(2)
	SUBPAIR(3)
	KSAVE(Y7, (SI))
	KSAVEMIN(Y9, 2(SI))
	KNEXT(Y14, NOP)
	KEND(144, Y14)
