//go:build amd64 && !purego

#include "textflag.h"

// The shadow's kernels (kernel.go's rows16Go is their arithmetic): a
// block is sixteen weight rows, each group of 64 bytes four quants+128
// of each row (row l in bytes 4l..4l+3). VPDPBUSD takes the group as
// unsigned bytes from a register and an activation's four signed quants
// by embedded broadcast from memory, so a group is loaded once for every
// activation row and row l's sum lands in lane l. Each activation row
// keeps two or four chains of sums (below), joined at the end of a
// block; then sum − corr, to float32, times scale·t, stored, and the
// lanes' running maxima kept. groups is n/4, even.

// The one- to four-row kernels read activation row i at Ri (R8-R11, xs
// apart; BX the group offset) and keep its correction and t broadcast in
// registers. N_ROWi(M) applies M to row i's operands: its pointer, its
// byte offset in corr and t, its four chains (P_ROWi: two, named twice),
// its correction and t registers, its approximations' address, its lanes
// register and its byte offset in lanes. One and
// two rows keep four chains a row (groups 0-3 mod 4: with two, a block's
// sum waited on VPDPBUSD's latency, not its throughput; a groups count of
// 2 mod 4 takes its first two groups alone); three and four keep two
// (even and odd groups), the four-row kernel's. Integer sums: the chains
// change no bit. Z8 holds the block's scales, Z9 a row's scale·t.
#define N_ROW0(M) M(R8, 0, Z0, Z1, Z2, Z3, Z28, Z12, (R14), Z24, 0)
#define N_ROW1(M) M(R9, 4, Z4, Z5, Z6, Z7, Z29, Z13, (R14)(R15*1), Z25, 64)
// Three and four rows: chains Zi (even groups) and Z(4+i) (odd).
#define P_ROW0(M) M(R8, 0, Z0, Z4, Z0, Z4, Z28, Z12, (R14), Z24, 0)
#define P_ROW1(M) M(R9, 4, Z1, Z5, Z1, Z5, Z29, Z13, (R14)(R15*1), Z25, 64)
#define P_ROW2(M) M(R10, 8, Z2, Z6, Z2, Z6, Z30, Z14, (R14)(R15*2), Z26, 128)
#define P_ROW3(M) M(R11, 12, Z3, Z7, Z3, Z7, Z31, Z15, (R14)(R13*1), Z27, 192)

#define N_EACH1(M) N_ROW0(M)

#define N_EACH2(M) \
	N_ROW0(M) \
	N_ROW1(M)

#define P_EACH3(M) \
	P_ROW0(M) \
	P_ROW1(M) \
	P_ROW2(M)

#define P_EACH4(M) \
	P_EACH3(M) \
	P_ROW3(M)

#define N_CORR(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) VPBROADCASTD O(AX), C

#define N_T(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) VBROADCASTSS O(AX), T

#define N_LANES(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) VMOVUPS LO(AX), L

#define N_STORE(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) VMOVUPS L, LO(AX)

#define N_ZERO2(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	VPXORD A0, A0, A0 \
	VPXORD A1, A1, A1

#define N_ZERO4(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	N_ZERO2(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	VPXORD A2, A2, A2 \
	VPXORD A3, A3, A3

// N_TWO: two groups (Z16, Z17), a chain each; N_FOUR: four (Z16-Z19).
#define N_TWO(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	VPDPBUSD.BCST (X)(BX*1), Z16, A0 \
	VPDPBUSD.BCST 4(X)(BX*1), Z17, A1

#define N_FOUR(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	N_TWO(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	VPDPBUSD.BCST 8(X)(BX*1), Z18, A2 \
	VPDPBUSD.BCST 12(X)(BX*1), Z19, A3

#define N_SUM2(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) VPADDD A1, A0, A0

#define N_SUM4(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	VPADDD A1, A0, A0 \
	VPADDD A3, A2, A2 \
	VPADDD A2, A0, A0

