//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q5_1·Q8_1, eight blocks a round (24-byte blocks: fp16 d, m | uint32 qh
// | 16 bytes of nibbles). Element e is its nibble with bit e of qh above
// it; otherwise as Q4_1 (at most 2·31·128 in an int16 pair, exact).

// BLOCK leaves block K's eight int32 partial sums in V; Y12 holds int16
// ones.
#define BLOCK(K, V) \
	NIBBLES(24*(K)+8) \
	FIFTHBITS(24*(K)+4) \
	VPMADDUBSW (36*(K)+4)(DX), Y0, Y0 \
	VPMADDWD Y12, Y0, V

FIFTHDATA

// func q5_1x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·q5_1x8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	ONES16(X12, Y12)

	ROUNDS32MIN(24, 36)
