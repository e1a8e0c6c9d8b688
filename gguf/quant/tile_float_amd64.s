//go:build !purego

#include "textflag.h"

// The float band kernels (tile_float.go): four float32 activation rows per
// weight row load, for F16, BF16 and F32 weights. Lane l of activation
// row j's accumulator gets, for each round of 32 elements, the product
// (VMULPS, weight first) added (VADDPS, accumulator first) exactly as in
// f16x32, bf16x32 and f32x32 (dot_*_amd64.s), or for F16 the same bits by
// a fused multiply-add (FMA below). The kernels need FMA besides AVX2
// (haveFMA). Sixteen accumulators of
// eight lanes would fill the sixteen registers, so the rows are taken
// twice: lanes 0-15, then 16-31, each lane still in its own order.
//
// With out set, the kernels then fold each row's 32 lanes as reduce does
// (FOLD8) and store activation row j's result at out + j·os, for j < live
// (the rows past live are padding, their accumulators left as they are).
//
// Registers: DI acc, R8 as, DX w, SI x, R9 xs, R10 3·xs, CX chunks;
// BX, AX the walking w and x, R13 the count, R12 acc + 3·as; Y4-Y11 the
// accumulators (row j's lanes 16h..16h+15 in Y4+2j, Y5+2j), Y0, Y1 the
// weights, Y2, Y3 the products.

// WF16, WBF16 and WF32 widen the eight weights at OFF(BX) into Y.
#define WF16(OFF, Y) VCVTPH2PS OFF(BX), Y

#define WBF16(OFF, Y) \
	VPMOVZXWD OFF(BX), Y \
	VPSLLD $16, Y, Y

#define WF32(OFF, Y) VMOVUPS OFF(BX), Y

// MULADD and FMA add the products of Y0, Y1 with row j's 16 elements at
// OFF X to A0, A1: MULADD rounding the product (VMULPS) before the add
// (VADDPS), as bf16x32 and f32x32 do; FMA in one fused multiply-add,
// for F16 only, whose products are exact in float32 (as f16x32 says), so
// that it rounds once, as f16x32's multiply-then-add does: the same bits,
// in half the instructions.
#define MULADD(X, OFF, A0, A1) \
	VMULPS OFF+0 X, Y0, Y2 \
	VADDPS Y2, A0, A0 \
	VMULPS OFF+32 X, Y1, Y3 \
	VADDPS Y3, A1, A1

#define FMA(X, OFF, A0, A1) \
	VFMADD231PS OFF+0 X, Y0, A0 \
	VFMADD231PS OFF+32 X, Y1, A1

// PASS does, in a loop at LOOP, lanes 16H..16H+15 of the four rows, weights ES bytes each,
// WIDEN loading them.
#define PASS(H, ES, WIDEN, ROW, LOOP) \
	VMOVUPS 64*H(DI), Y4 \
	VMOVUPS 64*H+32(DI), Y5 \
	VMOVUPS 64*H(DI)(R8*1), Y6 \
	VMOVUPS 64*H+32(DI)(R8*1), Y7 \
	VMOVUPS 64*H(DI)(R8*2), Y8 \
	VMOVUPS 64*H+32(DI)(R8*2), Y9 \
	VMOVUPS 64*H(R12), Y10 \
	VMOVUPS 64*H+32(R12), Y11 \
	MOVQ DX, BX \
	MOVQ SI, AX \
	MOVQ CX, R13 \
