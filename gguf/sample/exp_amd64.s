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

// idx8 picks the odd doublewords' lanes (the candidates' v) of two
// 512-bit loads, for VPERMT2PD: 1, 3, …, 15.
DATA idx8<>+0(SB)/8, $1
DATA idx8<>+8(SB)/8, $3
DATA idx8<>+16(SB)/8, $5
DATA idx8<>+24(SB)/8, $7
DATA idx8<>+32(SB)/8, $9
DATA idx8<>+40(SB)/8, $11
DATA idx8<>+48(SB)/8, $13
DATA idx8<>+56(SB)/8, $15
// lo8 and hi8 spread eight results back to the odd lanes of two
// registers, for the stores of v alone (mask 0xaa): lane 2i+1 of the
// first gets result i (i < 4), of the second result i+4.
DATA lo8<>+0(SB)/8, $0
DATA lo8<>+8(SB)/8, $0
DATA lo8<>+16(SB)/8, $1
DATA lo8<>+24(SB)/8, $1
DATA lo8<>+32(SB)/8, $2
DATA lo8<>+40(SB)/8, $2
DATA lo8<>+48(SB)/8, $3
DATA lo8<>+56(SB)/8, $3
DATA hi8<>+0(SB)/8, $4
DATA hi8<>+8(SB)/8, $4
DATA hi8<>+16(SB)/8, $5
DATA hi8<>+24(SB)/8, $5
DATA hi8<>+32(SB)/8, $6
DATA hi8<>+40(SB)/8, $6
DATA hi8<>+48(SB)/8, $7
DATA hi8<>+56(SB)/8, $7
GLOBL idx8<>(SB), RODATA, $64
GLOBL lo8<>(SB), RODATA, $64
GLOBL hi8<>(SB), RODATA, $64

// func expCands8(dst, src *candidate, n int, top, t float64) int
//
// expCands4's steps on eight lanes, with AVX-512: the same operations in
// the same order, each rounded alike, so each lane is exp's result to
// the bit. A chunk's eight v are gathered from two 64-byte loads
// (VPERMT2PD), and written back to dst's v alone by masked stores.
TEXT ·expCands8(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	XORQ AX, AX
	VBROADCASTSD top+24(FP), Z10
	VBROADCASTSD t+32(FP), Z11
	VBROADCASTSD expw<>+0(SB), Z7
	VBROADCASTSD expw<>+32(SB), Z8
	VBROADCASTSD expw<>+64(SB), Z9
	VBROADCASTSD expw<>+416(SB), Z12
	VBROADCASTSD expw<>+448(SB), Z13
	VBROADCASTSD expw<>+384(SB), Z14
	VPBROADCASTQ expw<>+480(SB), Z15
	VBROADCASTSD expw<>+96(SB), Z16
	VBROADCASTSD expw<>+128(SB), Z17
	VBROADCASTSD expw<>+160(SB), Z18
	VBROADCASTSD expw<>+192(SB), Z19
	VBROADCASTSD expw<>+224(SB), Z20
	VBROADCASTSD expw<>+256(SB), Z21
	VBROADCASTSD expw<>+288(SB), Z22
	VBROADCASTSD expw<>+320(SB), Z23
	VBROADCASTSD expw<>+352(SB), Z24
	VMOVDQU64 idx8<>(SB), Z25
	VMOVDQU64 lo8<>(SB), Z26
	VMOVDQU64 hi8<>(SB), Z27
	MOVQ $0xaa, DX
	KMOVW DX, K2
	TESTQ CX, CX
	JZ done8
loop8:
	VMOVUPD 0(SI), Z0
	VPERMT2PD 64(SI), Z25, Z0
	VSUBPD Z10, Z0, Z0
	VDIVPD Z11, Z0, Z0
	// lo ≤ x ≤ hi in every lane (false for a NaN), or stop here.
	VCMPPD $0x1d, Z12, Z0, K1
	VCMPPD $0x12, Z13, Z0, K3
	KANDW K1, K3, K1
	KMOVW K1, DX
	CMPQ DX, $0xff
	JNE done8
	VMULPD Z7, Z0, Z1
	VCVTPD2DQ Z1, Y2
	VCVTDQ2PD Y2, Z1
	VFNMADD231PD Z8, Z1, Z0
	VFNMADD231PD Z9, Z1, Z0
	VMULPD Z16, Z0, Z0
	VMOVAPD Z17, Z3
	VFMADD213PD Z18, Z0, Z3
	VFMADD213PD Z19, Z0, Z3
	VFMADD213PD Z20, Z0, Z3
	VFMADD213PD Z21, Z0, Z3
	VFMADD213PD Z22, Z0, Z3
	VFMADD213PD Z23, Z0, Z3
	VFMADD213PD Z24, Z0, Z3
	VMULPD Z3, Z0, Z0
	VADDPD Z14, Z0, Z3
	VMULPD Z3, Z0, Z0
	VADDPD Z14, Z0, Z3
	VMULPD Z3, Z0, Z0
	VADDPD Z14, Z0, Z3
	VMULPD Z3, Z0, Z0
	VADDPD Z14, Z0, Z3
	VFMADD213PD Z24, Z3, Z0
	// times 2^k: k + 1023 in the exponent field (1 ≤ k + 1023 ≤ 2046 here).
	VPMOVSXDQ Y2, Z4
	VPADDQ Z15, Z4, Z4
	VPSLLQ $52, Z4, Z4
	VMULPD Z4, Z0, Z0
	VPERMPD Z0, Z26, Z5
	VPERMPD Z0, Z27, Z6
	VMOVUPD Z5, K2, 0(DI)
	VMOVUPD Z6, K2, 64(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	ADDQ $8, AX
	DECQ CX
	JNZ loop8
done8:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
