//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q3_K·Q8_K, one block a round (110 bytes: hmask[32] | qs[64] | 12 bytes
// of 6-bit scales | fp16 d). As Q2_K's quants, each with a high bit: bit
// 4c+k of hmask[l] for the field at shift 2k of byte l of half c; the
// quant is the 3-bit value less 4 (where that bit is clear, the 2-bit
// value less 4; where set, as is). The unsigned 3-bit values and the
// constant 4 multiply the activations in int16 pairs, whose difference
// is exact; the signed scales (less 32) multiply those into int32.

// GROUP adds the quants of half-field k (2-bit fields of Y3 at SHIFT, high
// bits from hmask Y5 by HBIT) times the 32 activations at OFF(DX), times
// scales 2M and 2M+1 of the half, to Y7. Y15 holds 0x03, Y14 0x04, Y13 4s.
#define GROUP(SHIFT, HBIT, OFF, M) \
	VPSRLW $SHIFT, Y3, Y0 \
	VPAND Y15, Y0, Y0 \
	HBIT \
	VPAND Y14, Y1, Y1 \
	VPOR Y1, Y0, Y0 \
	VMOVDQU OFF(DX), Y1 \
	VPMADDUBSW Y1, Y0, Y0 \
	VPMADDUBSW Y1, Y13, Y1 \
	VPSUBW Y1, Y0, Y0 \
	K16SCALES(M)

// Bit n of each hmask byte moved to bit 2, in Y1.
#define HB0 VPSLLW $2, Y5, Y1
#define HB1 VPSLLW $1, Y5, Y1
#define HB2 VMOVDQA Y5, Y1
#define HB3 VPSRLW $1, Y5, Y1
#define HB4 VPSRLW $2, Y5, Y1
#define HB5 VPSRLW $3, Y5, Y1
#define HB6 VPSRLW $4, Y5, Y1
#define HB7 VPSRLW $5, Y5, Y1

// HALF does the 128 elements whose qs start at Q(SI), activations at
// A(DX), high bits H0..H3; PERM picks the half's eight scales from Y9.
#define HALF(Q, A, PERM, H0, H1, H2, H3) \
	VMOVDQU Q(SI), Y3 \
	VPERMQ $PERM, Y9, Y6 \
	GROUP(0, H0, A, 0) \
	GROUP(2, H1, A+32, 1) \
	GROUP(4, H2, A+64, 2) \
	GROUP(6, H3, A+96, 3)

K16DATA

// func q3Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q3Kdot(SB), 0, $576-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ slots-576(SP), BX
	XORQ R12, R12 // slot
	VMOVUPS (DI), Y12
	KCLEARMIN // no min term
	BCASTB(0x03, X15, Y15)
	BCASTB(0x04, X14, Y14)
	BCASTB(4, X13, Y13)
	BCASTB(32, X11, Y11)
	MOVQ $0x0f0f0f0f0f0f0f0f, R11

loop:
	// The sixteen 6-bit scales as unpackQ3KScales: byte j < 8 of the
	// first eight has the low nibble of scale j, its high nibble that of
	// scale j+8; bits 2(j/4) of byte 8+j%4 are scale j's top two.
	MOVQ  96(SI), AX
	MOVL  104(SI), R8
	MOVQ  AX, R9
	ANDQ  R11, R9 // low nibbles 0-7
	SHRQ  $4, AX
	ANDQ  R11, AX // low nibbles 8-15
	MOVL  R8, R10
	ANDL  $0x03030303, R10 // top bits of 0-3
	SHRL  $2, R8
	MOVL  R8, R13
	ANDL  $0x03030303, R13 // 4-7
	SHLQ  $32, R13
	ORQ   R13, R10
	SHLQ  $4, R10
	ORQ   R10, R9
	SHRL  $2, R8
	MOVL  R8, R10
	ANDL  $0x03030303, R10 // 8-11
	SHRL  $2, R8
	ANDL  $0x03030303, R8 // 12-15
	SHLQ  $32, R8
	ORQ   R8, R10
	SHLQ  $4, R10
	ORQ   R10, AX
	VMOVQ R9, X9
	VPINSRQ $1, AX, X9, X9
	VPSUBB  X11, X9, X9
	VPMOVSXBW X9, Y9 // scales less 32, int16

	VMOVDQU (SI), Y5 // hmask
	VPXOR   Y7, Y7, Y7
	HALF(32, 4, 0x44, HB0, HB1, HB2, HB3)
	HALF(64, 132, 0xee, HB4, HB5, HB6, HB7)
	KSAVE(Y7, 108(SI))
	KNEXT(Y12, NOP)
	KEND(110, Y12)