LOOP: \
	WIDEN(16*ES*H, Y0) \
	WIDEN(16*ES*H+8*ES, Y1) \
	ROW((AX), 64*H, Y4, Y5) \
	ROW((AX)(R9*1), 64*H, Y6, Y7) \
	ROW((AX)(R9*2), 64*H, Y8, Y9) \
	ROW((AX)(R10*1), 64*H, Y10, Y11) \
	ADDQ $(32*ES), BX \
	ADDQ $128, AX \
	DECQ R13 \
	JNZ LOOP \
	VMOVUPS Y4, 64*H(DI) \
	VMOVUPS Y5, 64*H+32(DI) \
	VMOVUPS Y6, 64*H(DI)(R8*1) \
	VMOVUPS Y7, 64*H+32(DI)(R8*1) \
	VMOVUPS Y8, 64*H(DI)(R8*2) \
	VMOVUPS Y9, 64*H+32(DI)(R8*2) \
	VMOVUPS Y10, 64*H(R12) \
	VMOVUPS Y11, 64*H+32(R12)

#define BAND4(ES, WIDEN, ROW) \
	MOVQ acc+0(FP), DI \
	MOVQ as+8(FP), R8 \
	MOVQ w+16(FP), DX \
	MOVQ x+24(FP), SI \
	MOVQ xs+32(FP), R9 \
	MOVQ chunks+40(FP), CX \
	LEAQ (R9)(R9*2), R10 \
	LEAQ (R8)(R8*2), R12 \
	ADDQ DI, R12 \
	PASS(0, ES, WIDEN, ROW, lanes0) \
	PASS(1, ES, WIDEN, ROW, lanes16) \
	MOVQ out+48(FP), SI \
	TESTQ SI, SI \
	JZ done \
	MOVQ os+56(FP), DX \
	MOVQ live+64(FP), R13 \
	YFOLD(0(DI)) \
	CMPQ R13, $1 \
	JLE done \
	ADDQ DX, SI \
	YFOLD(0(DI)(R8*1)) \
	CMPQ R13, $2 \
	JLE done \
	ADDQ DX, SI \
	YFOLD(0(DI)(R8*2)) \
	CMPQ R13, $3 \
	JLE done \
	ADDQ DX, SI \
	YFOLD(0(R12)) \
done: \
	VZEROUPPER \
	RET

// FOLD8 folds the eight lanes of Y2, a[l] + a[l+8] of a row's 32, as
// reduce does (a[l] + a[l+4], then (a0+a2) + (a1+a3)), and stores the
// result at (SI). Clobbers Y3.
#define FOLD8 \
	VEXTRACTF128 $1, Y2, X3 \
	VADDPS X3, X2, X2 \
	VMOVHLPS X2, X2, X3 \
	VADDPS X3, X2, X2 \
	VMOVSHDUP X2, X3 \
	VADDSS X3, X2, X2 \
	VMOVSS X2, (SI)

// YFOLD folds the 32 lanes at ACC (a memory operand) into (SI):
// a[l] + a[l+16], then a[l] + a[l+8], then FOLD8. Clobbers Y0-Y3.
#define YFOLD(ACC) \
	VMOVUPS 0+ACC, Y0 \
	VMOVUPS 32+ACC, Y1 \
	VADDPS 64+ACC, Y0, Y0 \
	VADDPS 96+ACC, Y1, Y1 \
	VADDPS Y1, Y0, Y2 \
	FOLD8

// Float row kernels (AVX-512): one to four activation rows times a run
// of weight rows, each weight row whole in one call: its whole chunks of
// 32 elements, then, where mask is not zero, one more whose weights are
// loaded under mask (bit i: element i of the chunk is in the row), the
// others zero and never read, so a row may end anywhere, even at the end
// of its memory. The activation rows are zero past the row's end, so the
// partial chunk adds +0 to its lanes past the end, which leaves them as
// they are (a lane is never −0): the row kernel's zero-padded tail chunk,
// to the bit. Per weight row the accumulators start
// at zero, each chunk's weights are widened once for all the activation
// rows, and each row's 32 lanes are folded as ZFOLD does at the end: the
// band kernels' arithmetic (row j's lanes 0-15 in Z16+2j, 16-31 in
// Z17+2j), so every result is the row kernel's to the bit, without a
// call, an accumulator store and reload per weight row.
//
// SI the output cursor, DX the bytes between activation rows' outputs,
// R14 the weight row, R8 the weight rows' stride, AX the activation rows
// (R9 apart, R10 = 3·R9), R11 the chunks, R13 the weight rows left; BX
// and R12 the chunk cursors, CX the chunk count, DI the row's output;
// K1, K2 the tail mask's halves.

