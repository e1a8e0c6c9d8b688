//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q8_0·Q8_0, eight blocks a round (34-byte blocks: fp16 d | int8 q[32]).
// Both sides are widened to int16 (VPMOVSXBW) and multiplied in pairs
// into int32 (VPMADDWD): exact for every int8, -128 included, where the
// usual sign trick (VPSIGNB + VPMADDUBSW) is not. HSUM8 then gives each
// block's exact sum in its own lane, which ACCUM8 scales into acc.

// BLOCK leaves block K's eight int32 partial sums in V.
#define BLOCK(K, V) \
	VPMOVSXBW (34*(K)+2)(SI), Y0 \
	VPMOVSXBW (34*(K)+18)(SI), Y1 \
	VPMOVSXBW (34*(K)+2)(DX), Y2 \
	VPMOVSXBW (34*(K)+18)(DX), Y3 \
	VPMADDWD Y2, Y0, Y0 \
	VPMADDWD Y3, Y1, Y1 \
	VPADDD Y1, Y0, V

// func q8_0x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q8_0x8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15

	ROUNDS32(34, 34)
