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
	MOVL $0x00010001, AX // int16 ones
	VMOVD AX, X12
	VPBROADCASTD X12, Y12

loop:
	GROUP8(BLOCK)
	SCALES8(SI, 20, X5, Y5)
	SCALES8(DX, 36, X6, Y6)
	LEAQ 2(SI), R12
	LEAQ 2(DX), R13
	SCALES8(R12, 20, X7, Y7)
	SCALES8(R13, 36, X8, Y8)
	ACCUM8MIN(Y4, Y5, Y6, Y7, Y8, Y15)
	ADDQ $160, SI
	ADDQ $288, DX
	DECQ CX
	JNZ  loop

	VMOVUPS Y15, (DI)
	VZEROUPPER
	RET