#define ZR_ZERO1 \
	VXORPS Z16, Z16, Z16 \
	VXORPS Z17, Z17, Z17

#define ZR_ZERO2 \
	ZR_ZERO1 \
	VXORPS Z18, Z18, Z18 \
	VXORPS Z19, Z19, Z19

#define ZR_ZERO3 \
	ZR_ZERO2 \
	VXORPS Z20, Z20, Z20 \
	VXORPS Z21, Z21, Z21

#define ZR_ZERO4 \
	ZR_ZERO3 \
	VXORPS Z22, Z22, Z22 \
	VXORPS Z23, Z23, Z23

#define ZR_ROWS1(ROW) \
	ROW((R12), Z16, Z17)

#define ZR_ROWS2(ROW) \
	ZR_ROWS1(ROW) \
	ROW((R12)(R9*1), Z18, Z19)

#define ZR_ROWS3(ROW) \
	ZR_ROWS2(ROW) \
	ROW((R12)(R9*2), Z20, Z21)

#define ZR_ROWS4(ROW) \
	ZR_ROWS3(ROW) \
	ROW((R12)(R10*1), Z22, Z23)

// Rows 4 to 7 are read through R15, the chunk cursor four rows on.
#define ZR_ZERO5 \
	ZR_ZERO4 \
	VXORPS Z24, Z24, Z24 \
	VXORPS Z25, Z25, Z25

#define ZR_ZERO6 \
	ZR_ZERO5 \
	VXORPS Z26, Z26, Z26 \
	VXORPS Z27, Z27, Z27

#define ZR_ZERO7 \
	ZR_ZERO6 \
	VXORPS Z28, Z28, Z28 \
	VXORPS Z29, Z29, Z29

#define ZR_ZERO8 \
	ZR_ZERO7 \
	VXORPS Z30, Z30, Z30 \
	VXORPS Z31, Z31, Z31

#define ZR_ROWS5(ROW) \
	ZR_ROWS4(ROW) \
	ROW((R15), Z24, Z25)

#define ZR_ROWS6(ROW) \
	ZR_ROWS5(ROW) \
	ROW((R15)(R9*1), Z26, Z27)

#define ZR_ROWS7(ROW) \
	ZR_ROWS6(ROW) \
	ROW((R15)(R9*2), Z28, Z29)

#define ZR_ROWS8(ROW) \
	ZR_ROWS7(ROW) \
	ROW((R15)(R10*1), Z30, Z31)

#define ZR_FOLD1 \
	ZFOLD(Z16, Z17)

#define ZR_FOLD2 \
	ZR_FOLD1 \
	ADDQ DX, SI \
	ZFOLD(Z18, Z19)

#define ZR_FOLD3 \
	ZR_FOLD2 \
	ADDQ DX, SI \
	ZFOLD(Z20, Z21)

#define ZR_FOLD4 \
	ZR_FOLD3 \
	ADDQ DX, SI \
	ZFOLD(Z22, Z23)

#define ZR_FOLD5 \
	ZR_FOLD4 \
	ADDQ DX, SI \
	ZFOLD(Z24, Z25)

#define ZR_FOLD6 \
	ZR_FOLD5 \
	ADDQ DX, SI \
	ZFOLD(Z26, Z27)

#define ZR_FOLD7 \
	ZR_FOLD6 \
	ADDQ DX, SI \
	ZFOLD(Z28, Z29)

#define ZR_FOLD8 \
	ZR_FOLD7 \
	ADDQ DX, SI \
	ZFOLD(Z30, Z31)

