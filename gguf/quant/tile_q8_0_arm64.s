//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"
#include "tile_arm64.h"

// Q4_0 and Q8_0 tiles: eight rows of signed bytes (Q8_0's quants, or
// Q4_0's nibbles less 8) times a Q8_0 activation. Repacked block (288
// bytes): the quants of rows 0-3 in groups (128), of rows 4-7 (128), the
// rows' d as float32 (32). SDOT's sums are exact; then as the Go kernel:
// float32(sumi) × (dx × dy), each product rounded, into lane j.

// TBLOCK adds the next block's partials to V(AL) (rows 0-3) and V(AH)
// (rows 4-7). R2 points at the activation block's quants, R3 at its
// figures (float32 dy first).
#define TBLOCK(AL, AH) \
	VLD1 (R2), [V4.B16, V5.B16] \
	VEOR V6.B16, V6.B16, V6.B16 \
	VEOR V7.B16, V7.B16, V7.B16 \
	DOT8(6, 4, 5) \
	DOT8(7, 4, 5) \
	SCVTF(6, 6) \
	SCVTF(7, 7) \
	VLD1R (R3), [V8.S4] \
	VLD1.P 32(R1), [V9.S4, V10.S4] \
	FMUL(9, 9, 8) \
	FMUL(10, 10, 8) \
	FMUL(6, 6, 9) \
	FMUL(7, 7, 10) \
	FADD(AL, AL, 6) \
	FADD(AH, AH, 7) \
	ADD $34, R2 \
	ADD $8, R3

// func q8Tile(acc *[64]float32, w, y, aux *byte, blocks int, out *float32)
TEXT ·q8Tile(SB), NOSPLIT, $0-48
	TILEARGS
	TILEACC
	ADD $2, R2
	TILELOOP

// Q8ROWS stores groups of the 32 quants of four rows' Q8_0 blocks (RA,
// RB, RC, RD): elements 0-15 (groups 0-3) through ST4, then 16-31.
#define Q8ROWS(RA, RB, RC, RD) \
	LOAD16(RA, 2, V0) \
	LOAD16(RB, 2, V1) \
	LOAD16(RC, 2, V2) \
	LOAD16(RD, 2, V3) \
	LOAD16(RA, 18, V4) \
	LOAD16(RB, 18, V5) \
	LOAD16(RC, 18, V6) \
	LOAD16(RD, 18, V7) \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)

// func q8_0Pack(dst, w *byte, rs, blocks int)
TEXT ·q8_0Pack(SB), NOSPLIT, $0-32
	PACKARGS
pack:
	Q8ROWS(R6, R7, R8, R9)
	Q8ROWS(R10, R11, R12, R13)
	HALVES8(0)
	PACKNEXT(34)

// NIBROW(R, L, H) leaves the nibbles less 8 of a row's Q4_0 block in L
// (elements 0-15) and H (16-31). V30 holds 15s, V31 8s.
#define NIBROW(R, L, H) \
	LOAD16(R, 2, H) \
	VAND V30.B16, H.B16, L.B16 \
	VUSHR $4, H.B16, H.B16 \
	VSUB V31.B16, L.B16, L.B16 \
	VSUB V31.B16, H.B16, H.B16

#define Q4ROWS(RA, RB, RC, RD) \
	NIBROW(RA, V0, V4) \
	NIBROW(RB, V1, V5) \
	NIBROW(RC, V2, V6) \
	NIBROW(RD, V3, V7) \
	VST4.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R0) \
	VST4.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R0)

// func q4_0Pack(dst, w *byte, rs, blocks int)
TEXT ·q4_0Pack(SB), NOSPLIT, $0-32
	PACKARGS
	VMOVI $15, V30.B16
	VMOVI $8, V31.B16
pack:
	Q4ROWS(R6, R7, R8, R9)
	Q4ROWS(R10, R11, R12, R13)
	HALVES8(0)
	PACKNEXT(18)

// func prefetchRows(w *byte, rs, rows, bytes int)
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVD w+0(FP), R0
	MOVD rs+8(FP), R1
	MOVD rows+16(FP), R2
	MOVD bytes+24(FP), R3
	CBZ  R2, pdone
prow:
	MOVD $0, R4
pline:
	ADD  R4, R0, R5
	PRFM (R5), PLDL2KEEP
	ADD  $64, R4
	CMP  R3, R4
	BLT  pline
	ADD  R3, R0, R5
	SUB  $1, R5
	PRFM (R5), PLDL2KEEP
	ADD  R1, R0
	SUBS $1, R2
	BNE  prow
pdone:
	RET
