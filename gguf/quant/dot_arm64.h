// Macros shared by the NEON dot-product kernels.

// Instructions Go's arm64 assembler does not know, encoded by register
// number (0-31) as the Arm ARM gives them; the GNU form is beside each.
#define SDOT(d, n, m)    WORD $(0x4e809400|(m)<<16|(n)<<5|(d)) // sdot vd.4s, vn.16b, vm.16b
#define FCVTL(d, n)      WORD $(0x0e217800|(n)<<5|(d))         // fcvtl vd.4s, vn.4h
#define FCVTL2(d, n)     WORD $(0x4e217800|(n)<<5|(d))         // fcvtl2 vd.4s, vn.8h
#define SCVTF(d, n)      WORD $(0x4e21d800|(n)<<5|(d))         // scvtf vd.4s, vn.4s
#define FMUL(d, n, m)    WORD $(0x6e20dc00|(m)<<16|(n)<<5|(d)) // fmul vd.4s, vn.4s, vm.4s
#define FADD(d, n, m)    WORD $(0x4e20d400|(m)<<16|(n)<<5|(d)) // fadd vd.4s, vn.4s, vm.4s
#define FMULE(d, n, m)   WORD $(0x4f809000|(m)<<16|(n)<<5|(d)) // fmul vd.4s, vn.4s, vm.s[0]
#define FCVTAS(d, n)     WORD $(0x4e21c800|(n)<<5|(d))         // fcvtas vd.4s, vn.4s
#define UMAXV(d, n)      WORD $(0x6eb0a800|(n)<<5|(d))         // umaxv sd, vn.4s
#define SMIN(d, n, m)    WORD $(0x4ea06c00|(m)<<16|(n)<<5|(d)) // smin vd.4s, vn.4s, vm.4s
#define SADDLV(d, n)     WORD $(0x4e303800|(n)<<5|(d))         // saddlv hd, vn.16b
#define USHL_H(d, n, m)  WORD $(0x6e604400|(m)<<16|(n)<<5|(d)) // ushl vd.8h, vn.8h, vm.8h
#define FADDP_S(d, n)    WORD $(0x7e30d800|(n)<<5|(d))         // faddp sd, vn.2s
#define FMLA(d, n, m)    WORD $(0x4e20cc00|(m)<<16|(n)<<5|(d)) // fmla vd.4s, vn.4s, vm.4s
#define MUL(d, n, m)     WORD $(0x4ea09c00|(m)<<16|(n)<<5|(d)) // mul vd.4s, vn.4s, vm.4s
#define MLA(d, n, m)     WORD $(0x4ea09400|(m)<<16|(n)<<5|(d)) // mla vd.4s, vn.4s, vm.4s
#define SMULL(d, n, m)   WORD $(0x0e60c000|(m)<<16|(n)<<5|(d)) // smull vd.4s, vn.4h, vm.4h
#define SMLAL(d, n, m)   WORD $(0x0e608000|(m)<<16|(n)<<5|(d)) // smlal vd.4s, vn.4h, vm.4h
#define SMLAL2(d, n, m)  WORD $(0x4e608000|(m)<<16|(n)<<5|(d)) // smlal2 vd.4s, vn.8h, vm.8h
#define SXTL_H(d, n)     WORD $(0x0f08a400|(n)<<5|(d))         // sxtl vd.8h, vn.8b
#define SXTL2_H(d, n)    WORD $(0x4f08a400|(n)<<5|(d))         // sxtl2 vd.8h, vn.16b
#define SXTL_S(d, n)     WORD $(0x0f10a400|(n)<<5|(d))         // sxtl vd.4s, vn.4h
#define SXTL2_S(d, n)    WORD $(0x4f10a400|(n)<<5|(d))         // sxtl2 vd.4s, vn.8h

