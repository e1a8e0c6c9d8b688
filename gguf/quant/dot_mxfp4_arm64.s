//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// MXFP4·Q8_0, eight blocks a round (17-byte blocks: the E8M0 exponent,
// then sixteen bytes of nibbles laid out as Q4_0's, each an index into the
// doubled E2M1 levels of kvaluesMXFP4, looked up with TBL). The integer
// sums are IQ4_NL's (SDOT of the signed levels, |level| ≤ 12, and the
// activations); the block scale is half the E8M0 value, built as
// e8m0Half builds it, times the activation's fp16 scale.

// BLOCK leaves block K's four int32 partial sums in V (number VN); V31
// holds the levels.
#define BLOCK(K, V, VN) \
	NIBBLES(17*(K)+1) \
	ADD $(34*(K)+2), R2, R6 \
	VLD1 (R6), [V2.B16, V3.B16] \
	VTBL V1.B16, [V31.B16], V1.B16 \
	VTBL V0.B16, [V31.B16], V0.B16 \
	VEOR V.B16, V.B16, V.B16 \
	SDOT(VN, 1, 2) \
	SDOT(VN, 0, 3)

// E8M0S4 leaves in V20 the halved scales 2^(e−128) of the four blocks
// whose exponents are the bytes at P, P+17, P+34, P+51: for e ≥ 2 the
// float32 bits (e−1)<<23, for e < 2 the subnormals 0x00200000<<e, which
// is (e+1)<<21 there. V27 holds int32 ones. Clobbers R4, V22, V23.
#define E8M0S4(P) \
	MOVBU 0(P), R4 \
	VMOV R4, V20.S[0] \
	MOVBU 17(P), R4 \
	VMOV R4, V20.S[1] \
	MOVBU 34(P), R4 \
	VMOV R4, V20.S[2] \
	MOVBU 51(P), R4 \
	VMOV R4, V20.S[3] \
	VSUB V27.S4, V20.S4, V22.S4 \
	VSHL $23, V22.S4, V22.S4 \
	VADD V27.S4, V20.S4, V23.S4 \
	VSHL $21, V23.S4, V23.S4 \
	VUSHR $1, V20.S4, V20.S4 \
	VCMTST V20.S4, V20.S4, V20.S4 \
	VBSL V23.B16, V22.B16, V20.B16

// ACCUMMX scales the sums in V16 of blocks K..K+3 (17 bytes apart at R1,
// their activation blocks 34 apart at R2) as blocksMXFP4 does:
// float32(sumi) × (dy × e8m0Half(e)), each product rounded, and adds them
// to the accumulator numbered AN. Clobbers R4-R6, V16, V20-V23.
#define ACCUMMX(K, XS, YS, AN) \
	SCVTF(16, 16) \
	ADD $(XS*(K)), R1, R5 \
	ADD $(YS*(K)), R2, R6 \
	E8M0S4(R5) \
	SCALES4(R6, YS, V21, 21) \
	FMUL(20, 21, 20) \
	FMUL(16, 16, 20) \
	FADD(AN, AN, 16)

// func mxfp4x8(acc *[8]float32, x, y *byte, groups int)
TEXT ·mxfp4x8(SB), NOSPLIT, $0-32
	MOVD acc+0(FP), R0
	MOVD x+8(FP), R1
	MOVD y+16(FP), R2
	MOVD groups+24(FP), R3
	VLD1 (R0), [V28.S4, V29.S4]
	VMOVI $15, V30.B16
	MOVD $0x0c08060403020100, R7 // 0 1 2 3 4 6 8 12
	MOVD $0xf4f8fafcfdfeff00, R8 // 0 -1 -2 -3 -4 -6 -8 -12
	VMOV R7, V31.D[0]
	VMOV R8, V31.D[1]
	MOVD $1, R7
	VDUP R7, V27.S4

	ROUNDS32(17, 34, ACCUMMX)