// ZR_NEAR and ZR_NEXT keep no second cursor (one to four rows);
// ZR_FAR and ZR_ADVANCE keep R15 four rows on from R12.
#define ZR_NEAR
#define ZR_NEXT
#define ZR_FAR LEAQ (AX)(R9*4), R15
#define ZR_ADVANCE ADDQ $128, R15

#define ZROWS(ZERO, ROWS, FOLD, ES, WIDEN, TWIDEN, ROW, CUR, STEP) \
	MOVQ out+0(FP), SI \
	MOVQ os+8(FP), DX \
	MOVQ w+16(FP), R14 \
	MOVQ rs+24(FP), R8 \
	MOVQ x+32(FP), AX \
	MOVQ xs+40(FP), R9 \
	MOVQ chunks+48(FP), R11 \
	MOVQ rows+56(FP), R13 \
	MOVL mask+64(FP), CX \
	KMOVW CX, K1 \
	SHRL $16, CX \
	KMOVW CX, K2 \
	LEAQ (R9)(R9*2), R10 \
zrow: \
	ZERO \
	MOVQ R14, BX \
	MOVQ AX, R12 \
	CUR \
	MOVQ R11, CX \
	TESTQ CX, CX \
	JZ ztail \
zchunk: \
	WIDEN(0, Z0) \
	WIDEN(16*ES, Z1) \
	ROWS(ROW) \
	ADDQ $(32*ES), BX \
	ADDQ $128, R12 \
	STEP \
	DECQ CX \
	JNZ zchunk \
ztail: \
	KORTESTW K1, K1 \
	JZ zfold \
	TWIDEN(0, Z0, K1) \
	TWIDEN(16*ES, Z1, K2) \
	ROWS(ROW) \
zfold: \
	MOVQ SI, DI \
	FOLD \
	LEAQ 4(DI), SI \
	ADDQ R8, R14 \
	DECQ R13 \
	JNZ zrow \
	VZEROUPPER \
	RET

// func f16Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·f16Band4(SB), NOSPLIT, $0-72
	BAND4(2, WF16, FMA)

// func bf16Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·bf16Band4(SB), NOSPLIT, $0-72
	BAND4(2, WBF16, MULADD)

// func f32Band4(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·f32Band4(SB), NOSPLIT, $0-72
	BAND4(4, WF32, MULADD)

// The AVX-512 kernels take all 32 lanes of the four rows in one pass:
// row j's lanes 0-15 in Z16+2j, 16-31 in Z17+2j; Z0, Z1 the weights,
// Z2, Z3 the products. The lanes' arithmetic is the AVX2 kernels'.

#define ZF16(OFF, Z) VCVTPH2PS OFF(BX), Z

#define ZBF16(OFF, Z) \
	VPMOVZXWD OFF(BX), Z \
	VPSLLD $16, Z, Z

#define ZF32(OFF, Z) VMOVUPS OFF(BX), Z

// ZTF16, ZTBF16 and ZTF32 widen the weights at OFF(BX) into D under
// mask K: the masked-off ones are zero and not read.
#define ZTF16(OFF, D, K) \
	VMOVDQU16.Z OFF(BX), K, Y2 \
	VCVTPH2PS Y2, D

#define ZTBF16(OFF, D, K) \
	VMOVDQU16.Z OFF(BX), K, Y2 \
	VPMOVZXWD Y2, D \
	VPSLLD $16, D, D

#define ZTF32(OFF, D, K) VMOVUPS.Z OFF(BX), K, D

#define ZMULADD(X, A0, A1) \
	VMULPS 0 X, Z0, Z2 \
	VADDPS Z2, A0, A0 \
	VMULPS 64 X, Z1, Z3 \
	VADDPS Z3, A1, A1

#define ZFMA(X, A0, A1) \
	VFMADD231PS 0 X, Z0, A0 \
	VFMADD231PS 64 X, Z1, A1

