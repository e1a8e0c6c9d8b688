//go:build !purego

#include "textflag.h"
#include "dot_arm64.h"

// The float band kernels (tile_float.go): four float32 activation rows per
// weight row load, for F16, BF16 and F32 weights. Lane l of activation
// row j's accumulator gets, for each round of 32 elements, what it gets
// in f16x32, bf16x32 and f32x32 (dot_*_arm64.s): for F16 a fused
// multiply-add of the widened weight and the activation (exact product,
// one rounding), for BF16 and F32 the product rounded (FMUL, weight
// first), then added (FADD, accumulator first). Sixteen accumulators of
// four lanes a row would take 32 registers, so the rows are taken twice:
// lanes 0-15, then 16-31, each lane still in its own order.
//
// Registers: R0 acc, R1 as, R2 w, R3 x, R4 xs, R5 chunks; R6-R9 the four
// rows' accumulators, R10-R13 their activations; R14 the walking w,
// R19-R22 the walking activations, R23 the count, R24 scratch; R15-R17
// out, os, live. With out set, the kernels then fold each row's 32 lanes
// as reduce does (FOLD) and store activation row j's result at out + j·os,
// for j < live. V16-V31 the accumulators (row j's lanes 16h..16h+15 in
// V16+4j..V19+4j), V2-V5 the widened weights, V6-V9 an activation row's
// elements and then the products, V0, V1 the loaded halves, V10 zero
// (BF16).

// WF16, WBF16 and WF32 load 16 weights at R14 into V2-V5, widened, and
// step R14 past them.
#define WF16 \
	VLD1.P 32(R14), [V0.H8, V1.H8] \
	FCVTL(2, 0) \
	FCVTL2(3, 0) \
	FCVTL(4, 1) \
	FCVTL2(5, 1)

#define WBF16 \
	VLD1.P 32(R14), [V0.H8, V1.H8] \
	VZIP1 V0.H8, V10.H8, V2.H8 \
	VZIP2 V0.H8, V10.H8, V3.H8 \
	VZIP1 V1.H8, V10.H8, V4.H8 \
	VZIP2 V1.H8, V10.H8, V5.H8

#define WF32 \
	VLD1.P 64(R14), [V2.S4, V3.S4, V4.S4, V5.S4]

// FMA4 and MULADD4 add the products of V2-V5 with V6-V9 to the
// accumulators A..A+3.
#define FMA4(A) \
	FMLA(A, 2, 6) \
	FMLA(A+1, 3, 7) \
	FMLA(A+2, 4, 8) \
	FMLA(A+3, 5, 9)

#define MULADD4(A) \
	FMUL(6, 2, 6) \
	FMUL(7, 3, 7) \
	FMUL(8, 4, 8) \
	FMUL(9, 5, 9) \
	FADD(A, A, 6) \
	FADD(A+1, A+1, 7) \
	FADD(A+2, A+2, 8) \
	FADD(A+3, A+3, 9)

// ROW adds row X's 16 elements times the weights to A..A+3 and steps X
// to the next round.
#define ROW(X, A, ACCUM) \
	VLD1 (X), [V6.S4, V7.S4, V8.S4, V9.S4] \
	ADD  $128, X \
	ACCUM(A)

// ACCLOAD and ACCSTORE move lanes 16H..16H+15 of row R's accumulator
// to and from A-D.
#define ACCLOAD(R, H, A, B, C, D) \
	ADD  $(64*H), R, R24 \
	VLD1 (R24), [A.S4, B.S4, C.S4, D.S4]

#define ACCSTORE(R, H, A, B, C, D) \
	ADD  $(64*H), R, R24 \
	VST1 [A.S4, B.S4, C.S4, D.S4], (R24)

