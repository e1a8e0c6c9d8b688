//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"
#include "tile_arm64.h"

// Q4_K tile: eight rows of Q4_K times a Q8_K activation. Repacked block
// (2624 bytes): per sub-block s (elements 32s..32s+31) 256 bytes, the
// nibbles of rows 0-3 in groups, then of rows 4-7; at 2048 the rows'
// scales as int32, sub-block s of rows 0-3 at 16s and of rows 4-7 at
// 128+16s; at 2304 the mins likewise; at 2560 the rows' d, at 2592 dmin,
// as float32. Per row, isum = Σ_s sc_s·Σ n·a and summs = Σ_j m_j·(bsum 2j
// + bsum 2j+1), exact in int32, then kPartial.

// KSUB adds sub-block s's Σ sc·Σ n·a to V12 (rows 0-3) and V13 (4-7); R11
// points at its activations, R9 and R10 at its scales.
#define KSUB \
	VLD1.P 32(R11), [V4.B16, V5.B16] \
	VEOR V6.B16, V6.B16, V6.B16 \
	VEOR V7.B16, V7.B16, V7.B16 \
	DOT8(6, 4, 5) \
	DOT8(7, 4, 5) \
	VLD1.P 16(R9), [V10.S4] \
	VLD1.P 16(R10), [V11.S4] \
	MLA(12, 6, 10) \
	MLA(13, 7, 11)

// KMIN adds m_j·(bsum 2j + bsum 2j+1), the pair sum in lane I of vector
// number S, to V14 and V15; R10 and R11 point at the rows' min j.
#define KMIN(S, I) \
	VLD1.P 16(R10), [V8.S4] \
	VLD1.P 16(R11), [V9.S4] \
	MLAE(14, 8, S, I) \
	MLAE(15, 9, S, I)

#define KBLOCK \
	ADD  $2048, R1, R9 \
	ADD  $2176, R1, R10 \
	ADD  $4, R2, R11 \
	VEOR V12.B16, V12.B16, V12.B16 \
	VEOR V13.B16, V13.B16, V13.B16 \
	KSUB \
	KSUB \
	KSUB \
	KSUB \
	KSUB \
	KSUB \
	KSUB \
	KSUB \
	ADD  $260, R2, R11 \
	VLD1 (R11), [V4.H8, V5.H8] \
	SADDLP(4, 4) \
	SADDLP(5, 5) \
	ADD  $128, R10, R11 \
	VEOR V14.B16, V14.B16, V14.B16 \
	VEOR V15.B16, V15.B16, V15.B16 \
	KMIN(4, 0) \
	KMIN(4, 1) \
	KMIN(4, 2) \
	KMIN(4, 3) \
	KMIN(5, 0) \
	KMIN(5, 1) \
	KMIN(5, 2) \
	KMIN(5, 3) \
	SCVTF(12, 12) \
	SCVTF(13, 13) \
	SCVTF(14, 14) \
	SCVTF(15, 15) \
	VLD1R (R2), [V8.S4] \
	VLD1 (R11), [V0.S4, V1.S4, V2.S4, V3.S4] \
	FMUL(0, 0, 8) \
	FMUL(1, 1, 8) \
	FMUL(2, 2, 8) \
	FMUL(3, 3, 8) \
	FMUL(12, 12, 0) \
	FMUL(13, 13, 1) \
	FMUL(14, 14, 2) \
	FMUL(15, 15, 3) \
	FSUB(6, 12, 14) \
	FSUB(7, 13, 15) \
	ADD  $576, R1 \
	ADD  $292, R2 \
	ADD  $32, R3

// func q4KTile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q4KTile(SB), NOSPLIT, $0-48
	TILEARGS
	TILELOOPK

// RAW loads the 32 nibble bytes at 16+32J of a row's block into A, B.
#define RAW(R, J, A, B) \
	ADD  $(16+32*(J)), R, R14 \
	VLD1 (R14), [A.B16, B.B16]