// F16LANES adds the products of the eight halves in vectors number N (x)
// and M (y) to the accumulators A (elements 0-3) and A+1 (4-7); clobbers
// V8, V9. The product of two halves is exact in float32, so the fused
// multiply-add rounds once, as the Go kernels' multiply-then-add does.
#define F16LANES(N, M, A) \
	FCVTL(8, N) \
	FCVTL(9, M) \
	FMLA(A, 8, 9) \
	FCVTL2(8, N) \
	FCVTL2(9, M) \
	FMLA(A+1, 8, 9)

// SUM4 turns the int32 vectors A, B, C, D (one block each) into
// [ΣA, ΣB, ΣC, ΣD] in A by pairwise adds; C is clobbered. Integer
// addition is exact, so the grouping does not matter.
#define SUM4(A, B, C, D) \
	VADDP B.S4, A.S4, A.S4 \
	VADDP D.S4, C.S4, C.S4 \
	VADDP C.S4, A.S4, A.S4

// SCALES4 loads the fp16 scales at P, P+S, P+2S, P+3S into the float32
// lanes of V (register number VN), through R4.
#define SCALES4(P, S, V, VN) \
	MOVHU (0*S)(P), R4 \
	VMOV R4, V.H[0] \
	MOVHU (1*S)(P), R4 \
	VMOV R4, V.H[1] \
	MOVHU (2*S)(P), R4 \
	VMOV R4, V.H[2] \
	MOVHU (3*S)(P), R4 \
	VMOV R4, V.H[3] \
	FCVTL(VN, VN)

// KPARTIAL finishes a K-quant block as kPartial does: ISUM (number IN)
// holds int32 terms of the block's Σ scale·q·a and SUMM (number SN) those
// of its Σ bsum·min (zero where the type has none); the fp16 d and dmin
// are at D and DMIN (R9, the address of a zero, where none), the float32
// activation scale at DY. It adds isum·(d·dy) − summs·(dmin·dy), each
// product rounded, to the float32 at ACC. Clobbers R7, R8, F0-F5.
#define KPARTIAL(ISUM, SUMM, D, DMIN, DY, ACC) \
	VADDV ISUM.S4, ISUM \
	VADDV SUMM.S4, SUMM \
	VMOV ISUM.S[0], R7 \
	SCVTFWS R7, F0 \
	VMOV SUMM.S[0], R7 \
	SCVTFWS R7, F4 \
	MOVHU D, R8 \
	FMOVS R8, F1 \
	FCVTHS F1, F1 \
	MOVHU DMIN, R8 \
	FMOVS R8, F2 \
	FCVTHS F2, F2 \
	FMOVS DY, F3 \
	FMULS F3, F1, F1 \
	FMULS F3, F2, F2 \
	FMULS F1, F0, F0 \
	FMULS F2, F4, F4 \
	FSUBS F4, F0, F0 \
	FMOVS ACC, F5 \
	FADDS F0, F5, F5 \
	FMOVS F5, ACC

// QUADS runs BLOCK(k, V, n) for blocks K..K+3 into V16..V19 and SUM4s
// their sums into V16.
#define QUADS(BLOCK, K) \
	BLOCK(K, V16, 16) \
	BLOCK(K+1, V17, 17) \
	BLOCK(K+2, V18, 18) \
	BLOCK(K+3, V19, 19) \
	SUM4(V16, V17, V18, V19)

// LOADACC32 and STOREACC32 move acc's 32 lanes (R0) to and from V16-V23
// for the float kernels, through R4.
#define LOADACC32 \
	VLD1 (R0), [V16.S4, V17.S4, V18.S4, V19.S4] \
	ADD  $64, R0, R4 \
	VLD1 (R4), [V20.S4, V21.S4, V22.S4, V23.S4]

#define STOREACC32 \
	VST1 [V16.S4, V17.S4, V18.S4, V19.S4], (R0) \
	VST1 [V20.S4, V21.S4, V22.S4, V23.S4], (R4)

