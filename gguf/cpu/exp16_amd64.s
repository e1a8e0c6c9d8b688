//go:build !purego

#include "textflag.h"

// siluGLU16 and expSub16 (silu_amd64.go): siluGLU8's and expSub8's
// arithmetic on AVX-512, sixteen elements a chunk (two float64 halves of
// eight lanes), the same operations in the same order, so the same bits.
// The constants live in registers for the whole loop:
//
//	Z16 log2e, Z17 shift, Z18 ln2hi, Z19 ln2lo, Z20 c5, Z21 c4, Z22 c3,
//	Z23 c2, Z24 c1, Z25 1 (float64); Z26 shift, Z27 -126, Z28 127,
//	Z29 1 (float32); Z30 the float32 sign bit; Z31 127 (int32).
//
// EXP16 takes a = Z0 (float32) and leaves expf(a) there, clobbering
// Z1-Z9, Y12, Y13, K1, K2 and R8; a chunk where a lane's n leaves
// [-126, 127] (or is NaN) jumps to its argument, the chunk not done.
// In order: n = fma(a, log2e, shift) − shift (Z3) and the branch test;
// b = fma(−n, ln2lo, fma(−n, ln2hi, a)) (Z0; halves Z1, Z2); u = b·b in
// float32 (halves Z4, Z5); p1 = fma(c5, b, c4) (Z6, Z7), p2 = fma(c3, b,
// c2) (Z8, Z9), q = fma(p1, u, p2) (Z6, Z7), p3 = fma(c1, b, 1) (Z8, Z9);
// j = fma(q, u, p3) in float32 (Z0), times 2^n.

// WIDEN16(Z, Y, LO, HI) widens the float32 vector Z (Y its low half) to
// float64 halves LO and HI (LO may be Z).
#define WIDEN16(Z, Y, LO, HI) \
	VEXTRACTF64X4 $1, Z, Y13 \
	VCVTPS2PD Y, LO \
	VCVTPS2PD Y13, HI

// ROUND16 rounds the float64 halves LO, HI to float32 and widens them
// again: the value of fma's float32 result.
#define ROUND16(LO, HI) \
	VCVTPD2PS LO, Y13 \
	VCVTPS2PD Y13, LO \
	VCVTPD2PS HI, Y13 \
	VCVTPS2PD Y13, HI

// NARROW16 rounds the float64 halves LO, HI to the float32 vector Z.
#define NARROW16(LO, HI, Z) \
	VCVTPD2PS LO, Y13 \
	VCVTPD2PS HI, Y12 \
	VINSERTF64X4 $1, Y12, Z13, Z

#define EXP16(BAIL) \
	WIDEN16(Z0, Y0, Z1, Z2) \
	VMOVAPD Z1, Z6 \
	VMOVAPD Z2, Z7 \
	VFMADD213PD Z17, Z16, Z6 \
	VFMADD213PD Z17, Z16, Z7 \
	NARROW16(Z6, Z7, Z3) \
	VSUBPS Z26, Z3, Z3 \
	VCMPPS $0x1d, Z27, Z3, K1 \
	VCMPPS $0x12, Z28, Z3, K2 \
	KANDW K1, K2, K1 \
	KMOVW K1, R8 \
	CMPL R8, $0xffff \
	JNE BAIL \
	VPXORD Z30, Z3, Z4 \
	WIDEN16(Z4, Y4, Z4, Z5) \
	VMOVAPD Z4, Z6 \
	VMOVAPD Z5, Z7 \
	VFMADD213PD Z1, Z18, Z6 \
	VFMADD213PD Z2, Z18, Z7 \
	ROUND16(Z6, Z7) \
	VFMADD213PD Z6, Z19, Z4 \
	VFMADD213PD Z7, Z19, Z5 \
	NARROW16(Z4, Z5, Z0) \
	WIDEN16(Z0, Y0, Z1, Z2) \
	VMULPS Z0, Z0, Z4 \
	WIDEN16(Z4, Y4, Z4, Z5) \
	VMOVAPD Z20, Z6 \
	VMOVAPD Z20, Z7 \
	VFMADD213PD Z21, Z1, Z6 \
	VFMADD213PD Z21, Z2, Z7 \
	ROUND16(Z6, Z7) \
	VMOVAPD Z22, Z8 \
	VMOVAPD Z22, Z9 \
	VFMADD213PD Z23, Z1, Z8 \
	VFMADD213PD Z23, Z2, Z9 \
	ROUND16(Z8, Z9) \
	VFMADD213PD Z8, Z4, Z6 \
	VFMADD213PD Z9, Z5, Z7 \
	ROUND16(Z6, Z7) \
	VMOVAPD Z24, Z8 \
	VMOVAPD Z24, Z9 \
	VFMADD213PD Z25, Z1, Z8 \
	VFMADD213PD Z25, Z2, Z9 \
	ROUND16(Z8, Z9) \
	VFMADD213PD Z8, Z4, Z6 \
	VFMADD213PD Z9, Z5, Z7 \
	NARROW16(Z6, Z7, Z0) \
	VCVTTPS2DQ Z3, Z3 \
	VPADDD Z31, Z3, Z3 \
	VPSLLD $23, Z3, Z3 \
	VMULPS Z3, Z0, Z0

