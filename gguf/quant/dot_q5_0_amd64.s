//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q5_0·Q8_0, eight blocks a round (22-byte blocks: fp16 d | uint32 qh |
// 16 bytes of nibbles). Element e is its nibble with bit e of qh above
// it, less 16. As Q4_0: the unsigned 5-bit values and the constant 16
// multiply the activation in int16 pairs, whose difference is exact.

// BLOCK leaves block K's eight int32 partial sums in V; Y13 holds 16s,
// Y12 int16 ones.
#define BLOCK(K, V) \
	NIBBLES(22*(K)+6) \
	FIFTHBITS(22*(K)+2) \
	VMOVDQU (34*(K)+2)(DX), Y1 \
	VPMADDUBSW Y1, Y0, Y0 \
	VPMADDUBSW Y1, Y13, Y1 \
	VPSUBW Y1, Y0, Y0 \
	VPMADDWD Y12, Y0, V

FIFTHDATA

// func q5_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q5_0x8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	BCASTB(16, X13, Y13)
	ONES16(X12, Y12)

	ROUNDS32(22, 34)
