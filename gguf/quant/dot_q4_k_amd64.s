//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q4_K·Q8_K, one block a round (144 bytes: fp16 d, dmin | 12 bytes of
// 6-bit scales and mins | 128 bytes of nibbles; sub-block pair j takes the
// low nibbles of bytes 32j..32j+31 for activations 64j.., the high ones
// for 64j+32..). Nibbles times activations in int16 pairs (VPMADDUBSW),
// times the sub-block scale into int32 (VPMADDWD); the mins meet the
// activation's 16-element sums (bsums) the same way. Both totals are exact,
// and KPARTIAL turns them into the block's float32 partial.

// SUBPAIR adds sub-blocks 2J and 2J+1 to Y7; Y8 is the VPSHUFB mask that
// spreads scale 2J to int16 lanes, stepped by Y14 to the next scale.
#define SUBPAIR(J) \
	VMOVDQU (16+32*J)(SI), Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y15, Y0, Y0 \
	VPAND Y15, Y1, Y1 \
	VPMADDUBSW (4+64*J)(DX), Y0, Y0 \
	VPMADDUBSW (36+64*J)(DX), Y1, Y1 \
	VPSHUFB Y8, Y10, Y2 \
	VPADDB Y14, Y8, Y8 \
	VPSHUFB Y8, Y10, Y3 \
	VPADDB Y14, Y8, Y8 \
	VPMADDWD Y2, Y0, Y0 \
	VPMADDWD Y3, Y1, Y1 \
	VPADDD Y0, Y7, Y7 \
	VPADDD Y1, Y7, Y7

// minPairs spreads min j (byte j of every 8) to int16 lanes 2j and 2j+1,
// against bsums 2j and 2j+1.
DATA minPairs<>+0(SB)/8, $0x8001800180008000
DATA minPairs<>+8(SB)/8, $0x8003800380028002
DATA minPairs<>+16(SB)/8, $0x8005800580048004
DATA minPairs<>+24(SB)/8, $0x8007800780068006
GLOBL minPairs<>(SB), RODATA|NOPTR, $32

// func q4Kdot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·q4Kdot(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	XORQ BX, BX // lane
	BCASTB(0x0f, X15, Y15)
	MOVL $0x00000001, AX // scale-mask step: +1 in each low byte of an int16
	VMOVD AX, X14
	VPBROADCASTW X14, Y14
	MOVL $0x80008000, AX // first scale mask: byte 0, zero-extended
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VMOVDQU minPairs<>(SB), Y12

loop:
	// Scales and mins as ggml's get_scale_min_k4, eight bytes each.
	MOVL 4(SI), AX
	MOVL 8(SI), R8
	MOVL 12(SI), R9
	MOVL AX, R10
	ANDL $0x3f3f3f3f, R10
	MOVL R9, R11
	ANDL $0x0f0f0f0f, R11
	SHRL $6, AX
	ANDL $0x03030303, AX
	SHLL $4, AX
	ORL  AX, R11
	SHLQ $32, R11
	ORQ  R11, R10 // scales
	MOVL R8, R11
	ANDL $0x3f3f3f3f, R11
	SHRL $4, R9
	ANDL $0x0f0f0f0f, R9
	SHRL $6, R8
	ANDL $0x03030303, R8
	SHLL $4, R8
	ORL  R8, R9
	SHLQ $32, R9
	ORQ  R9, R11 // mins
	VMOVQ R10, X0
	VPBROADCASTQ X0, Y10
	VMOVQ R11, X0
	VPBROADCASTQ X0, Y11

	VPSHUFB Y12, Y11, Y11
	VPMADDWD 260(DX), Y11, Y9 // Σ bsum·min
	VMOVDQA Y13, Y8
	VPXOR Y7, Y7, Y7
	SUBPAIR(0)
	SUBPAIR(1)
	SUBPAIR(2)
	SUBPAIR(3)
	VMOVD (SI), X6
	KPARTIAL(Y7, X7, Y9, X6, (DX), (DI)(BX*4))

	INCQ BX
	ANDQ $7, BX
	ADDQ $144, SI
	ADDQ $292, DX
	DECQ CX
	JNZ  loop

	VZEROUPPER
	RET
