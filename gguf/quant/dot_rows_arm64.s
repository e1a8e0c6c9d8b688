//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// Whole-row float dot products over many rows (rowsF16, rowsF32), as
// dot_rows_amd64.s: the chunks of 32 elements as f16x32/f32x32 do them,
// the last partial chunk copied into a zeroed buffer and done as one more
// (its zeros meet the activation's zero padding: +0 products leave a lane
// as it is, no lane being −0), then the lanes reduced as reduce does.
// R0 is out, R1 the row, R2 the stride, R3 the activation, R4 its
// zero-padded tail, R6 its whole chunks, R7 its tail elements, R8 the
// rows left, R12 the buffer.

#define FADDP2(d, n) WORD $(0x7e30d800|(n)<<5|(d)) // faddp sd, vn.2s

#define ARGS \
	MOVD out+0(FP), R0 \
	MOVD w+8(FP), R1 \
	MOVD stride+16(FP), R2 \
	MOVD x+24(FP), R3 \
	MOVD xtail+32(FP), R4 \
	MOVD n+40(FP), R7 \
	MOVD rows+48(FP), R8 \
	LSR  $5, R7, R6 \
	AND  $31, R7 \
	MOVD $buf-128(SP), R12

#define CHUNK16 \
	VLD1.P 64(R9), [V0.H8, V1.H8, V2.H8, V3.H8] \
	VLD1.P 64(R10), [V4.H8, V5.H8, V6.H8, V7.H8] \
	F16LANES(0, 4, 16) \
	F16LANES(1, 5, 18) \
	F16LANES(2, 6, 20) \
	F16LANES(3, 7, 22)

// CHUNK32: products rounded before the add, as in Go.
#define CHUNK32 \
	VLD1.P 64(R9), [V0.S4, V1.S4, V2.S4, V3.S4] \
	VLD1.P 64(R10), [V4.S4, V5.S4, V6.S4, V7.S4] \
	FMUL(0, 0, 4) \
	FMUL(1, 1, 5) \
	FMUL(2, 2, 6) \
	FMUL(3, 3, 7) \
	FADD(16, 16, 0) \
	FADD(17, 17, 1) \
	FADD(18, 18, 2) \
	FADD(19, 19, 3) \
	VLD1.P 64(R9), [V0.S4, V1.S4, V2.S4, V3.S4] \
	VLD1.P 64(R10), [V4.S4, V5.S4, V6.S4, V7.S4] \
	FMUL(0, 0, 4) \
	FMUL(1, 1, 5) \
	FMUL(2, 2, 6) \
	FMUL(3, 3, 7) \
	FADD(20, 20, 0) \
	FADD(21, 21, 1) \
	FADD(22, 22, 2) \
	FADD(23, 23, 3)

// ZEROBUF clears the 128-byte buffer; COPYTAIL copies SIZE bytes if bit
// BIT of the tail count is set (R13 source, R14 destination).
#define ZEROBUF \
	VEOR V0.B16, V0.B16, V0.B16 \
	VEOR V1.B16, V1.B16, V1.B16 \
	VEOR V2.B16, V2.B16, V2.B16 \
	VEOR V3.B16, V3.B16, V3.B16 \
	MOVD R12, R14 \
	VST1.P [V0.B16, V1.B16, V2.B16, V3.B16], 64(R14) \
	VST1 [V0.B16, V1.B16, V2.B16, V3.B16], (R14) \
	MOVD R9, R13 \
	MOVD R12, R14

// ROWS is the loop over rows; CHUNK does 32 elements at R9 and R10, TAIL
// copies a row's tail from R9 to the buffer.
#define ROWS(CHUNK, TAIL) \
row: \
	VEOR V16.B16, V16.B16, V16.B16 \
	VEOR V17.B16, V17.B16, V17.B16 \
	VEOR V18.B16, V18.B16, V18.B16 \
	VEOR V19.B16, V19.B16, V19.B16 \
	VEOR V20.B16, V20.B16, V20.B16 \
	VEOR V21.B16, V21.B16, V21.B16 \
	VEOR V22.B16, V22.B16, V22.B16 \
	VEOR V23.B16, V23.B16, V23.B16 \
	MOVD R1, R9 \
	MOVD R3, R10 \
	MOVD R6, R11 \
	CBZ  R11, tail \
chunk: \
	CHUNK \
	SUBS $1, R11 \
	BNE  chunk \
tail: \
	CBZ  R7, reduce \
	TAIL \
	MOVD R12, R9 \
	MOVD R4, R10 \
	CHUNK \
reduce: \
	FADD(16, 16, 20) \
	FADD(17, 17, 21) \
	FADD(18, 18, 22) \
	FADD(19, 19, 23) \
	FADD(16, 16, 18) \
	FADD(17, 17, 19) \
	FADD(16, 16, 17) \
	VEXT $8, V16.B16, V16.B16, V24.B16 \
	FADD(16, 16, 24) \
	FADDP2(24, 16) \
	FMOVS F24, (R0) \
	ADD  $4, R0 \
	ADD  R2, R1 \
	SUBS $1, R8 \
	BNE  row \
	RET

// TAIL16 copies up to 31 halves, in pieces of 16, 8, 4, 2 and 1.
#define TAIL16 \
	ZEROBUF \
	TBZ  $4, R7, t8 \
	VLD1.P 32(R13), [V0.B16, V1.B16] \
	VST1.P [V0.B16, V1.B16], 32(R14) \
t8: \
	TBZ  $3, R7, t4 \
	VLD1.P 16(R13), [V0.B16] \
	VST1.P [V0.B16], 16(R14) \
t4: \
	TBZ  $2, R7, t2 \
	MOVD.P 8(R13), R15 \
	MOVD.P R15, 8(R14) \
t2: \
	TBZ  $1, R7, t1 \
	MOVWU.P 4(R13), R15 \
	MOVW.P R15, 4(R14) \
t1: \
	TBZ  $0, R7, t0 \
	MOVHU (R13), R15 \
	MOVH R15, (R14) \
t0:

// TAIL32 copies up to 31 floats, in pieces of 16, 8, 4, 2 and 1.
#define TAIL32 \
	ZEROBUF \
	TBZ  $4, R7, t8 \
	VLD1.P 64(R13), [V0.B16, V1.B16, V2.B16, V3.B16] \
	VST1.P [V0.B16, V1.B16, V2.B16, V3.B16], 64(R14) \
t8: \
	TBZ  $3, R7, t4 \
	VLD1.P 32(R13), [V0.B16, V1.B16] \
	VST1.P [V0.B16, V1.B16], 32(R14) \
t4: \
	TBZ  $2, R7, t2 \
	VLD1.P 16(R13), [V0.B16] \
	VST1.P [V0.B16], 16(R14) \
t2: \
	TBZ  $1, R7, t1 \
	MOVD.P 8(R13), R15 \
	MOVD.P R15, 8(R14) \
t1: \
	TBZ  $0, R7, t0 \
	MOVWU (R13), R15 \
	MOVW R15, (R14) \
t0:

// func rowsF16(out *float32, w *byte, stride int, x, xtail *byte, n, rows int)
TEXT ·rowsF16(SB), NOSPLIT, $128-56
	ARGS
	ROWS(CHUNK16, TAIL16)

// func rowsF32(out *float32, w *byte, stride int, x, xtail *byte, n, rows int)
TEXT ·rowsF32(SB), NOSPLIT, $128-56
	ARGS
	ROWS(CHUNK32, TAIL32)
