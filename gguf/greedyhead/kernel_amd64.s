//go:build amd64 && !purego

#include "textflag.h"

// The shadow's kernels (kernel.go's rows16Go is their arithmetic): a
// block is sixteen weight rows, each group of 64 bytes four quants+128
// of each row (row l in bytes 4l..4l+3). VPDPBUSD takes the group as
// unsigned bytes from a register and an activation's four signed quants
// by embedded broadcast from memory, so a group is loaded once for every
// activation row and row l's sum lands in lane l. Each activation row
// keeps two chains (even and odd groups), joined at the end of a block;
// then sum − corr, to float32, times scale·t, stored, and the lanes'
// running maxima kept. groups is n/4, even.

// The five- to eight-row kernels read the activations interleaved
// (interleave8: group g's four quants of row i at 32g+4i), so that every
// row is a displacement from one cursor (BX); row i's even and odd groups
// chain in Zi and Z(8+i), its lanes' maxima in Z(24+i), and the
// correction and scale·t come by broadcast from memory (R9, R10) in the
// block's epilogue. W_ROWi(M) applies M to row i's operands: its
// activation's offsets in an even and an odd group, its two chains, its
// approximations' address (R11 is R14 four rows on), its lanes register
// and their offset at lanes; W_EACHk(M) to the first k rows.
#define W_ROW0(M) M(0, 32, Z0, Z8, (R14), Z24, 0)
#define W_ROW1(M) M(4, 36, Z1, Z9, (R14)(R15*1), Z25, 64)
#define W_ROW2(M) M(8, 40, Z2, Z10, (R14)(R15*2), Z26, 128)
#define W_ROW3(M) M(12, 44, Z3, Z11, (R14)(R13*1), Z27, 192)
#define W_ROW4(M) M(16, 48, Z4, Z12, (R11), Z28, 256)
#define W_ROW5(M) M(20, 52, Z5, Z13, (R11)(R15*1), Z29, 320)
#define W_ROW6(M) M(24, 56, Z6, Z14, (R11)(R15*2), Z30, 384)
#define W_ROW7(M) M(28, 60, Z7, Z15, (R11)(R13*1), Z31, 448)

#define W_EACH5(M) \
	W_ROW0(M) \
	W_ROW1(M) \
	W_ROW2(M) \
	W_ROW3(M) \
	W_ROW4(M)

#define W_EACH6(M) \
	W_EACH5(M) \
	W_ROW5(M)

#define W_EACH7(M) \
	W_EACH6(M) \
	W_ROW6(M)

#define W_EACH8(M) \
	W_EACH7(M) \
	W_ROW7(M)

#define W_LANES(XE, XO, A, B, OUT, L, LO) VMOVUPS LO(AX), L

#define W_ZERO(XE, XO, A, B, OUT, L, LO) \
	VPXORD A, A, A \
	VPXORD B, B, B

#define W_EVEN(XE, XO, A, B, OUT, L, LO) VPDPBUSD.BCST XE(BX), Z16, A

#define W_ODD(XE, XO, A, B, OUT, L, LO) VPDPBUSD.BCST XO(BX), Z17, B

// W_FOLD: the chains' sum, less the correction, to float32, times
// scale·t (Z18 the block's scales), stored and kept in the lanes' maxima.
#define W_FOLD(XE, XO, A, B, OUT, L, LO) \
	VPADDD  B, A, A \
	VPSUBD.BCST XE(R9), A, A \
	VCVTDQ2PS A, A \
	VMULPS.BCST XE(R10), Z18, Z19 \
	VMULPS  Z19, A, A \
	VMOVUPS A, OUT \
	VMAXPS  A, L, L

#define W_STORE(XE, XO, A, B, OUT, L, LO) VMOVUPS L, LO(AX)

#define WIDE(EACH) \
	MOVQ packed+0(FP), SI \
	MOVQ scale+8(FP), DI \
	MOVQ blocks+16(FP), CX \
	MOVQ groups+24(FP), DX \
	MOVQ xi+32(FP), R8 \
	MOVQ corr+40(FP), R9 \
	MOVQ t+48(FP), R10 \
	MOVQ approx+56(FP), R14 \
	MOVQ os+64(FP), R15 \
	LEAQ (R15)(R15*2), R13 \
	MOVQ lanes+72(FP), AX \
	EACH(W_LANES) \
