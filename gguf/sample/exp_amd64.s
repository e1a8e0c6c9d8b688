//go:build !purego

#include "textflag.h"

// expCands4 is exp (exp.go: math.Exp's amd64 FMA path, Shibata's method
// from SLEEF) on four lanes at once, with AVX2: the reduction by k·ln2 in
// two fused steps, the Taylor series of e^(r/16) as fused multiply-adds,
// four squarings through (x+2)·x, and the scaling by 2^k — each operation
// IEEE-rounded as the scalar path rounds it, so each lane is exp's result
// to the bit. It sets dst[i].v = e^((src[i].v − top)/t) for whole chunks
// of four candidates (16 bytes each, v at offset 8; dst may be src) until
// a chunk holding an x outside [−708, 709] or a NaN, where the scalar
// path's special cases (overflow, subnormal results, non-finite x) begin;
// it returns the candidates it did.
//
// expw holds each constant four times, for the 256-bit operands: log2e,
// ln2's two parts, 1/16, the series' coefficients, 0.5, 1, 2, the domain's
// bounds and the exponent's bias (as int64).

DATA expw<>+0(SB)/8, $1.4426950408889634073599246810018920
DATA expw<>+8(SB)/8, $1.4426950408889634073599246810018920
DATA expw<>+16(SB)/8, $1.4426950408889634073599246810018920
DATA expw<>+24(SB)/8, $1.4426950408889634073599246810018920
DATA expw<>+32(SB)/8, $0.69314718055966295651160180568695068359375
DATA expw<>+40(SB)/8, $0.69314718055966295651160180568695068359375
DATA expw<>+48(SB)/8, $0.69314718055966295651160180568695068359375
DATA expw<>+56(SB)/8, $0.69314718055966295651160180568695068359375
DATA expw<>+64(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expw<>+72(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expw<>+80(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expw<>+88(SB)/8, $0.28235290563031577122588448175013436025525412068e-12
DATA expw<>+96(SB)/8, $0.0625
DATA expw<>+104(SB)/8, $0.0625
DATA expw<>+112(SB)/8, $0.0625
DATA expw<>+120(SB)/8, $0.0625
DATA expw<>+128(SB)/8, $2.4801587301587301587e-5
DATA expw<>+136(SB)/8, $2.4801587301587301587e-5
DATA expw<>+144(SB)/8, $2.4801587301587301587e-5
DATA expw<>+152(SB)/8, $2.4801587301587301587e-5
DATA expw<>+160(SB)/8, $1.9841269841269841270e-4
DATA expw<>+168(SB)/8, $1.9841269841269841270e-4
DATA expw<>+176(SB)/8, $1.9841269841269841270e-4
DATA expw<>+184(SB)/8, $1.9841269841269841270e-4
DATA expw<>+192(SB)/8, $1.3888888888888888889e-3
DATA expw<>+200(SB)/8, $1.3888888888888888889e-3
DATA expw<>+208(SB)/8, $1.3888888888888888889e-3
DATA expw<>+216(SB)/8, $1.3888888888888888889e-3
DATA expw<>+224(SB)/8, $8.3333333333333333333e-3
DATA expw<>+232(SB)/8, $8.3333333333333333333e-3
DATA expw<>+240(SB)/8, $8.3333333333333333333e-3
DATA expw<>+248(SB)/8, $8.3333333333333333333e-3
DATA expw<>+256(SB)/8, $4.1666666666666666667e-2
DATA expw<>+264(SB)/8, $4.1666666666666666667e-2
DATA expw<>+272(SB)/8, $4.1666666666666666667e-2
DATA expw<>+280(SB)/8, $4.1666666666666666667e-2
DATA expw<>+288(SB)/8, $1.6666666666666666667e-1
DATA expw<>+296(SB)/8, $1.6666666666666666667e-1
DATA expw<>+304(SB)/8, $1.6666666666666666667e-1
DATA expw<>+312(SB)/8, $1.6666666666666666667e-1
DATA expw<>+320(SB)/8, $0.5
DATA expw<>+328(SB)/8, $0.5
DATA expw<>+336(SB)/8, $0.5
DATA expw<>+344(SB)/8, $0.5
DATA expw<>+352(SB)/8, $1.0
DATA expw<>+360(SB)/8, $1.0
DATA expw<>+368(SB)/8, $1.0
DATA expw<>+376(SB)/8, $1.0
DATA expw<>+384(SB)/8, $2.0
DATA expw<>+392(SB)/8, $2.0
DATA expw<>+400(SB)/8, $2.0
DATA expw<>+408(SB)/8, $2.0
DATA expw<>+416(SB)/8, $-708.0
DATA expw<>+424(SB)/8, $-708.0
DATA expw<>+432(SB)/8, $-708.0
DATA expw<>+440(SB)/8, $-708.0
DATA expw<>+448(SB)/8, $709.0
DATA expw<>+456(SB)/8, $709.0
DATA expw<>+464(SB)/8, $709.0
DATA expw<>+472(SB)/8, $709.0
DATA expw<>+480(SB)/8, $1023
DATA expw<>+488(SB)/8, $1023
DATA expw<>+496(SB)/8, $1023
DATA expw<>+504(SB)/8, $1023
GLOBL expw<>(SB), RODATA, $512

// func expCands4(dst, src *candidate, n int, top, t float64) int
TEXT ·expCands4(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $2, CX
	XORQ AX, AX
	VBROADCASTSD top+24(FP), Y10
	VBROADCASTSD t+32(FP), Y11
	VMOVUPD expw<>+0(SB), Y7
	VMOVUPD expw<>+32(SB), Y8
	VMOVUPD expw<>+64(SB), Y9
	VMOVUPD expw<>+416(SB), Y12
	VMOVUPD expw<>+448(SB), Y13
	VMOVUPD expw<>+384(SB), Y14
	VMOVUPD expw<>+480(SB), Y15
	TESTQ CX, CX
	JZ done
loop:
	VMOVSD 8(SI), X0
	VMOVHPD 24(SI), X0, X0
	VMOVSD 40(SI), X1
	VMOVHPD 56(SI), X1, X1
	VINSERTF128 $1, X1, Y0, Y0
	VSUBPD Y10, Y0, Y0
	VDIVPD Y11, Y0, Y0
	// lo ≤ x ≤ hi in every lane (false for a NaN), or stop here.
	VCMPPD $0x1d, Y12, Y0, Y5
	VCMPPD $0x12, Y13, Y0, Y6
	VANDPD Y5, Y6, Y5
	VMOVMSKPD Y5, DX
	CMPQ DX, $15
	JNE done
	VMULPD Y7, Y0, Y1
	VCVTPD2DQY Y1, X2
	VCVTDQ2PD X2, Y1
	VFNMADD231PD Y8, Y1, Y0
	VFNMADD231PD Y9, Y1, Y0
	VMULPD expw<>+96(SB), Y0, Y0
	VMOVUPD expw<>+128(SB), Y3
	VFMADD213PD expw<>+160(SB), Y0, Y3
	VFMADD213PD expw<>+192(SB), Y0, Y3
	VFMADD213PD expw<>+224(SB), Y0, Y3
	VFMADD213PD expw<>+256(SB), Y0, Y3
	VFMADD213PD expw<>+288(SB), Y0, Y3
	VFMADD213PD expw<>+320(SB), Y0, Y3
	VFMADD213PD expw<>+352(SB), Y0, Y3
	VMULPD Y3, Y0, Y0
	VADDPD Y14, Y0, Y3
	VMULPD Y3, Y0, Y0
	VADDPD Y14, Y0, Y3
	VMULPD Y3, Y0, Y0
	VADDPD Y14, Y0, Y3
	VMULPD Y3, Y0, Y0
	VADDPD Y14, Y0, Y3
	VFMADD213PD expw<>+352(SB), Y3, Y0
	// times 2^k: k + 1023 in the exponent field (1 ≤ k + 1023 ≤ 2046 here).
	VPMOVSXDQ X2, Y4
	VPADDQ Y15, Y4, Y4
	VPSLLQ $52, Y4, Y4
	VMULPD Y4, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMOVSD X0, 8(DI)
	VMOVHPD X0, 24(DI)
	VMOVSD X1, 40(DI)
	VMOVHPD X1, 56(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $4, AX
	DECQ CX
	JNZ loop
done:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
