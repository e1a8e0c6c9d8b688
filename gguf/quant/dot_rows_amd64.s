//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// Whole-row float dot products over many rows (rowsF16, rowsF32): the
// chunks of 32 elements as f16x32/f32x32 do them, the last partial chunk
// copied into a zeroed buffer and done as one more (its zero elements
// meet the activation's zero padding: their products are +0, which leave
// an accumulator lane as it is, since no lane is ever −0), then the lanes
// reduced as reduce does. So each result is dotF16's (dotF32's) to the
// bit, without a call, a Go tail and a Go reduce per row: attention runs
// these on rows of a few dozen elements.

// REDUCE32 folds the lanes in Y12-Y15 (0-7 .. 24-31) by halving, lane l
// += lane l+w for w = 16, 8, 4, 2, 1, into X12's lowest float.
#define REDUCE32 \
	VADDPS Y14, Y12, Y12 \
	VADDPS Y15, Y13, Y13 \
	VADDPS Y13, Y12, Y12 \
	VEXTRACTF128 $1, Y12, X1 \
	VADDPS X1, X12, X12 \
	VMOVHLPS X12, X12, X1 \
	VADDPS X1, X12, X12 \
	VMOVSHDUP X12, X1 \
	VADDSS X1, X12, X12

// ROWS is the loop over rows: R8 the row, R9 the stride, R10 the
// activation, R12 its whole chunks, R11 its tail elements, R13 the
// activation's zero-padded tail, SP a 128-byte buffer; CHUNK is a chunk's
// bytes, LANES(off, acc) adds the products of eight elements at off to an
// accumulator, TAILCOPY(SI) copies a row's tail from SI to the buffer.
// A tail of 8, 16 or 24 elements (a head of 48 or 80 dimensions) is read
// in place, eight at a time, and the zero lanes beyond it are not added:
// they would add +0 to lanes that are never −0, so the bits are the
// copied tail's, without the copy (whose narrow reloads of a wide store
// stall) and the adds of zeros.
#define ROWS(CHUNK, LANES, TAILCOPY) \
row: \
	VXORPS Y12, Y12, Y12 \
	VXORPS Y13, Y13, Y13 \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y15, Y15, Y15 \
	MOVQ R8, SI \
	MOVQ R10, DX \
	MOVQ R12, CX \
	TESTQ CX, CX \
	JZ   tail \
chunk: \
	LANES(0, Y12) \
	LANES(CHUNK/4, Y13) \
	LANES(CHUNK/2, Y14) \
	LANES(3*CHUNK/4, Y15) \
	ADDQ $CHUNK, SI \
	ADDQ $CHUNK, DX \
	DECQ CX \
	JNZ  chunk \
tail: \
	TESTQ R11, R11 \
	JZ   reduce \
	TESTQ $7, R11 \
	JZ   eights \
	TAILCOPY(SI) \
	MOVQ SP, SI \
	MOVQ R13, DX \
	LANES(0, Y12) \
	LANES(CHUNK/4, Y13) \
	LANES(CHUNK/2, Y14) \
	LANES(3*CHUNK/4, Y15) \
	JMP  reduce \
eights: \
	LANES(0, Y12) \
	CMPQ R11, $8 \
	JEQ  reduce \
	LANES(CHUNK/4, Y13) \
	CMPQ R11, $16 \
	JEQ  reduce \
	LANES(CHUNK/2, Y14) \
reduce: \
	REDUCE32 \
	VMOVSS X12, (DI) \
	ADDQ $4, DI \
	ADDQ R9, R8 \
	DECQ BX \
	JNZ  row \
	VZEROUPPER \
	RET

#define ARGS \
	MOVQ out+0(FP), DI \
	MOVQ w+8(FP), R8 \
	MOVQ stride+16(FP), R9 \
	MOVQ x+24(FP), R10 \
	MOVQ xtail+32(FP), R13 \
	MOVQ n+40(FP), R11 \
	MOVQ rows+48(FP), BX \
	MOVQ R11, R12 \
	SHRQ $5, R12 \
	ANDQ $31, R11

// COPY(BIT, MOV, REG, SIZE) copies SIZE bytes from AX to CX if the tail
// count (R11) has BIT set.
#define COPY(BIT, MOV, REG, SIZE, SKIP) \
	TESTQ $BIT, R11 \
	JZ   SKIP \
	MOV  (AX), REG \
	MOV  REG, (CX) \
	ADDQ $SIZE, AX \
	ADDQ $SIZE, CX \
SKIP:

#define LANES16(OFF, ACC) \
	VCVTPH2PS OFF(SI), Y0 \
	VCVTPH2PS OFF(DX), Y1 \
	VMULPS Y1, Y0, Y0 \
	VADDPS Y0, ACC, ACC

#define LANES32(OFF, ACC) \
	VMOVUPS OFF(SI), Y0 \
	VMULPS OFF(DX), Y0, Y0 \
	VADDPS Y0, ACC, ACC

// TAIL16 copies up to 31 halves, in pieces of 16, 8, 4, 2 and 1.
#define TAIL16(SRC) \
	VPXOR Y0, Y0, Y0 \
	VMOVDQU Y0, (SP) \
	VMOVDQU Y0, 32(SP) \
	MOVQ SRC, AX \
	MOVQ SP, CX \
	COPY(16, VMOVDQU, Y0, 32, c16) \
	COPY(8, VMOVDQU, X0, 16, c8) \
	COPY(4, MOVQ, DX, 8, c4) \
	COPY(2, MOVL, DX, 4, c2) \
	COPY(1, MOVW, DX, 2, c1)

// TAIL32 copies up to 31 floats, in pieces of 16, 8, 4, 2 and 1.
#define TAIL32(SRC) \
	VXORPS Y0, Y0, Y0 \
	VMOVUPS Y0, (SP) \
	VMOVUPS Y0, 32(SP) \
	VMOVUPS Y0, 64(SP) \
	VMOVUPS Y0, 96(SP) \
	MOVQ SRC, AX \
	MOVQ SP, CX \
	TESTQ $16, R11 \
	JZ   c16 \
	VMOVUPS (AX), Y0 \
	VMOVUPS Y0, (CX) \
	VMOVUPS 32(AX), Y0 \
	VMOVUPS Y0, 32(CX) \
	ADDQ $64, AX \
	ADDQ $64, CX \
c16: \
	COPY(8, VMOVUPS, Y0, 32, c8) \
	COPY(4, VMOVUPS, X0, 16, c4) \
	COPY(2, MOVQ, DX, 8, c2) \
	COPY(1, MOVL, DX, 4, c1)

// func rowsF16(out *float32, w *byte, stride int, x, xtail *byte, n, rows int)
TEXT ·rowsF16(SB), NOSPLIT, $128-56
	ARGS
	ROWS(64, LANES16, TAIL16)

// func rowsF32(out *float32, w *byte, stride int, x, xtail *byte, n, rows int)
TEXT ·rowsF32(SB), NOSPLIT, $128-56
	ARGS
	ROWS(128, LANES32, TAIL32)
