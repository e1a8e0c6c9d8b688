//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q4_1·Q8_1, eight blocks a round (20-byte blocks: fp16 d, m | 16 bytes
// of nibbles; Q8_1 36 bytes: fp16 d, s = d·Σq | int8 q[32]). The unsigned
// nibbles multiply the activation in int16 pairs (VPMADDUBSW), exact;
// ACCUM8MIN adds the min term m·s.

// BLOCK leaves block K's eight int32 partial sums in V; Y12 holds int16
// ones.
#define BLOCK(K, V) \
	NIBBLES(20*(K)+4) \
	VPMADDUBSW (36*(K)+4)(DX), Y0, Y0 \
	VPMADDWD Y12, Y0, V

// func q4_1x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q4_1x8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	ONES16(X12, Y12)

	ROUNDS32MIN(20, 36)