#define ZBAND4(ES, WIDEN, ROW) \
	MOVQ acc+0(FP), DI \
	MOVQ as+8(FP), R8 \
	MOVQ w+16(FP), BX \
	MOVQ x+24(FP), AX \
	MOVQ xs+32(FP), R9 \
	MOVQ chunks+40(FP), CX \
	LEAQ (R9)(R9*2), R10 \
	LEAQ (R8)(R8*2), R12 \
	ADDQ DI, R12 \
	VMOVUPS 0(DI), Z16 \
	VMOVUPS 64(DI), Z17 \
	VMOVUPS 0(DI)(R8*1), Z18 \
	VMOVUPS 64(DI)(R8*1), Z19 \
	VMOVUPS 0(DI)(R8*2), Z20 \
	VMOVUPS 64(DI)(R8*2), Z21 \
	VMOVUPS 0(R12), Z22 \
	VMOVUPS 64(R12), Z23 \
zloop: \
	WIDEN(0, Z0) \
	WIDEN(16*ES, Z1) \
	ROW((AX), Z16, Z17) \
	ROW((AX)(R9*1), Z18, Z19) \
	ROW((AX)(R9*2), Z20, Z21) \
	ROW((AX)(R10*1), Z22, Z23) \
	ADDQ $(32*ES), BX \
	ADDQ $128, AX \
	DECQ CX \
	JNZ zloop \
	MOVQ out+48(FP), SI \
	TESTQ SI, SI \
	JNZ fold \
	VMOVUPS Z16, 0(DI) \
	VMOVUPS Z17, 64(DI) \
	VMOVUPS Z18, 0(DI)(R8*1) \
	VMOVUPS Z19, 64(DI)(R8*1) \
	VMOVUPS Z20, 0(DI)(R8*2) \
	VMOVUPS Z21, 64(DI)(R8*2) \
	VMOVUPS Z22, 0(R12) \
	VMOVUPS Z23, 64(R12) \
	VZEROUPPER \
	RET \
fold: \
	MOVQ os+56(FP), DX \
	MOVQ live+64(FP), R13 \
	ZFOLD(Z16, Z17) \
	CMPQ R13, $1 \
	JLE done \
	ADDQ DX, SI \
	ZFOLD(Z18, Z19) \
	CMPQ R13, $2 \
	JLE done \
	ADDQ DX, SI \
	ZFOLD(Z20, Z21) \
	CMPQ R13, $3 \
	JLE done \
	ADDQ DX, SI \
	ZFOLD(Z22, Z23) \
done: \
	VZEROUPPER \
	RET

// ZFOLD folds a row's 32 lanes, 0-15 in A0 and 16-31 in A1, into (SI):
// a[l] + a[l+16], then a[l] + a[l+8], then FOLD8. Clobbers Z2, Z3.
#define ZFOLD(A0, A1) \
	VADDPS A1, A0, Z2 \
	VEXTRACTF64X4 $1, Z2, Y3 \
	VADDPS Y3, Y2, Y2 \
	FOLD8

// func f16Band4Z(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·f16Band4Z(SB), NOSPLIT, $0-72
	ZBAND4(2, ZF16, ZFMA)

// func bf16Band4Z(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·bf16Band4Z(SB), NOSPLIT, $0-72
	ZBAND4(2, ZBF16, ZMULADD)

// func f32Band4Z(acc *float32, as int, w *byte, x *float32, xs, chunks int, out *float32, os, live int)
TEXT ·f32Band4Z(SB), NOSPLIT, $0-72
	ZBAND4(4, ZF32, ZMULADD)

// func f16Rows1Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows1Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO1, ZR_ROWS1, ZR_FOLD1, 2, ZF16, ZTF16, ZFMA, ZR_NEAR, ZR_NEXT)

// func f16Rows2Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows2Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO2, ZR_ROWS2, ZR_FOLD2, 2, ZF16, ZTF16, ZFMA, ZR_NEAR, ZR_NEXT)

// func f16Rows3Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows3Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO3, ZR_ROWS3, ZR_FOLD3, 2, ZF16, ZTF16, ZFMA, ZR_NEAR, ZR_NEXT)

