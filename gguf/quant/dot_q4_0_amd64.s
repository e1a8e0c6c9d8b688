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

// The same for a one-row Batch, whose per-block figures (float32 dy,
// int32 Σy a block, at R10) give the activation scales as float32 and
// −8·Σy for eight blocks at once, and whose paired copy of the quants (at
// DX: for blocks 2m, 2m+1 of a round, elements 0-15 of each, then 16-31
// of each) lets one 256-bit VPMADDUBSW take a half of each of two blocks.
// Two blocks' sums share a vector, and four vectors fold into the eight
// blocks' sums in seven instructions rather than HSUM8's 21.

// PAIR leaves in V the sums of blocks 2M (lanes 0-3) and 2M+1 (4-7).
#define PAIR(M, V) \
	VMOVDQU (36*(M)+2)(SI), X0 \
	VINSERTI128 $1, (36*(M)+20)(SI), Y0, Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y14, Y0, Y0 \
	VPAND Y14, Y1, Y1 \
	VPMADDUBSW (64*(M))(DX), Y0, Y0 \
	VPMADDUBSW (64*(M)+32)(DX), Y1, Y1 \
	VPADDW Y1, Y0, Y0 \
	VPMADDWD Y12, Y0, V

// func q4_0x8p(acc *[8]float32, x, pairs, aux *byte, groups int)
TEXT ·q4_0x8p(SB), NOSPLIT, $0-40
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ pairs+16(FP), DX
	MOVQ aux+24(FP), R10
	MOVQ groups+32(FP), CX
	VMOVUPS (DI), Y15
	BCASTB(0x0f, X14, Y14)
	ONES16(X12, Y12)
	VMOVDQU pairOrder<>(SB), Y13

loopp:
	PAIR(0, Y4)
	PAIR(1, Y5)
	PAIR(2, Y6)
	PAIR(3, Y7)
	HPAIR(Y4, Y5, Y0, VPUNPCKLDQ, VPUNPCKHDQ)
	HPAIR(Y6, Y7, Y0, VPUNPCKLDQ, VPUNPCKHDQ)
	HPAIR(Y4, Y6, Y0, VPUNPCKLQDQ, VPUNPCKHQDQ)
	VPERMD Y4, Y13, Y4 // blocks 0 2 4 6 | 1 3 5 7 to 0-7
	FIGURES8(Y3, Y1)
	VPSLLD $3, Y1, Y1
	VPSUBD Y1, Y4, Y4
	SCALES8(SI, 18, X5, Y5)
	ACCUM8(Y4, Y5, Y3, Y15)
	ADDQ $(8*18), SI
	ADDQ $256, DX
	ADDQ $64, R10
	DECQ CX
	JNZ  loopp
	VMOVUPS Y15, (DI)
	VZEROUPPER
	RET

DATA pairOrder<>+0(SB)/8, $0x0000000400000000
DATA pairOrder<>+8(SB)/8, $0x0000000500000001
DATA pairOrder<>+16(SB)/8, $0x0000000600000002
DATA pairOrder<>+24(SB)/8, $0x0000000700000003
GLOBL pairOrder<>(SB), RODATA|NOPTR, $32