// CONSTS16 loads the constants from the table at BX (silu_amd64.go).
#define CONSTS16 \
	VBROADCASTSD 0(BX), Z16 \
	VBROADCASTSD 8(BX), Z17 \
	VBROADCASTSD 16(BX), Z18 \
	VBROADCASTSD 24(BX), Z19 \
	VBROADCASTSD 32(BX), Z20 \
	VBROADCASTSD 40(BX), Z21 \
	VBROADCASTSD 48(BX), Z22 \
	VBROADCASTSD 56(BX), Z23 \
	VBROADCASTSD 64(BX), Z24 \
	VBROADCASTSD 72(BX), Z25 \
	VBROADCASTSS 80(BX), Z26 \
	VBROADCASTSS 84(BX), Z27 \
	VBROADCASTSS 88(BX), Z28 \
	VBROADCASTSS 92(BX), Z29 \
	VBROADCASTSS 96(BX), Z30 \
	VPTERNLOGD $0xff, Z31, Z31, Z31 \
	VPSRLD $25, Z31, Z31

// func siluGLU16(dst, gate, up *float32, chunks int, k *[16]float64) int
//
// Registers: DI dst, SI gate, DX up, CX chunks left, BX the constants,
// AX chunks done, Z11 x.
TEXT ·siluGLU16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ chunks+24(FP), CX
	MOVQ k+32(FP), BX
	XORQ AX, AX
	CONSTS16
	TESTQ CX, CX
	JZ   sdone
sloop:
	// e = expf(-x); silu = x / (1 + e); times up.
	VMOVUPS (SI), Z11
	VPXORD Z30, Z11, Z0
	EXP16(sdone)
	VADDPS Z0, Z29, Z0
	VDIVPS Z0, Z11, Z11
	VMULPS (DX), Z11, Z11
	VMOVUPS Z11, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	INCQ AX
	DECQ CX
	JNZ  sloop
sdone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// func expSub16(dst, src *float32, chunks int, m float32, k *[16]float64) int
//
// Registers: DI dst, SI src, CX chunks left, BX the constants, AX chunks
// done, Z11 m.
TEXT ·expSub16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ chunks+16(FP), CX
	VBROADCASTSS m+24(FP), Z11
	MOVQ k+32(FP), BX
	XORQ AX, AX
	CONSTS16
	TESTQ CX, CX
	JZ   edone
eloop:
	VMOVUPS (SI), Z0
	VSUBPS Z11, Z0, Z0
	EXP16(edone)
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	INCQ AX
	DECQ CX
	JNZ  eloop
edone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// func sumLanes16(x *float32, chunks int, part *[16]float64)
//
// part[l] += x[16c + l] in float64 for each chunk c, chunk by chunk:
// lanes 0-3, 4-7, 8-11, 12-15 in Y0-Y3 (AVX2).
TEXT ·sumLanes16(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ chunks+8(FP), CX
	MOVQ part+16(FP), DX
	VMOVUPD 0(DX), Y0
	VMOVUPD 32(DX), Y1
	VMOVUPD 64(DX), Y2
	VMOVUPD 96(DX), Y3
	TESTQ CX, CX
	JZ   ldone
lloop:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VADDPD Y6, Y2, Y2
	VADDPD Y7, Y3, Y3
	ADDQ $64, SI
	DECQ CX
	JNZ  lloop
ldone:
	VMOVUPD Y0, 0(DX)
	VMOVUPD Y1, 32(DX)
	VMOVUPD Y2, 64(DX)
	VMOVUPD Y3, 96(DX)
	VZEROUPPER
	RET

// func scaleMax16(x *float32, n int, s float32) float32
//
// x[i] *= s for i < n, in place, and the largest product (−Inf for none):
// the running maximum takes a NaN lane's old value (VMAXPS returns its
// second source where either is NaN), as scaleMax's Go loop skips NaNs.
// A masked last chunk: nothing past x[n-1] is read or written.
TEXT ·scaleMax16(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z1
	MOVL $0xff800000, AX
	VPBROADCASTD AX, Z0
mloop:
	CMPQ CX, $16
	JLT  mtail
	VMULPS (SI), Z1, Z2
	VMOVUPS Z2, (SI)
	VMAXPS Z0, Z2, Z0
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  mloop
mtail:
	TESTQ CX, CX
	JZ   mreduce
	// K1: the low CX lanes.
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z2
	VMULPS Z1, Z2, K1, Z2
	VMOVUPS Z2, K1, (SI)
	VMAXPS Z0, Z2, K1, Z0
mreduce:
	VEXTRACTF64X4 $1, Z0, Y3
	VMAXPS Y3, Y0, Y0
	VEXTRACTF128 $1, Y0, X3
	VMAXPS X3, X0, X0
	VPERMILPS $0x4e, X0, X3
	VMAXPS X3, X0, X0
	VPERMILPS $0xb1, X0, X3
	VMAXPS X3, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET
