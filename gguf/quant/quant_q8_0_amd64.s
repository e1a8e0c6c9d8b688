//go:build !purego

#include "textflag.h"

// Q8_0 quantiser (quantize_row_q8_0_ref), one 32-float block a round: the
// largest magnitude by an integer maximum of the sign-cleared bits (for
// finite floats the same order; Inf and NaN sort above every finite value,
// and such a block is left to the Go kernel, as is one whose amax is so
// small that 1/d overflows), d = amax/127 stored as fp16
// (VCVTPS2PH rounds to nearest even, as FP32ToFP16 does), id = 1/d or 0,
// and each x·id rounded to nearest with ties away from zero: truncate,
// then step one away from zero where the dropped fraction is at least ½
// (exact: |x·id| < 2^23).

// ROUND rounds the eight floats in V times Y7 (id) as roundf, to int32.
// Y15 holds 0x7fffffff, Y14 0.5, Y13 the sign bit, Y12 1.0.
#define ROUND(V) \
	VMULPS Y7, V, V \
	VROUNDPS $3, V, Y8 \
	VSUBPS Y8, V, Y9 \
	VANDPS Y15, Y9, Y9 \
	VCMPPS $0x1d, Y14, Y9, Y9 \
	VANDPS Y13, V, Y10 \
	VORPS Y12, Y10, Y10 \
	VANDPS Y9, Y10, Y10 \
	VADDPS Y10, Y8, V \
	VCVTTPS2DQ V, V

// interleave undoes the lane order of VPACKSSDW/VPACKSSWB.
DATA interleave<>+0(SB)/4, $0
DATA interleave<>+4(SB)/4, $4
DATA interleave<>+8(SB)/4, $1
DATA interleave<>+12(SB)/4, $5
DATA interleave<>+16(SB)/4, $2
DATA interleave<>+20(SB)/4, $6
DATA interleave<>+24(SB)/4, $3
DATA interleave<>+28(SB)/4, $7
GLOBL interleave<>(SB), RODATA|NOPTR, $32

// func q8_0Quant(x *float32, y *byte, blocks int) (done int)
TEXT ·q8_0Quant(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ blocks+16(FP), CX
	XORQ AX, AX
	TESTQ CX, CX
	JZ    out
	MOVL $0x7fffffff, R8
	VMOVD R8, X15
	VPBROADCASTD X15, Y15
	MOVL $0x3f000000, R8 // 0.5
	VMOVD R8, X14
	VPBROADCASTD X14, Y14
	MOVL $0x80000000, R8
	VMOVD R8, X13
	VPBROADCASTD X13, Y13
	MOVL $0x3f800000, R8 // 1.0
	VMOVD R8, X12
	VPBROADCASTD X12, Y12
	VMOVDQU interleave<>(SB), Y11
	MOVL $0x42fe0000, R8 // 127.0
	VMOVD R8, X6

loop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VPAND   Y15, Y0, Y4
	VPAND   Y15, Y1, Y5
	VPMAXSD Y5, Y4, Y4
	VPAND   Y15, Y2, Y5
	VPMAXSD Y5, Y4, Y4
	VPAND   Y15, Y3, Y5
	VPMAXSD Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $0x4e, X4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $0xb1, X4, X5
	VPMAXSD X5, X4, X4
	VMOVD   X4, R8
	CMPL    R8, $0x7f800000
	JAE     out // Inf or NaN

	VDIVSS X6, X4, X5 // d = amax/127
	VCVTPS2PH $0, X5, X7
	VMOVD X7, R8
	MOVW  R8, (DI)
	VXORPS X7, X7, X7
	VMOVD  X5, R8
	TESTL  R8, R8
	JZ     scaled
	VMOVSS X12, X7, X7 // 1.0 (low lane)
	VDIVSS X5, X7, X7  // id = 1/d
	VMOVD  X7, R8
	CMPL   R8, $0x7f800000
	JAE    out // id overflowed (amax below 127/FLT_MAX): the Go kernel's conversion of x·Inf

scaled:
	VBROADCASTSS X7, Y7
	ROUND(Y0)
	ROUND(Y1)
	ROUND(Y2)
	ROUND(Y3)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y11, Y0
	VMOVDQU   Y0, 2(DI)

	ADDQ $128, SI
	ADDQ $34, DI
	INCQ AX
	CMPQ AX, CX
	JLT  loop

out:
	MOVQ AX, done+24(FP)
	VZEROUPPER
	RET