// func f16Rows4Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows4Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO4, ZR_ROWS4, ZR_FOLD4, 2, ZF16, ZTF16, ZFMA, ZR_NEAR, ZR_NEXT)

// func f16Rows5Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows5Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO5, ZR_ROWS5, ZR_FOLD5, 2, ZF16, ZTF16, ZFMA, ZR_FAR, ZR_ADVANCE)

// func f16Rows6Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows6Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO6, ZR_ROWS6, ZR_FOLD6, 2, ZF16, ZTF16, ZFMA, ZR_FAR, ZR_ADVANCE)

// func f16Rows7Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows7Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO7, ZR_ROWS7, ZR_FOLD7, 2, ZF16, ZTF16, ZFMA, ZR_FAR, ZR_ADVANCE)

// func f16Rows8Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f16Rows8Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO8, ZR_ROWS8, ZR_FOLD8, 2, ZF16, ZTF16, ZFMA, ZR_FAR, ZR_ADVANCE)

// func bf16Rows1Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows1Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO1, ZR_ROWS1, ZR_FOLD1, 2, ZBF16, ZTBF16, ZMULADD, ZR_NEAR, ZR_NEXT)

// func bf16Rows2Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows2Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO2, ZR_ROWS2, ZR_FOLD2, 2, ZBF16, ZTBF16, ZMULADD, ZR_NEAR, ZR_NEXT)

// func bf16Rows3Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows3Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO3, ZR_ROWS3, ZR_FOLD3, 2, ZBF16, ZTBF16, ZMULADD, ZR_NEAR, ZR_NEXT)

// func bf16Rows4Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows4Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO4, ZR_ROWS4, ZR_FOLD4, 2, ZBF16, ZTBF16, ZMULADD, ZR_NEAR, ZR_NEXT)

// func bf16Rows5Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows5Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO5, ZR_ROWS5, ZR_FOLD5, 2, ZBF16, ZTBF16, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func bf16Rows6Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows6Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO6, ZR_ROWS6, ZR_FOLD6, 2, ZBF16, ZTBF16, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func bf16Rows7Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows7Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO7, ZR_ROWS7, ZR_FOLD7, 2, ZBF16, ZTBF16, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func bf16Rows8Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·bf16Rows8Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO8, ZR_ROWS8, ZR_FOLD8, 2, ZBF16, ZTBF16, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func f32Rows1Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows1Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO1, ZR_ROWS1, ZR_FOLD1, 4, ZF32, ZTF32, ZMULADD, ZR_NEAR, ZR_NEXT)

// func f32Rows2Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows2Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO2, ZR_ROWS2, ZR_FOLD2, 4, ZF32, ZTF32, ZMULADD, ZR_NEAR, ZR_NEXT)

// func f32Rows3Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows3Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO3, ZR_ROWS3, ZR_FOLD3, 4, ZF32, ZTF32, ZMULADD, ZR_NEAR, ZR_NEXT)

// func f32Rows4Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows4Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO4, ZR_ROWS4, ZR_FOLD4, 4, ZF32, ZTF32, ZMULADD, ZR_NEAR, ZR_NEXT)

// func f32Rows5Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows5Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO5, ZR_ROWS5, ZR_FOLD5, 4, ZF32, ZTF32, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func f32Rows6Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows6Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO6, ZR_ROWS6, ZR_FOLD6, 4, ZF32, ZTF32, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func f32Rows7Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows7Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO7, ZR_ROWS7, ZR_FOLD7, 4, ZF32, ZTF32, ZMULADD, ZR_FAR, ZR_ADVANCE)

// func f32Rows8Z(out *float32, os int, w *byte, rs int, x *float32, xs, chunks, rows int, mask uint32)
TEXT ·f32Rows8Z(SB), NOSPLIT, $0-68
	ZROWS(ZR_ZERO8, ZR_ROWS8, ZR_FOLD8, 4, ZF32, ZTF32, ZMULADD, ZR_FAR, ZR_ADVANCE)