wblock: \
	EACH(W_ZERO) \
	MOVQ R8, BX \
	MOVQ DX, R12 \
wgroup: \
	VMOVDQU32 0(SI), Z16 \
	VMOVDQU32 64(SI), Z17 \
	EACH(W_EVEN) \
	EACH(W_ODD) \
	ADDQ $128, SI \
	ADDQ $64, BX \
	SUBQ $2, R12 \
	JNZ  wgroup \
	VMOVUPS (DI), Z18 \
	LEAQ (R14)(R15*4), R11 \
	EACH(W_FOLD) \
	ADDQ $64, DI \
	ADDQ $64, R14 \
	DECQ CX \
	JNZ  wblock \
	EACH(W_STORE) \
	VZEROUPPER \
	RET

// func rows16x4VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x4VNNI(SB), NOSPLIT, $0-88
	MOVQ packed+0(FP), SI
	MOVQ scale+8(FP), DI
	MOVQ blocks+16(FP), CX
	MOVQ groups+24(FP), DX
	MOVQ x+32(FP), R8
	MOVQ xs+40(FP), BX
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	MOVQ corr+48(FP), AX
	VPBROADCASTD 0(AX), Z28
	VPBROADCASTD 4(AX), Z29
	VPBROADCASTD 8(AX), Z30
	VPBROADCASTD 12(AX), Z31
	MOVQ t+56(FP), AX
	VBROADCASTSS 0(AX), Z12
	VBROADCASTSS 4(AX), Z13
	VBROADCASTSS 8(AX), Z14
	VBROADCASTSS 12(AX), Z15
	MOVQ approx+64(FP), R14
	MOVQ os+72(FP), R15
	LEAQ (R15)(R15*2), R13
	MOVQ lanes+80(FP), AX
	VMOVUPS 0(AX), Z24
	VMOVUPS 64(AX), Z25
	VMOVUPS 128(AX), Z26
	VMOVUPS 192(AX), Z27

block4:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ BX, BX
	MOVQ DX, R12

group4:
	VMOVDQU32 0(SI), Z16
	VMOVDQU32 64(SI), Z17
	VPDPBUSD.BCST (R8)(BX*1), Z16, Z0
	VPDPBUSD.BCST (R9)(BX*1), Z16, Z1
	VPDPBUSD.BCST (R10)(BX*1), Z16, Z2
	VPDPBUSD.BCST (R11)(BX*1), Z16, Z3
	VPDPBUSD.BCST 4(R8)(BX*1), Z17, Z4
	VPDPBUSD.BCST 4(R9)(BX*1), Z17, Z5
	VPDPBUSD.BCST 4(R10)(BX*1), Z17, Z6
	VPDPBUSD.BCST 4(R11)(BX*1), Z17, Z7
	ADDQ $128, SI
	ADDQ $8, BX
	SUBQ $2, R12
	JNZ  group4

	VMOVUPS (DI), Z8
	VPADDD  Z4, Z0, Z0
	VPADDD  Z5, Z1, Z1
	VPADDD  Z6, Z2, Z2
	VPADDD  Z7, Z3, Z3
	VPSUBD  Z28, Z0, Z0
	VPSUBD  Z29, Z1, Z1
	VPSUBD  Z30, Z2, Z2
	VPSUBD  Z31, Z3, Z3
	VCVTDQ2PS Z0, Z0
	VCVTDQ2PS Z1, Z1
	VCVTDQ2PS Z2, Z2
	VCVTDQ2PS Z3, Z3
	VMULPS  Z12, Z8, Z9
	VMULPS  Z9, Z0, Z0
	VMULPS  Z13, Z8, Z9
	VMULPS  Z9, Z1, Z1
	VMULPS  Z14, Z8, Z9
	VMULPS  Z9, Z2, Z2
	VMULPS  Z15, Z8, Z9
	VMULPS  Z9, Z3, Z3
	VMOVUPS Z0, (R14)
	VMOVUPS Z1, (R14)(R15*1)
	VMOVUPS Z2, (R14)(R15*2)
	VMOVUPS Z3, (R14)(R13*1)
	VMAXPS  Z0, Z24, Z24
	VMAXPS  Z1, Z25, Z25
	VMAXPS  Z2, Z26, Z26
	VMAXPS  Z3, Z27, Z27
	ADDQ $64, DI
	ADDQ $64, R14
	DECQ CX
	JNZ  block4

	VMOVUPS Z24, 0(AX)
	VMOVUPS Z25, 64(AX)
	VMOVUPS Z26, 128(AX)
	VMOVUPS Z27, 192(AX)
	VZEROUPPER
	RET

