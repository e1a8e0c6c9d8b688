//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q8_0 quantiser (quantize_row_q8_0_ref), one 32-float block a round: the
// largest magnitude by an integer maximum of the sign-cleared bits (for
// finite floats the same order; Inf and NaN sort above every finite value,
// and such a block is left to the Go kernel), d = amax/127 stored as fp16
// (FCVT rounds to nearest even, as FP32ToFP16 does), id = 1/d or 0, and
// each x·id rounded to nearest with ties away from zero: FCVTAS is
// exactly C's roundf to an integer.

// func q8_0Quant(x *float32, y *byte, blocks int) (done int)
TEXT ·q8_0Quant(SB), NOSPLIT, $0-32
	MOVD x+0(FP), R0
	MOVD y+8(FP), R1
	MOVD blocks+16(FP), R2
	MOVD $0, R3
	CBZ  R2, out
	MOVW $0x7fffffff, R4
	VDUP R4, V31.S4
	MOVW $0x42fe0000, R4 // 127.0
	FMOVS R4, F30
	FMOVS $1.0, F29
	MOVW $0x7f800000, R6 // +Inf

loop:
	VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]
	VAND  V31.B16, V0.B16, V16.B16
	VAND  V31.B16, V1.B16, V17.B16
	VAND  V31.B16, V2.B16, V18.B16
	VAND  V31.B16, V3.B16, V19.B16
	VAND  V31.B16, V4.B16, V20.B16
	VAND  V31.B16, V5.B16, V21.B16
	VAND  V31.B16, V6.B16, V22.B16
	VAND  V31.B16, V7.B16, V23.B16
	VUMAX V17.S4, V16.S4, V16.S4
	VUMAX V19.S4, V18.S4, V18.S4
	VUMAX V21.S4, V20.S4, V20.S4
	VUMAX V23.S4, V22.S4, V22.S4
	VUMAX V18.S4, V16.S4, V16.S4
	VUMAX V22.S4, V20.S4, V20.S4
	VUMAX V20.S4, V16.S4, V16.S4
	UMAXV(16, 16)
	VMOV  V16.S[0], R4
	CMPW  R6, R4
	BHS   out // Inf or NaN

	FMOVS  R4, F16
	FDIVS  F30, F16, F17 // d = amax/127
	FCVTSH F17, F18
	FMOVS  F18, R5
	MOVH   R5, (R1)
	VEOR   V19.B16, V19.B16, V19.B16
	FMOVS  F17, R5
	CBZW   R5, scaled
	FDIVS  F17, F29, F19 // id = 1/d

scaled:
	FMULE(0, 0, 19)
	FMULE(1, 1, 19)
	FMULE(2, 2, 19)
	FMULE(3, 3, 19)
	FMULE(4, 4, 19)
	FMULE(5, 5, 19)
	FMULE(6, 6, 19)
	FMULE(7, 7, 19)
	FCVTAS(0, 0)
	FCVTAS(1, 1)
	FCVTAS(2, 2)
	FCVTAS(3, 3)
	FCVTAS(4, 4)
	FCVTAS(5, 5)
	FCVTAS(6, 6)
	FCVTAS(7, 7)
	VUZP1 V1.H8, V0.H8, V0.H8 // int32 → int16 (the values fit)
	VUZP1 V3.H8, V2.H8, V2.H8
	VUZP1 V5.H8, V4.H8, V4.H8
	VUZP1 V7.H8, V6.H8, V6.H8
	VUZP1 V2.B16, V0.B16, V0.B16 // int16 → int8
	VUZP1 V6.B16, V4.B16, V1.B16
	ADD   $2, R1, R5
	VST1  [V0.B16, V1.B16], (R5)

	ADD  $34, R1
	ADD  $1, R3
	CMP  R2, R3
	BLT  loop

out:
	MOVD R3, done+24(FP)
	RET