// N_FOLD: the row's sum (A0), less the correction, to float32, times
// scale·t, stored and kept in the lanes' maxima.
#define N_FOLD(X, O, A0, A1, A2, A3, C, T, OUT, L, LO) \
	VPSUBD  C, A0, A0 \
	VCVTDQ2PS A0, A0 \
	VMULPS  T, Z8, Z9 \
	VMULPS  Z9, A0, A0 \
	VMOVUPS A0, OUT \
	VMAXPS  A0, L, L

#define N_ENTRY(EACH) \
	MOVQ packed+0(FP), SI \
	MOVQ scale+8(FP), DI \
	MOVQ blocks+16(FP), CX \
	MOVQ groups+24(FP), DX \
	MOVQ x+32(FP), R8 \
	MOVQ xs+40(FP), BX \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	LEAQ (R10)(BX*1), R11 \
	MOVQ corr+48(FP), AX \
	EACH(N_CORR) \
	MOVQ t+56(FP), AX \
	EACH(N_T) \
	MOVQ approx+64(FP), R14 \
	MOVQ os+72(FP), R15 \
	LEAQ (R15)(R15*2), R13 \
	MOVQ lanes+80(FP), AX \
	EACH(N_LANES)

// QUAD: one or two rows, four chains a row.
#define QUAD(EACH) \
	N_ENTRY(EACH) \
qblock: \
	EACH(N_ZERO4) \
	XORQ BX, BX \
	MOVQ DX, R12 \
	TESTQ $2, R12 \
	JZ   qfour \
	VMOVDQU32 0(SI), Z16 \
	VMOVDQU32 64(SI), Z17 \
	EACH(N_TWO) \
	ADDQ $128, SI \
	MOVQ $8, BX \
	SUBQ $2, R12 \
	JZ   qsum \
qfour: \
	VMOVDQU32 0(SI), Z16 \
	VMOVDQU32 64(SI), Z17 \
	VMOVDQU32 128(SI), Z18 \
	VMOVDQU32 192(SI), Z19 \
	EACH(N_FOUR) \
	ADDQ $256, SI \
	ADDQ $16, BX \
	SUBQ $4, R12 \
	JNZ  qfour \
qsum: \
	VMOVUPS (DI), Z8 \
	EACH(N_SUM4) \
	EACH(N_FOLD) \
	ADDQ $64, DI \
	ADDQ $64, R14 \
	DECQ CX \
	JNZ  qblock \
	EACH(N_STORE) \
	VZEROUPPER \
	RET

// PAIR: three or four rows, two chains a row.
#define PAIR(EACH) \
	N_ENTRY(EACH) \
pblock: \
	EACH(N_ZERO2) \
	XORQ BX, BX \
	MOVQ DX, R12 \
pgroup: \
	VMOVDQU32 0(SI), Z16 \
	VMOVDQU32 64(SI), Z17 \
	EACH(N_TWO) \
	ADDQ $128, SI \
	ADDQ $8, BX \
	SUBQ $2, R12 \
	JNZ  pgroup \
	VMOVUPS (DI), Z8 \
	EACH(N_SUM2) \
	EACH(N_FOLD) \
	ADDQ $64, DI \
	ADDQ $64, R14 \
	DECQ CX \
	JNZ  pblock \
	EACH(N_STORE) \
	VZEROUPPER \
	RET

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

// func rows16x1VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x1VNNI(SB), NOSPLIT, $0-88
	QUAD(N_EACH1)

// func rows16x2VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x2VNNI(SB), NOSPLIT, $0-88
	QUAD(N_EACH2)

// func rows16x3VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x3VNNI(SB), NOSPLIT, $0-88
	PAIR(P_EACH3)

// func rows16x4VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)
TEXT ·rows16x4VNNI(SB), NOSPLIT, $0-88
	PAIR(P_EACH4)

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