// The one- and two-row kernels keep four chains a row (groups 0, 1, 2
// and 3 mod 4): with two, a block's sum waited on VPDPBUSD's latency,
// not its throughput. Integer sums, so the chains change no bit.
// A groups count of 2 mod 4 takes its first two groups alone.

// func rows16x1VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x1VNNI(SB), NOSPLIT, $0-88
	MOVQ packed+0(FP), SI
	MOVQ scale+8(FP), DI
	MOVQ blocks+16(FP), CX
	MOVQ groups+24(FP), DX
	MOVQ x+32(FP), R8
	MOVQ corr+48(FP), AX
	VPBROADCASTD 0(AX), Z28
	MOVQ t+56(FP), AX
	VBROADCASTSS 0(AX), Z12
	MOVQ approx+64(FP), R14
	MOVQ lanes+80(FP), AX
	VMOVUPS 0(AX), Z24

block1:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ BX, BX
	MOVQ DX, R12
	TESTQ $2, R12
	JZ   quad1
	VMOVDQU32 0(SI), Z16
	VMOVDQU32 64(SI), Z17
	VPDPBUSD.BCST (R8), Z16, Z0
	VPDPBUSD.BCST 4(R8), Z17, Z1
	ADDQ $128, SI
	MOVQ $8, BX
	SUBQ $2, R12
	JZ   sum1

quad1:
	VMOVDQU32 0(SI), Z16
	VMOVDQU32 64(SI), Z17
	VMOVDQU32 128(SI), Z18
	VMOVDQU32 192(SI), Z19
	VPDPBUSD.BCST (R8)(BX*1), Z16, Z0
	VPDPBUSD.BCST 4(R8)(BX*1), Z17, Z1
	VPDPBUSD.BCST 8(R8)(BX*1), Z18, Z2
	VPDPBUSD.BCST 12(R8)(BX*1), Z19, Z3
	ADDQ $256, SI
	ADDQ $16, BX
	SUBQ $4, R12
	JNZ  quad1

sum1:
	VMOVUPS (DI), Z8
	VPADDD  Z1, Z0, Z0
	VPADDD  Z3, Z2, Z2
	VPADDD  Z2, Z0, Z0
	VPSUBD  Z28, Z0, Z0
	VCVTDQ2PS Z0, Z0
	VMULPS  Z12, Z8, Z9
	VMULPS  Z9, Z0, Z0
	VMOVUPS Z0, (R14)
	VMAXPS  Z0, Z24, Z24
	ADDQ $64, DI
	ADDQ $64, R14
	DECQ CX
	JNZ  block1

	VMOVUPS Z24, 0(AX)
	VZEROUPPER
	RET

// func rows16x2VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x2VNNI(SB), NOSPLIT, $0-88
	MOVQ packed+0(FP), SI
	MOVQ scale+8(FP), DI
	MOVQ blocks+16(FP), CX
	MOVQ groups+24(FP), DX
	MOVQ x+32(FP), R8
	MOVQ xs+40(FP), BX
	LEAQ (R8)(BX*1), R9
	MOVQ corr+48(FP), AX
	VPBROADCASTD 0(AX), Z28
	VPBROADCASTD 4(AX), Z29
	MOVQ t+56(FP), AX
	VBROADCASTSS 0(AX), Z12
	VBROADCASTSS 4(AX), Z13
	MOVQ approx+64(FP), R14
	MOVQ os+72(FP), R15
	MOVQ lanes+80(FP), AX
	VMOVUPS 0(AX), Z24
	VMOVUPS 64(AX), Z25

