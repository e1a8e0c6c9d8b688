//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// MXFP4·Q8_0, eight blocks a round (17-byte blocks: the E8M0 exponent,
// then sixteen bytes of nibbles laid out as Q4_0's, each an index into the
// doubled E2M1 levels of kvaluesMXFP4). The integer sums are IQ4_NL's (the
// levels are signed, |level| ≤ 12); the block scale is half the E8M0
// value, built as e8m0Half builds it, times the activation's fp16 scale.

// BLOCK leaves block K's eight int32 partial sums in V; Y13 holds the
// levels in both 128-bit lanes, Y12 int16 ones.
#define BLOCK(K, V) \
	NIBBLES(17*(K)+1) \
	VPSHUFB Y0, Y13, Y0 \
	VMOVDQU (34*(K)+2)(DX), Y1 \
	VPSIGNB Y1, Y0, Y0 \
	VPSIGNB Y1, Y1, Y1 \
	VPMADDUBSW Y0, Y1, Y0 \
	VPMADDWD Y12, Y0, V

// E8M0S8 leaves in Y5 the eight blocks' halved scales, 2^(e−128): for
// e ≥ 2 the float32 bits (e−1)<<23, for e < 2 the subnormals
// 0x00200000<<e. Clobbers AX, R8, Y0, Y1, Y2, Y3.
#define E8M0S8 \
	MOVBQZX 0(SI), AX \
	MOVBQZX 17(SI), R8 \
	SHLQ $8, R8 \
	ORQ R8, AX \
	MOVBQZX 34(SI), R8 \
	SHLQ $16, R8 \
	ORQ R8, AX \
	MOVBQZX 51(SI), R8 \
	SHLQ $24, R8 \
	ORQ R8, AX \
	MOVBQZX 68(SI), R8 \
	SHLQ $32, R8 \
	ORQ R8, AX \
	MOVBQZX 85(SI), R8 \
	SHLQ $40, R8 \
	ORQ R8, AX \
	MOVBQZX 102(SI), R8 \
	SHLQ $48, R8 \
	ORQ R8, AX \
	MOVBQZX 119(SI), R8 \
	SHLQ $56, R8 \
	ORQ R8, AX \
	VMOVQ AX, X0 \
	VPMOVZXBD X0, Y0 \
	VPSUBD Y11, Y0, Y1 \
	VPSLLD $23, Y1, Y1 \
	VPSLLVD Y0, Y10, Y2 \
	VPCMPGTD Y0, Y9, Y3 \
	VPBLENDVB Y3, Y2, Y1, Y5

DATA mxlevels<>+0(SB)/8, $0x0c08060403020100 // 0 1 2 3 4 6 8 12
DATA mxlevels<>+8(SB)/8, $0xf4f8fafcfdfeff00 // 0 -1 -2 -3 -4 -6 -8 -12
GLOBL mxlevels<>(SB), RODATA|NOPTR, $16

// func mxfp4x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·mxfp4x8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	VBROADCASTI128 mxlevels<>(SB), Y13
	ONES16(X12, Y12)

loop:
	GROUP8(BLOCK)
	// Y4 holds the sums; the scales' constants are made afresh each round
	// (GROUP8 uses Y4-Y11).
	MOVL $1, AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11
	MOVL $0x00200000, AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10
	MOVL $2, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9
	E8M0S8
	SCALES8(DX, 34, X6, Y6)
	ACCUM8(Y4, Y5, Y6, Y15)
	ROUNDSEND(17, 34)