// ROUNDS32 is the loop of a 32-element-block kernel after its setup:
// rounds of eight blocks (XS and YS bytes each) through QUADS(BLOCK),
// scaled by ACCUM (ACCUM4 or ACCUM4MIN) into V28 and V29, which go to acc
// (R0) at the end. Once per function.
#define ROUNDS32(XS, YS, ACCUM) \
loop: \
	QUADS(BLOCK, 0) \
	ACCUM(0, XS, YS, 28) \
	QUADS(BLOCK, 4) \
	ACCUM(4, XS, YS, 29) \
	ADD  $(8*XS), R1 \
	ADD  $(8*YS), R2 \
	SUBS $1, R3 \
	BNE  loop \
	VST1 [V28.S4, V29.S4], (R0) \
	RET

// KEND closes a K-quant kernel's loop over blocks of XS bytes.
#define KEND(XS) \
	ADD  $1, R9 \
	AND  $7, R9 \
	ADD  $XS, R1 \
	ADD  $292, R2 \
	SUBS $1, R3 \
	BNE  loop \
	RET

// ACCUM4 scales the sums in V16 of blocks K..K+3 (XS bytes apart at R1,
// their activation blocks YS apart at R2) as the Go kernels do:
// float32(sumi) × (dx × dy), each product rounded, and adds them to the
// accumulator numbered AN. Clobbers R4-R6, V16, V20, V21.
#define ACCUM4(K, XS, YS, AN) \
	SCVTF(16, 16) \
	ADD $(XS*(K)), R1, R5 \
	ADD $(YS*(K)), R2, R6 \
	SCALES4(R5, XS, V20, 20) \
	SCALES4(R6, YS, V21, 21) \
	FMUL(20, 20, 21) \
	FMUL(16, 16, 20) \
	FADD(AN, AN, 16)

// ACCUM4MIN is ACCUM4 plus the min term of Q4_1/Q5_1 (as scaledMin):
// float32(sumi) × (dx × dy) + mx × sy, with mx and sy the fp16s after dx
// and dy. Clobbers R4-R6, V16, V20-V23.
#define ACCUM4MIN(K, XS, YS, AN) \
	SCVTF(16, 16) \
	ADD $(XS*(K)), R1, R5 \
	ADD $(YS*(K)), R2, R6 \
	SCALES4(R5, XS, V20, 20) \
	SCALES4(R6, YS, V21, 21) \
	FMUL(20, 20, 21) \
	FMUL(16, 16, 20) \
	ADD $2, R5 \
	ADD $2, R6 \
	SCALES4(R5, XS, V22, 22) \
	SCALES4(R6, YS, V23, 23) \
	FMUL(22, 22, 23) \
	FADD(16, 16, 22) \
	FADD(AN, AN, 16)

// NIBBLES loads the 16 bytes at OFF(R1) and leaves their low nibbles
// (elements 0-15 of a Q4_0-style block) in V1 and high nibbles (16-31) in
// V0; V30 holds 0x0f bytes.
#define NIBBLES(OFF) \
	ADD $(OFF), R1, R5 \
	VLD1 (R5), [V0.B16] \
	VAND V30.B16, V0.B16, V1.B16 \
	VUSHR $4, V0.B16, V0.B16

// FIFTHBITS ORs bit e of the little-endian uint32 at OFF(R1), moved to
// bit 4, into element e of V1 (e < 16) or V0 (the fifth bits of Q5_0 and
// Q5_1). V24 and V25 pick bytes e/8 of the uint32 for e < 16 and e ≥ 16,
// V26 bit e mod 8 of them; V27 holds 0x10 bytes. Clobbers R7, V4-V6.
#define FIFTHBITS(OFF) \
	MOVWU (OFF)(R1), R7 \
	VDUP R7, V4.S4 \
	VTBL V24.B16, [V4.B16], V5.B16 \
	VTBL V25.B16, [V4.B16], V6.B16 \
	VCMTST V26.B16, V5.B16, V5.B16 \
	VCMTST V26.B16, V6.B16, V6.B16 \
	VAND V27.B16, V5.B16, V5.B16 \
	VAND V27.B16, V6.B16, V6.B16 \
	VORR V5.B16, V1.B16, V1.B16 \
	VORR V6.B16, V0.B16, V0.B16