// LOWS and HIGHS store the low (high) nibbles of four rows' raw bytes
// (A0/B0 .. A3/B3) in groups; V24 holds 15s. Clobber V0-V7.
#define LOWS(A0, B0, A1, B1, A2, B2, A3, B3) \
	VAND V24.B16, A0.B16, V0.B16 \
	VAND V24.B16, A1.B16, V1.B16 \
	VAND V24.B16, A2.B16, V2.B16 \
	VAND V24.B16, A3.B16, V3.B16 \
	VAND V24.B16, B0.B16, V4.B16 \
	VAND V24.B16, B1.B16, V5.B16 \
	VAND V24.B16, B2.B16, V6.B16 \
	VAND V24.B16, B3.B16, V7.B16 \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)

#define HIGHS(A0, B0, A1, B1, A2, B2, A3, B3) \
	VUSHR $4, A0.B16, V0.B16 \
	VUSHR $4, A1.B16, V1.B16 \
	VUSHR $4, A2.B16, V2.B16 \
	VUSHR $4, A3.B16, V3.B16 \
	VUSHR $4, B0.B16, V4.B16 \
	VUSHR $4, B1.B16, V5.B16 \
	VUSHR $4, B2.B16, V6.B16 \
	VUSHR $4, B3.B16, V7.B16 \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)

// PAIR repacks sub-blocks 2J (low nibbles) and 2J+1 (high).
#define PAIR(J) \
	RAW(R6, J, V8, V9) \
	RAW(R7, J, V10, V11) \
	RAW(R8, J, V12, V13) \
	RAW(R9, J, V14, V15) \
	RAW(R10, J, V16, V17) \
	RAW(R11, J, V18, V19) \
	RAW(R12, J, V20, V21) \
	RAW(R13, J, V22, V23) \
	LOWS(V8, V9, V10, V11, V12, V13, V14, V15) \
	LOWS(V16, V17, V18, V19, V20, V21, V22, V23) \
	HIGHS(V8, V9, V10, V11, V12, V13, V14, V15) \
	HIGHS(V16, V17, V18, V19, V20, V21, V22, V23)

// WIDE puts the eight bytes of G in V(L) (0-3) and V(H) (4-7) as int32.
#define WIDE(G, L, H) \
	VMOV  G, L.D[0] \
	VUXTL L.B8, L.H8 \
	VUXTL2 L.H8, H.S4 \
	VUXTL L.H4, L.S4

// SCROWS4 writes the scales of rows RA-RD to R0 and their mins to R24
// (each advanced by 128), sub-block-major. Clobbers R15, R19-R23, V0-V15.
#define SCROWS4(RA, RB, RC, RD) \
	SCALEMINBITS(RA, R20, R21, R22, R23, R15, R19) \
	WIDE(R15, V0, V4) \
	WIDE(R19, V8, V12) \
	SCALEMINBITS(RB, R20, R21, R22, R23, R15, R19) \
	WIDE(R15, V1, V5) \
	WIDE(R19, V9, V13) \
	SCALEMINBITS(RC, R20, R21, R22, R23, R15, R19) \
	WIDE(R15, V2, V6) \
	WIDE(R19, V10, V14) \
	SCALEMINBITS(RD, R20, R21, R22, R23, R15, R19) \
	WIDE(R15, V3, V7) \
	WIDE(R19, V11, V15) \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0) \
	VST4.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R24) \
	VST4.P [V12.S4, V13.S4, V14.S4, V15.S4], 64(R24)

// func q4KPack(dst, w *byte, rs, blocks int)
TEXT ·q4KPack(SB), NOSPLIT, $0-32
	PACKARGS
	VMOVI $15, V24.B16
pack:
	PAIR(0)
	PAIR(1)
	PAIR(2)
	PAIR(3)
	ADD   $256, R0, R24
	SCROWS4(R6, R7, R8, R9)
	SCROWS4(R10, R11, R12, R13)
	MOVD  R24, R0
	HALVES8(0)
	HALVES8(2)
	PACKNEXT(144)