block2:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ BX, BX
	MOVQ DX, R12
	TESTQ $2, R12
	JZ   quad2
	VMOVDQU32 0(SI), Z16
	VMOVDQU32 64(SI), Z17
	VPDPBUSD.BCST (R8), Z16, Z0
	VPDPBUSD.BCST (R9), Z16, Z4
	VPDPBUSD.BCST 4(R8), Z17, Z1
	VPDPBUSD.BCST 4(R9), Z17, Z5
	ADDQ $128, SI
	MOVQ $8, BX
	SUBQ $2, R12
	JZ   sum2

quad2:
	VMOVDQU32 0(SI), Z16
	VMOVDQU32 64(SI), Z17
	VMOVDQU32 128(SI), Z18
	VMOVDQU32 192(SI), Z19
	VPDPBUSD.BCST (R8)(BX*1), Z16, Z0
	VPDPBUSD.BCST (R9)(BX*1), Z16, Z4
	VPDPBUSD.BCST 4(R8)(BX*1), Z17, Z1
	VPDPBUSD.BCST 4(R9)(BX*1), Z17, Z5
	VPDPBUSD.BCST 8(R8)(BX*1), Z18, Z2
	VPDPBUSD.BCST 8(R9)(BX*1), Z18, Z6
	VPDPBUSD.BCST 12(R8)(BX*1), Z19, Z3
	VPDPBUSD.BCST 12(R9)(BX*1), Z19, Z7
	ADDQ $256, SI
	ADDQ $16, BX
	SUBQ $4, R12
	JNZ  quad2

sum2:
	VMOVUPS (DI), Z8
	VPADDD  Z1, Z0, Z0
	VPADDD  Z3, Z2, Z2
	VPADDD  Z2, Z0, Z0
	VPADDD  Z5, Z4, Z4
	VPADDD  Z7, Z6, Z6
	VPADDD  Z6, Z4, Z1
	VPSUBD  Z28, Z0, Z0
	VPSUBD  Z29, Z1, Z1
	VCVTDQ2PS Z0, Z0
	VCVTDQ2PS Z1, Z1
	VMULPS  Z12, Z8, Z9
	VMULPS  Z9, Z0, Z0
	VMULPS  Z13, Z8, Z9
	VMULPS  Z9, Z1, Z1
	VMOVUPS Z0, (R14)
	VMOVUPS Z1, (R14)(R15*1)
	VMAXPS  Z0, Z24, Z24
	VMAXPS  Z1, Z25, Z25
	ADDQ $64, DI
	ADDQ $64, R14
	DECQ CX
	JNZ  block2

	VMOVUPS Z24, 0(AX)
	VMOVUPS Z25, 64(AX)
	VZEROUPPER
	RET

// func rows16x3VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x3VNNI(SB), NOSPLIT, $0-88
	MOVQ packed+0(FP), SI
	MOVQ scale+8(FP), DI
	MOVQ blocks+16(FP), CX
	MOVQ groups+24(FP), DX
	MOVQ x+32(FP), R8
	MOVQ xs+40(FP), BX
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	MOVQ corr+48(FP), AX
	VPBROADCASTD 0(AX), Z28
	VPBROADCASTD 4(AX), Z29
	VPBROADCASTD 8(AX), Z30
	MOVQ t+56(FP), AX
	VBROADCASTSS 0(AX), Z12
	VBROADCASTSS 4(AX), Z13
	VBROADCASTSS 8(AX), Z14
	MOVQ approx+64(FP), R14
	MOVQ os+72(FP), R15
	MOVQ lanes+80(FP), AX
	VMOVUPS 0(AX), Z24
	VMOVUPS 64(AX), Z25
	VMOVUPS 128(AX), Z26

block3:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	XORQ BX, BX
	MOVQ DX, R12

