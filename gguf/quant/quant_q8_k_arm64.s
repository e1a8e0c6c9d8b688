//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Q8_K quantiser (quantize_row_q8_K_ref), one 256-float block a round:
//   - the largest magnitude by an integer maximum of the sign-cleared bits
//     (for finite floats the same order; Inf and NaN sort above every
//     finite value, and such a block is left to the Go kernel); a block of
//     zeros is cleared;
//   - max, the first element of that magnitude, with its sign;
//   - iscale = −127/max, d = 1/iscale, and each quant
//     min(127, nearestInt(iscale·x)) by the same float32 add of 1.5·2^23;
//   - bsums, the sums of each 16 quants (SADDLV).

// MAGS folds the magnitudes of the 4 vectors A..D (numbers) into V20, V21.
#define MAGS(A, B, C, D) \
	VAND  V31.B16, A.B16, A.B16 \
	VAND  V31.B16, B.B16, B.B16 \
	VAND  V31.B16, C.B16, C.B16 \
	VAND  V31.B16, D.B16, D.B16 \
	VUMAX A.S4, V20.S4, V20.S4 \
	VUMAX B.S4, V21.S4, V21.S4 \
	VUMAX C.S4, V20.S4, V20.S4 \
	VUMAX D.S4, V21.S4, V21.S4

// QUANT rounds the four floats in V (number N) as nearestInt, capped at
// 127: V26 iscale, V30 1.5·2^23, V29 0x7fffff, V28 0x400000, V27 127.
#define QUANT(V, N) \
	FMUL(N, N, 26) \
	FADD(N, N, 30) \
	VAND V29.B16, V.B16, V.B16 \
	VSUB V28.S4, V.S4, V.S4 \
	SMIN(N, N, 27)

// func q8KQuant(x *float32, y *byte, blocks int) (done int)
TEXT ·q8KQuant(SB), NOSPLIT, $0-32
	MOVD x+0(FP), R0
	MOVD y+8(FP), R1
	MOVD blocks+16(FP), R2
	MOVD $0, R3
	CBZ  R2, out
	MOVW $0x7fffffff, R4
	VDUP R4, V31.S4
	MOVW $0x4b400000, R4 // 12582912.0
	VDUP R4, V30.S4
	MOVW $0x007fffff, R4
	VDUP R4, V29.S4
	MOVW $0x00400000, R4
	VDUP R4, V28.S4
	MOVW $127, R4
	VDUP R4, V27.S4
	MOVW $0x7f800000, R6 // +Inf

loop:
	// The largest magnitude, as bits.
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	MOVD R0, R5
	MOVD $8, R7

amax:
	VLD1.P 64(R5), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P 64(R5), [V4.S4, V5.S4, V6.S4, V7.S4]
	MAGS(V0, V1, V2, V3)
	MAGS(V4, V5, V6, V7)
	SUBS $1, R7
	BNE  amax
	VUMAX V21.S4, V20.S4, V20.S4
	UMAXV(20, 20)
	VMOV  V20.S[0], R4
	CMPW  R6, R4
	BHS   out // Inf or NaN
	CBNZW R4, nonzero
	VEOR  V0.B16, V0.B16, V0.B16
	VEOR  V1.B16, V1.B16, V1.B16
	VEOR  V2.B16, V2.B16, V2.B16
	VEOR  V3.B16, V3.B16, V3.B16
	MOVD  R1, R5
	VST1.P [V0.B16, V1.B16, V2.B16, V3.B16], 64(R5)
	VST1.P [V0.B16, V1.B16, V2.B16, V3.B16], 64(R5)
	VST1.P [V0.B16, V1.B16, V2.B16, V3.B16], 64(R5)
	VST1.P [V0.B16, V1.B16, V2.B16, V3.B16], 64(R5)
	VST1.P [V0.B16, V1.B16], 32(R5)
	MOVW  ZR, (R5)
	B     next

nonzero:
	// max: the first element of that magnitude.
	VDUP R4, V20.S4
	MOVD R0, R5

find:
	VLD1.P 16(R5), [V0.S4]
	VAND   V31.B16, V0.B16, V0.B16
	VCMEQ  V20.S4, V0.S4, V0.S4
	VMOV   V0.D[0], R7
	VMOV   V0.D[1], R8
	ORR    R7, R8, R9
	CBZ    R9, find
	SUB    $16, R5
	CBNZ   R7, low
	ADD    $8, R5
	MOVD   R8, R7

low:
	TSTW R7, R7
	BNE  found
	ADD  $4, R5

found:
	FMOVS (R5), F1
	MOVW  $0xc2fe0000, R4 // -127.0
	FMOVS R4, F0
	FDIVS F1, F0, F0 // iscale = −127/max
	FMOVS $1.0, F2
	FDIVS F0, F2, F2 // d = 1/iscale
	FMOVS F2, (R1)
	VDUP  V0.S[0], V26.S4

	// Quants and bsums, 16 a round.
	MOVD R0, R5
	ADD  $4, R1, R8
	ADD  $260, R1, R9
	MOVD $16, R7

quants:
	VLD1.P 64(R5), [V0.S4, V1.S4, V2.S4, V3.S4]
	QUANT(V0, 0)
	QUANT(V1, 1)
	QUANT(V2, 2)
	QUANT(V3, 3)
	VUZP1  V1.H8, V0.H8, V0.H8 // int32 → int16 (the values fit)
	VUZP1  V3.H8, V2.H8, V2.H8
	VUZP1  V2.B16, V0.B16, V0.B16 // int16 → int8
	VST1.P [V0.B16], 16(R8)
	SADDLV(1, 0)
	VMOV   V1.H[0], R4
	MOVH.P R4, 2(R9)
	SUBS   $1, R7
	BNE    quants

next:
	ADD  $1024, R0
	ADD  $292, R1
	ADD  $1, R3
	CMP  R2, R3
	BLT  loop

out:
	MOVD R3, done+24(FP)
	RET
