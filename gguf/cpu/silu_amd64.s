//go:build !purego

#include "textflag.h"

// siluGLU8 (silu_amd64.go): dst[i] = silu(gate[i])·up[i] eight elements
// at a time, with expf's arithmetic exactly (exp.go): each of its fused
// multiply-adds is one VFMADD in float64 on operands widened from
// float32, rounded to float32 by VCVTPD2PS; its other operations are the
// same float32 operations. A chunk where expf would take another branch
// (n outside [-126, 127], or a NaN) stops the loop.
//
// Registers: DI dst, SI gate, DX up, CX chunks left, BX the constants,
// AX chunks done. Y15 holds the sign mask, Y14 the float32 shift 0x1.8p23.
// The float64 halves: lanes 0-3 and 4-7 of a float32 vector.

// The constants table (silu_amd64.go), float64 unless said: 0 log2e,
// 8 shift, 16 ln2hi, 24 ln2lo, 32 c5, 40 c4, 48 c3, 56 c2, 64 c1, 72 one;
// float32 at 80: shift, -126, 127, 1, then the sign mask.

// WIDEN(Y, X, LO, HI) widens the float32 vector Y (X its low half) to
// float64 halves LO and HI (LO may be Y). Clobbers X13.
#define WIDEN(Y, X, LO, HI) \
	VEXTRACTF128 $1, Y, X13 \
	VCVTPS2PD X, LO \
	VCVTPS2PD X13, HI

// ROUND rounds the float64 halves LO, HI to float32 and widens them
// again: the value of fma's float32 result. Clobbers X13.
#define ROUND(LO, HI) \
	VCVTPD2PSY LO, X13 \
	VCVTPS2PD X13, LO \
	VCVTPD2PSY HI, X13 \
	VCVTPS2PD X13, HI

// NARROW rounds the float64 halves LO, HI to the float32 vector Y.
// Clobbers X12, X13.
#define NARROW(LO, HI, Y) \
	VCVTPD2PSY LO, X13 \
	VCVTPD2PSY HI, X12 \
	VINSERTF128 $1, X12, Y13, Y

// FMA2(A, B, C) sets the halves A = A·B + C (B, C halves or constants
// broadcast from memory; the products are exact in float64).
#define FMA2(ALO, AHI, BLO, BHI, CLO, CHI) \
	VFMADD213PD CLO, BLO, ALO \
	VFMADD213PD CHI, BHI, AHI

