//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Q8_K quantiser (quantize_row_q8_K_ref), one 256-float block a round:
//   - the largest magnitude by an integer maximum of the sign-cleared bits
//     (for finite floats the same order; Inf and NaN sort above every
//     finite value, and such a block is left to the Go kernel); a block of
//     zeros is cleared;
//   - max, the first element of that magnitude, with its sign;
//   - iscale = −127/max, d = 1/iscale, and each quant
//     min(127, nearestInt(iscale·x)) by the same float32 add of 1.5·2^23;
//   - bsums, the sums of each 16 quants, from the int32 quants through a
//     stack buffer and HSUM8.

// QUANTS rounds the eight floats at OFF(SI)(R8*1) as nearestInt, capped at
// 127, into V: Y10 iscale, Y14 1.5·2^23, Y13 0x7fffff, Y12 0x400000,
// Y11 127.
#define QUANTS(OFF, V) \
	VMULPS OFF(SI)(R8*1), Y10, V \
	VADDPS Y14, V, V \
	VPAND Y13, V, V \
	VPSUBD Y12, V, V \
	VPMINSD Y11, V, V

// BCASTD fills the int32 lanes of Y with the 32-bit constant C.
#define BCASTD(C, X, Y) \
	MOVL $C, R9 \
	VMOVD R9, X \
	VPBROADCASTD X, Y

DATA interleave<>+0(SB)/4, $0
DATA interleave<>+4(SB)/4, $4
DATA interleave<>+8(SB)/4, $1
DATA interleave<>+12(SB)/4, $5
DATA interleave<>+16(SB)/4, $2
DATA interleave<>+20(SB)/4, $6
DATA interleave<>+24(SB)/4, $3
DATA interleave<>+28(SB)/4, $7
GLOBL interleave<>(SB), RODATA|NOPTR, $32

// func q8KQuant(x *float32, y *byte, blocks int) (done int)
TEXT ·q8KQuant(SB), 0, $512-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ blocks+16(FP), CX
	XORQ AX, AX
	TESTQ CX, CX
	JZ    out
	LEAQ  sums-512(SP), BX // the 16 groups' int32 partial sums
	BCASTD(0x7fffffff, X15, Y15)
	BCASTD(0x4b400000, X14, Y14) // 12582912.0
	BCASTD(0x007fffff, X13, Y13)
	BCASTD(0x00400000, X12, Y12)
	BCASTD(127, X11, Y11)
	VMOVDQU interleave<>(SB), Y9

loop:
	// The largest magnitude, as bits.
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	XORQ  R8, R8

amax:
	VPAND   0(SI)(R8*1), Y15, Y0
	VPAND   32(SI)(R8*1), Y15, Y1
	VPAND   64(SI)(R8*1), Y15, Y2
	VPAND   96(SI)(R8*1), Y15, Y3
	VPMAXSD Y0, Y4, Y4
	VPMAXSD Y1, Y5, Y5
	VPMAXSD Y2, Y4, Y4
	VPMAXSD Y3, Y5, Y5
	ADDQ    $128, R8
	CMPQ    R8, $1024
	JLT     amax
	VPMAXSD Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $0x4e, X4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $0xb1, X4, X5
	VPMAXSD X5, X4, X4 // in every lane
	VMOVD   X4, R10
	CMPL    R10, $0x7f800000
	JAE     out // Inf or NaN
	TESTL   R10, R10
	JNZ     nonzero
	VPXOR   Y0, Y0, Y0
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, 256(DI)
	MOVL    $0, 288(DI)
	JMP     next

nonzero:
	// max: the first element of that magnitude.
	VINSERTI128 $1, X4, Y4, Y4
	XORQ R8, R8

find:
	VPAND     (SI)(R8*1), Y15, Y0
	VPCMPEQD  Y4, Y0, Y0
	VMOVMSKPS Y0, R10
	ADDQ      $32, R8
	TESTL     R10, R10
	JZ        find
	BSFL      R10, R10
	LEAQ      -32(R8)(R10*4), R8
	VMOVSS    (SI)(R8*1), X1
	MOVL      $0xc2fe0000, R9 // -127.0
	VMOVD     R9, X0
	VDIVSS    X1, X0, X0 // iscale = −127/max
	MOVL      $0x3f800000, R9 // 1.0
	VMOVD     R9, X1
	VDIVSS    X0, X1, X1 // d = 1/iscale
	VMOVSS    X1, (DI)
	VBROADCASTSS X0, Y10

	// Quants, 32 a round, and each 16's int32 partial sums.
	XORQ R8, R8
	XORQ R10, R10

quants:
	QUANTS(0, Y0)
	QUANTS(32, Y1)
	QUANTS(64, Y2)
	QUANTS(96, Y3)
	VPADDD     Y1, Y0, Y4
	VPADDD     Y3, Y2, Y5
	VMOVDQU    Y4, 0(BX)(R10*2)
	VMOVDQU    Y5, 32(BX)(R10*2)
	VPACKSSDW  Y1, Y0, Y0
	VPACKSSDW  Y3, Y2, Y2
	VPACKSSWB  Y2, Y0, Y0
	VPERMD     Y0, Y9, Y0
	VMOVDQU    Y0, 4(DI)(R10*1)
	ADDQ       $128, R8
	ADDQ       $32, R10
	CMPQ       R10, $256
	JLT        quants

	// bsums: HSUM8 over groups 0-7, then 8-15, packed to int16.
	VMOVDQU 0(BX), Y1
	VMOVDQU 32(BX), Y2
	VMOVDQU 64(BX), Y3
	VMOVDQU 96(BX), Y4
	VMOVDQU 128(BX), Y5
	VMOVDQU 160(BX), Y6
	VMOVDQU 192(BX), Y7
	VMOVDQU 224(BX), Y8
	HSUM8(Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y0)
	VMOVDQU Y1, 0(BX)
	VMOVDQU 256(BX), Y1
	VMOVDQU 288(BX), Y2
	VMOVDQU 320(BX), Y3
	VMOVDQU 352(BX), Y4
	VMOVDQU 384(BX), Y5
	VMOVDQU 416(BX), Y6
	VMOVDQU 448(BX), Y7
	VMOVDQU 480(BX), Y8
	HSUM8(Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y0)
	VMOVDQU   0(BX), Y0
	VPACKSSDW Y1, Y0, Y0
	VPERMQ    $0xd8, Y0, Y0
	VMOVDQU   Y0, 260(DI)

next:
	ADDQ $1024, SI
	ADDQ $292, DI
	INCQ AX
	CMPQ AX, CX
	JLT  loop

out:
	MOVQ AX, done+24(FP)
	VZEROUPPER
	RET
