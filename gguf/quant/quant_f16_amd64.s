//go:build !purego

#include "textflag.h"

// f32ToF16 narrows n floats (a multiple of 8) at src to halves at dst
// with F16C's VCVTPS2PH, rounding to nearest even: FP32ToFP16's results,
// the branch-free method ggml falls back on, for every finite value and
// infinity. A NaN becomes FP32ToFP16's, a quiet NaN of the input's sign
// and no payload (0x7e00 or 0xfe00), not the instruction's, which keeps
// the payload's top bits: each NaN lane is replaced before the narrowing
// by the float NaN that narrows to it. Every instruction on a vector
// register is VEX-encoded (VMOVD, not MOVD): a legacy-SSE one after the
// first AVX one paid a state transition, about 120 ns a call
// (TestAMD64KernelsStayVEX).
//
// func f32ToF16(dst *byte, src *float32, n int)
TEXT ·f32ToF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   done
	MOVL $0x7fc00000, AX
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	MOVL $0x80000000, AX
	VMOVD AX, X6
	VPBROADCASTD X6, Y6

loop:
	VMOVUPS   (SI), Y0
	VCMPPS    $3, Y0, Y0, Y2 // unordered: the NaN lanes
	VANDPS    Y6, Y0, Y3
	VORPS     Y5, Y3, Y3     // a quiet NaN of the lane's sign, no payload
	VBLENDVPS Y2, Y3, Y0, Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU   X1, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	RET

// f16ToF32 widens n halves (a multiple of 8) at src to floats at dst,
// exactly (VCVTPH2PS).
//
// func f16ToF32(dst *float32, src *byte, n int)
TEXT ·f16ToF32(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   wdone

wloop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       wloop

wdone:
	VZEROUPPER
	RET