// func siluGLU8(dst, gate, up *float32, chunks int, k *[16]float64) int
TEXT ·siluGLU8(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ chunks+24(FP), CX
	MOVQ k+32(FP), BX
	XORQ AX, AX
	VBROADCASTSS 96(BX), Y15
	VBROADCASTSS 80(BX), Y14
	TESTQ CX, CX
	JZ   done
loop:
	// a = -x, as float32 (Y0) and float64 halves (Y1, Y2).
	VMOVUPS (SI), Y11
	VXORPS Y15, Y11, Y0
	WIDEN(Y0, X0, Y1, Y2)
	// z = fma(a, log2e, shift); n = z - shift (Y3).
	VBROADCASTSD 0(BX), Y4
	VBROADCASTSD 8(BX), Y5
	VMOVAPD Y1, Y6
	VMOVAPD Y2, Y7
	FMA2(Y6, Y7, Y4, Y4, Y5, Y5)
	NARROW(Y6, Y7, Y3)
	VSUBPS Y14, Y3, Y3
	// Every lane in the ordinary branch: -126 <= n <= 127 (false for NaN).
	VBROADCASTSS 84(BX), Y4
	VCMPPS $0x1d, Y4, Y3, Y5 // n >= -126, ordered
	VBROADCASTSS 88(BX), Y4
	VCMPPS $0x12, Y4, Y3, Y6 // n <= 127, ordered
	VANDPS Y6, Y5, Y5
	VMOVMSKPS Y5, R8
	CMPQ R8, $0xff
	JNE  done
	// -n as float64 halves (Y4, Y5).
	VXORPS Y15, Y3, Y4
	WIDEN(Y4, X4, Y4, Y5)
	// b = fma(-n, ln2lo, fma(-n, ln2hi, a)) (Y6, Y7 halves; Y0 float32).
	VMOVAPD Y4, Y6
	VMOVAPD Y5, Y7
	VBROADCASTSD 16(BX), Y8
	FMA2(Y6, Y7, Y8, Y8, Y1, Y2)
	ROUND(Y6, Y7)
	VBROADCASTSD 24(BX), Y8
	FMA2(Y4, Y5, Y8, Y8, Y6, Y7)
	NARROW(Y4, Y5, Y0)
	WIDEN(Y0, X0, Y1, Y2)
	// u = b·b in float32, widened (Y4, Y5).
	VMULPS Y0, Y0, Y4
	WIDEN(Y4, X4, Y4, Y5)
	// p1 = fma(c5, b, c4) (Y6, Y7).
	VBROADCASTSD 32(BX), Y6
	VMOVAPD Y6, Y7
	VBROADCASTSD 40(BX), Y8
	FMA2(Y6, Y7, Y1, Y2, Y8, Y8)
	ROUND(Y6, Y7)
	// p2 = fma(c3, b, c2) (Y8, Y9).
	VBROADCASTSD 48(BX), Y8
	VMOVAPD Y8, Y9
	VBROADCASTSD 56(BX), Y10
	FMA2(Y8, Y9, Y1, Y2, Y10, Y10)
	ROUND(Y8, Y9)
	// q = fma(p1, u, p2) (Y6, Y7).
	FMA2(Y6, Y7, Y4, Y5, Y8, Y9)
	ROUND(Y6, Y7)
	// p3 = fma(c1, b, 1) (Y8, Y9).
	VBROADCASTSD 64(BX), Y8
	VMOVAPD Y8, Y9
	VBROADCASTSD 72(BX), Y10
	FMA2(Y8, Y9, Y1, Y2, Y10, Y10)
	ROUND(Y8, Y9)
	// j = fma(q, u, p3), as float32 (Y0).
	FMA2(Y6, Y7, Y4, Y5, Y8, Y9)
	NARROW(Y6, Y7, Y0)
	// e = j·2^n; silu = x / (1 + e); times up.
	VCVTTPS2DQ Y3, Y3
	VPCMPEQD Y4, Y4, Y4
	VPSRLD $25, Y4, Y4 // 127
	VPADDD Y4, Y3, Y3
	VPSLLD $23, Y3, Y3
	VMULPS Y3, Y0, Y0
	VBROADCASTSS 92(BX), Y4
	VADDPS Y0, Y4, Y0
	VDIVPS Y0, Y11, Y11
	VMULPS (DX), Y11, Y11
	VMOVUPS Y11, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	INCQ AX
	DECQ CX
	JNZ  loop
done:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// expSub8 (silu_amd64.go): dst[i] = expf(src[i] − m) eight elements at a
// time, the subtraction in float32 and expf's arithmetic exactly, as
// siluGLU8 computes expf(−x); a chunk where expf would take another
// branch stops the loop. dst may be src.
//
// Registers: DI dst, SI src, CX chunks left, BX the constants, AX chunks
// done, Y11 m. Y15 holds the sign mask, Y14 the float32 shift 0x1.8p23.

// func expSub8(dst, src *float32, chunks int, m float32, k *[16]float64) int
TEXT ·expSub8(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ chunks+16(FP), CX
	VBROADCASTSS m+24(FP), Y11
	MOVQ k+32(FP), BX
	XORQ AX, AX
	VBROADCASTSS 96(BX), Y15
	VBROADCASTSS 80(BX), Y14
	TESTQ CX, CX
	JZ   edone
eloop:
	// a = src − m, as float32 (Y0) and float64 halves (Y1, Y2).
	VMOVUPS (SI), Y0
	VSUBPS Y11, Y0, Y0
	WIDEN(Y0, X0, Y1, Y2)
	// z = fma(a, log2e, shift); n = z - shift (Y3).
	VBROADCASTSD 0(BX), Y4
	VBROADCASTSD 8(BX), Y5
	VMOVAPD Y1, Y6
	VMOVAPD Y2, Y7
	FMA2(Y6, Y7, Y4, Y4, Y5, Y5)
	NARROW(Y6, Y7, Y3)
	VSUBPS Y14, Y3, Y3
	// Every lane in the ordinary branch: -126 <= n <= 127 (false for NaN).
	VBROADCASTSS 84(BX), Y4
	VCMPPS $0x1d, Y4, Y3, Y5 // n >= -126, ordered
	VBROADCASTSS 88(BX), Y4
	VCMPPS $0x12, Y4, Y3, Y6 // n <= 127, ordered
	VANDPS Y6, Y5, Y5
	VMOVMSKPS Y5, R8
	CMPQ R8, $0xff
	JNE  edone
	// -n as float64 halves (Y4, Y5).
	VXORPS Y15, Y3, Y4
	WIDEN(Y4, X4, Y4, Y5)
	// b = fma(-n, ln2lo, fma(-n, ln2hi, a)) (Y6, Y7 halves; Y0 float32).
	VMOVAPD Y4, Y6
	VMOVAPD Y5, Y7
	VBROADCASTSD 16(BX), Y8
	FMA2(Y6, Y7, Y8, Y8, Y1, Y2)
	ROUND(Y6, Y7)
	VBROADCASTSD 24(BX), Y8
	FMA2(Y4, Y5, Y8, Y8, Y6, Y7)
	NARROW(Y4, Y5, Y0)
	WIDEN(Y0, X0, Y1, Y2)
	// u = b·b in float32, widened (Y4, Y5).
	VMULPS Y0, Y0, Y4
	WIDEN(Y4, X4, Y4, Y5)
	// p1 = fma(c5, b, c4) (Y6, Y7).
	VBROADCASTSD 32(BX), Y6
	VMOVAPD Y6, Y7
	VBROADCASTSD 40(BX), Y8
	FMA2(Y6, Y7, Y1, Y2, Y8, Y8)
	ROUND(Y6, Y7)
	// p2 = fma(c3, b, c2) (Y8, Y9).
	VBROADCASTSD 48(BX), Y8
	VMOVAPD Y8, Y9
	VBROADCASTSD 56(BX), Y10
	FMA2(Y8, Y9, Y1, Y2, Y10, Y10)
	ROUND(Y8, Y9)
	// q = fma(p1, u, p2) (Y6, Y7).
	FMA2(Y6, Y7, Y4, Y5, Y8, Y9)
	ROUND(Y6, Y7)
	// p3 = fma(c1, b, 1) (Y8, Y9).
	VBROADCASTSD 64(BX), Y8
	VMOVAPD Y8, Y9
	VBROADCASTSD 72(BX), Y10
	FMA2(Y8, Y9, Y1, Y2, Y10, Y10)
	ROUND(Y8, Y9)
	// j = fma(q, u, p3), as float32 (Y0).
	FMA2(Y6, Y7, Y4, Y5, Y8, Y9)
	NARROW(Y6, Y7, Y0)
	// e = j·2^n.
	VCVTTPS2DQ Y3, Y3
	VPCMPEQD Y4, Y4, Y4
	VPSRLD $25, Y4, Y4 // 127
	VPADDD Y4, Y3, Y3
	VPSLLD $23, Y3, Y3
	VMULPS Y3, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	INCQ AX
	DECQ CX
	JNZ  eloop
edone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