// PASS does, in a loop at LOOP, lanes 16H..16H+15 of the four rows,
// weights ES bytes each.
#define PASS(H, ES, WIDEN, ACCUM, LOOP) \
	ACCLOAD(R6, H, V16, V17, V18, V19) \
	ACCLOAD(R7, H, V20, V21, V22, V23) \
	ACCLOAD(R8, H, V24, V25, V26, V27) \
	ACCLOAD(R9, H, V28, V29, V30, V31) \
	ADD  $(16*ES*H), R2, R14 \
	ADD  $(64*H), R10, R19 \
	ADD  $(64*H), R11, R20 \
	ADD  $(64*H), R12, R21 \
	ADD  $(64*H), R13, R22 \
	MOVD R5, R23 \
LOOP: \
	WIDEN \
	ADD  $(16*ES), R14 \
	ROW(R19, 16, ACCUM) \
	ROW(R20, 20, ACCUM) \
	ROW(R21, 24, ACCUM) \
	ROW(R22, 28, ACCUM) \
	SUBS $1, R23 \
	BNE  LOOP \
	ACCSTORE(R6, H, V16, V17, V18, V19) \
	ACCSTORE(R7, H, V20, V21, V22, V23) \
	ACCSTORE(R8, H, V24, V25, V26, V27) \
	ACCSTORE(R9, H, V28, V29, V30, V31)

#define BAND4(ES, WIDEN, ACCUM) \
	MOVD acc+0(FP), R0 \
	MOVD as+8(FP), R1 \
	MOVD w+16(FP), R2 \
	MOVD x+24(FP), R3 \
	MOVD xs+32(FP), R4 \
	MOVD chunks+40(FP), R5 \
	MOVD R0, R6 \
	ADD  R1, R6, R7 \
	ADD  R1, R7, R8 \
	ADD  R1, R8, R9 \
	MOVD R3, R10 \
	ADD  R4, R10, R11 \
	ADD  R4, R11, R12 \
	ADD  R4, R12, R13 \
	VEOR V10.B16, V10.B16, V10.B16 \
	PASS(0, ES, WIDEN, ACCUM, lanes0) \
	PASS(1, ES, WIDEN, ACCUM, lanes16) \
	MOVD out+48(FP), R15 \
	CBZ  R15, done \
	MOVD os+56(FP), R16 \
	MOVD live+64(FP), R17 \
	FOLD(R6) \
	CMP  $1, R17 \
	BLE  done \
	ADD  R16, R15 \
	FOLD(R7) \
	CMP  $2, R17 \
	BLE  done \
	ADD  R16, R15 \
	FOLD(R8) \
	CMP  $3, R17 \
	BLE  done \
	ADD  R16, R15 \
	FOLD(R9) \
done: \
	RET

// FOLD folds the 32 lanes of the accumulator at R as reduce does
// (a[l] + a[l+16], a[l] + a[l+8], a[l] + a[l+4], then (a0+a2) + (a1+a3))
// and stores the result at (R15). Clobbers R24, V0-V7.
#define FOLD(R) \
	VLD1 (R), [V0.S4, V1.S4, V2.S4, V3.S4] \
	ADD  $64, R, R24 \
	VLD1 (R24), [V4.S4, V5.S4, V6.S4, V7.S4] \
	FADD(0, 0, 4) \
	FADD(1, 1, 5) \
	FADD(2, 2, 6) \
	FADD(3, 3, 7) \
	FADD(0, 0, 2) \
	FADD(1, 1, 3) \
	FADD(0, 0, 1) \
	VEXT $8, V0.B16, V0.B16, V1.B16 \
	FADD(0, 0, 1) \
	FADDP_S(0, 0) \
	FMOVS F0, (R15)

// func f16Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·f16Band4(SB), NOSPLIT, $0-72
	BAND4(2, WF16, FMA4)

// func bf16Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·bf16Band4(SB), NOSPLIT, $0-72
	BAND4(2, WBF16, MULADD4)

// func f32Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·f32Band4(SB), NOSPLIT, $0-72
	BAND4(4, WF32, MULADD4)
