//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q4_0·Q8_0, eight blocks a round (Q4_0 blocks: fp16 d | 16 bytes of
// nibbles, element j low and j+16 high). The unsigned nibbles n multiply
// the activation's int8 in pairs (VPMADDUBSW, at most 2·15·128 in size),
// and so does 8, giving Σ(n−8)·y exactly in int16 before widening to
// int32. Then as Q8_0: HSUM8, ACCUM8.

// BLOCK leaves block K's eight int32 partial sums in V.
#define BLOCK(K, V) \
	NIBBLES(18*(K)+2) \
	VMOVDQU (34*(K)+2)(DX), Y1 \
	VPMADDUBSW Y1, Y0, Y0 \
	VPMADDUBSW Y1, Y13, Y1 \
	VPSUBW Y1, Y0, Y0 \
	VPMADDWD Y12, Y0, V

// func q4_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q4_0x8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	BCASTB(8, X13, Y13)
	ONES16(X12, Y12)

	ROUNDS32(18, 34)