// FIFTHSETUP loads FIFTHBITS's constants.
#define FIFTHSETUP \
	MOVD $0x0000000000000000, R7 \
	MOVD $0x0101010101010101, R8 \
	VMOV R7, V24.D[0] \
	VMOV R8, V24.D[1] \
	MOVD $0x0202020202020202, R7 \
	MOVD $0x0303030303030303, R8 \
	VMOV R7, V25.D[0] \
	VMOV R8, V25.D[1] \
	MOVD $0x8040201008040201, R7 \
	VMOV R7, V26.D[0] \
	VMOV R7, V26.D[1] \
	VMOVI $0x10, V27.B16

// KSCALEMIN unpacks the 6-bit scales and mins of the Q4_K/Q5_K block at
// R1 as ggml's get_scale_min_k4 does, leaving the scale bytes in R13, and
// Σ bsum·min over the Q8_K block at R2 in the int32 lanes of V6: the mins
// widened and paired with bsums 2j, 2j+1 (SMULL/SMLAL). Clobbers R5,
// R10-R15, V10, V11, V27-V29.
#define KSCALEMIN \
	SCALEMINBITS(R1, R10, R11, R12, R15, R13, R14) \
	VMOV  R14, V27.D[0] \
	VUXTL V27.B8, V27.H8 \
	VZIP1 V27.H8, V27.H8, V28.H8 \
	VZIP2 V27.H8, V27.H8, V29.H8 \
	ADD   $260, R2, R5 \
	VLD1  (R5), [V10.H8, V11.H8] \
	SMULL(6, 10, 28) \
	SMLAL2(6, 10, 28) \
	SMLAL(6, 11, 29) \
	SMLAL2(6, 11, 29)

// SCALEMINBITS leaves in SC the eight 6-bit scales of the Q4_K/Q5_K
// block at P (one a byte) and in MN its mins, as ggml's get_scale_min_k4:
// j < 4 from q[j] (q[j+4]) & 63, j ≥ 4 from the nibble of q[j+4] and the
// top bits of q[j-4] (q[j]), q the 12 bytes at 4(P). A, B, C and T are
// clobbered.
#define SCALEMINBITS(P, A, B, C, T, SC, MN) \
	MOVWU 4(P), A \
	MOVWU 8(P), B \
	MOVWU 12(P), C \
	ANDW  $0x3f3f3f3f, A, SC \
	ANDW  $0x0f0f0f0f, C, T \
	LSRW  $6, A, A \
	ANDW  $0x03030303, A, A \
	ORRW  A<<4, T, T \
	ORR   T<<32, SC, SC \
	ANDW  $0x3f3f3f3f, B, MN \
	LSRW  $4, C, C \
	ANDW  $0x0f0f0f0f, C, C \
	LSRW  $6, B, B \
	ANDW  $0x03030303, B, B \
	ORRW  B<<4, C, C \
	ORR   C<<32, MN, MN

// KZERO8 clears the accumulators V16-V23.
#define KZERO8 \
	VEOR V16.B16, V16.B16, V16.B16 \
	VEOR V17.B16, V17.B16, V17.B16 \
	VEOR V18.B16, V18.B16, V18.B16 \
	VEOR V19.B16, V19.B16, V19.B16 \
	VEOR V20.B16, V20.B16, V20.B16 \
	VEOR V21.B16, V21.B16, V21.B16 \
	VEOR V22.B16, V22.B16, V22.B16 \
	VEOR V23.B16, V23.B16, V23.B16

// KSCALED folds the eight sub-block sums in V16-V23 to two vectors and
// multiplies them by the scales (bytes in R13) lane-wise, into V16.
// Clobbers V18, V22, V24-V26.
#define KSCALED \
	SUM4(V16, V17, V18, V19) \
	SUM4(V20, V21, V22, V23) \
	VMOV   R13, V24.D[0] \
	VUXTL  V24.B8, V24.H8 \
	VUXTL  V24.H4, V25.S4 \
	VUXTL2 V24.H8, V26.S4 \
	MUL(16, 16, 25) \
	MLA(16, 20, 26)