group3:
	VMOVDQU32 0(SI), Z16
	VMOVDQU32 64(SI), Z17
	VPDPBUSD.BCST (R8)(BX*1), Z16, Z0
	VPDPBUSD.BCST (R9)(BX*1), Z16, Z1
	VPDPBUSD.BCST (R10)(BX*1), Z16, Z2
	VPDPBUSD.BCST 4(R8)(BX*1), Z17, Z4
	VPDPBUSD.BCST 4(R9)(BX*1), Z17, Z5
	VPDPBUSD.BCST 4(R10)(BX*1), Z17, Z6
	ADDQ $128, SI
	ADDQ $8, BX
	SUBQ $2, R12
	JNZ  group3

	VMOVUPS (DI), Z8
	VPADDD  Z4, Z0, Z0
	VPADDD  Z5, Z1, Z1
	VPADDD  Z6, Z2, Z2
	VPSUBD  Z28, Z0, Z0
	VPSUBD  Z29, Z1, Z1
	VPSUBD  Z30, Z2, Z2
	VCVTDQ2PS Z0, Z0
	VCVTDQ2PS Z1, Z1
	VCVTDQ2PS Z2, Z2
	VMULPS  Z12, Z8, Z9
	VMULPS  Z9, Z0, Z0
	VMULPS  Z13, Z8, Z9
	VMULPS  Z9, Z1, Z1
	VMULPS  Z14, Z8, Z9
	VMULPS  Z9, Z2, Z2
	VMOVUPS Z0, (R14)
	VMOVUPS Z1, (R14)(R15*1)
	VMOVUPS Z2, (R14)(R15*2)
	VMAXPS  Z0, Z24, Z24
	VMAXPS  Z1, Z25, Z25
	VMAXPS  Z2, Z26, Z26
	ADDQ $64, DI
	ADDQ $64, R14
	DECQ CX
	JNZ  block3

	VMOVUPS Z24, 0(AX)
	VMOVUPS Z25, 64(AX)
	VMOVUPS Z26, 128(AX)
	VZEROUPPER
	RET

// func rows16x5VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x5VNNI(SB), NOSPLIT, $0-80
	WIDE(W_EACH5)

// func rows16x6VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x6VNNI(SB), NOSPLIT, $0-80
	WIDE(W_EACH6)

// func rows16x7VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x7VNNI(SB), NOSPLIT, $0-80
	WIDE(W_EACH7)

// func rows16x8VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x8VNNI(SB), NOSPLIT, $0-80
	WIDE(W_EACH8)

// func aboveVNNI(x *float32, n int, floor float32, idx *int32, limit int) int
// The indices i < n (a multiple of 16) with x[i] ≥ floor, in order, at
// idx, and their count; −1 once more than limit would be written (idx
// has room for limit+16).
TEXT ·aboveVNNI(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS floor+16(FP), Z1
	MOVQ idx+24(FP), DI
	MOVQ limit+32(FP), R8
	XORQ DX, DX
	MOVL $0, AX
	VPBROADCASTD AX, Z2
	MOVL $16, AX
	VPBROADCASTD AX, Z3
	VPADDD ·iota16(SB), Z2, Z2

above:
	VMOVUPS (SI), Z0
	VCMPPS $13, Z1, Z0, K1
	KMOVW K1, AX
	TESTL AX, AX
	JZ   next
	VPCOMPRESSD Z2, K1, (DI)(DX*4)
	POPCNTL AX, AX
	ADDQ AX, DX
	CMPQ DX, R8
	JGT  over

next:
	VPADDD Z3, Z2, Z2
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ  above
	MOVQ DX, ret+40(FP)
	VZEROUPPER
	RET

over:
	MOVQ $-1, ret+40(FP)
	VZEROUPPER
	RET

DATA ·iota16+0(SB)/4, $0
DATA ·iota16+4(SB)/4, $1
DATA ·iota16+8(SB)/4, $2
DATA ·iota16+12(SB)/4, $3
DATA ·iota16+16(SB)/4, $4
DATA ·iota16+20(SB)/4, $5
DATA ·iota16+24(SB)/4, $6
DATA ·iota16+28(SB)/4, $7
DATA ·iota16+32(SB)/4, $8
DATA ·iota16+36(SB)/4, $9
DATA ·iota16+40(SB)/4, $10
DATA ·iota16+44(SB)/4, $11
DATA ·iota16+48(SB)/4, $12
DATA ·iota16+52(SB)/4, $13
DATA ·iota16+56(SB)/4, $14
DATA ·iota16+60(SB)/4, $15
GLOBL ·iota16(SB), RODATA|NOPTR, $64
