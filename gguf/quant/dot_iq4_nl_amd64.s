//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// IQ4_NL·Q8_0, eight blocks a round (18-byte blocks laid out as Q4_0's,
// each nibble an index into the sixteen int8 levels of kvaluesIQ4NL). The
// levels (VPSHUFB from a table) are signed, so the sign trick makes
// VPMADDUBSW apply: |y| (unsigned; 128 for −128) times level·sign(y)
// (|level| ≤ 127, so the negation cannot overflow), at most 2·128·127 in
// size, exact. Then as Q4_0.

// BLOCK leaves block K's eight int32 partial sums in V; Y13 holds the
// levels in both 128-bit lanes, Y12 int16 ones.
#define BLOCK(K, V) \
	NIBBLES(18*(K)+2) \
	VPSHUFB Y0, Y13, Y0 \
	VMOVDQU (34*(K)+2)(DX), Y1 \
	VPSIGNB Y1, Y0, Y0 \
	VPSIGNB Y1, Y1, Y1 \
	VPMADDUBSW Y0, Y1, Y0 \
	VPMADDWD Y12, Y0, V

DATA levels<>+0(SB)/8, $0xf6eaddcfbfad9881 // -127 -104 -83 -65 -49 -35 -22 -10
DATA levels<>+8(SB)/8, $0x7159453526190d01 // 1 13 25 38 53 69 89 113
GLOBL levels<>(SB), RODATA|NOPTR, $16

// func iq4nlx8(acc *[8]float32, x, y *byte, groups int)
TEXT ·iq4nlx8(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ groups+24(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	VBROADCASTI128 levels<>(SB), Y13
	ONES16(X12, Y12)

	ROUNDS32(18, 34)
