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
	MOVL $0x00010001, AX // int16 ones
	VMOVD AX, X12
	VPBROADCASTD X12, Y12

loop:
	GROUP8(BLOCK)
	SCALES8(SI, 24, X5, Y5)
	SCALES8(DX, 36, X6, Y6)
	LEAQ 2(SI), R12
	LEAQ 2(DX), R13
	SCALES8(R12, 24, X7, Y7)
	SCALES8(R13, 36, X8, Y8)
	ACCUM8MIN(Y4, Y5, Y6, Y7, Y8, Y15)
	ADDQ $192, SI
	ADDQ $288, DX
	DECQ CX
	JNZ  loop

	VMOVUPS Y15, (DI)
	VZEROUPPER
	RET
