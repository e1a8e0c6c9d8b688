//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q5_K·Q8_K, one block a round (176 bytes: fp16 d, dmin | 12 bytes of
// 6-bit scales and mins | qh[32] | 128 bytes of nibbles). As Q4_K, with a
// fifth bit over each nibble: bit 2j of qh[l] over the low nibble of
// byte l of sub-block pair j, bit 2j+1 over the high one.

// SUBPAIR adds sub-blocks 2J and 2J+1 to Y7. Y6 holds qh shifted right
// by 2J (in each byte; bits shifted in from the next byte are masked off),
// Y5 0x01 and Y4 0x02 bytes.
#define SUBPAIR(J) \
	VMOVDQU (48+32*J)(SI), Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y15, Y0, Y0 \
	VPAND Y15, Y1, Y1 \
	VPAND Y5, Y6, Y2 \
	VPAND Y4, Y6, Y3 \
	VPSLLW $4, Y2, Y2 \
	VPSLLW $3, Y3, Y3 \
	VPOR Y2, Y0, Y0 \
	VPOR Y3, Y1, Y1 \
	VPSRLW $2, Y6, Y6 \
	K45SCALE(J)

K45DATA

// BITS loads the fifth-bit masks (KFLUSH clobbers them).
#define BITS \
	BCASTB(1, X5, Y5) \
	BCASTB(2, X4, Y4)

// func q5Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q5Kdot(SB), 0, $576-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ slots-576(SP), BX
	XORQ R12, R12 // slot
	VMOVUPS (DI), Y14
	K45SETUP
	BITS

loop:
	KSCALEMIN
	VPXOR Y7, Y7, Y7
	VMOVDQU 16(SI), Y6
	SUBPAIR(0)
	SUBPAIR(1)
	SUBPAIR(2)
	SUBPAIR(3)
	KSAVE(Y7, (SI))
	KSAVEMIN(Y9, 2(SI))
	KNEXT(Y14, BITS)
	KEND(176, Y14)
