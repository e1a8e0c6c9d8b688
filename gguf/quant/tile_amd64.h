// Macros shared by the AVX2 tile kernels (tile_simd.go): eight weight
// rows, repacked so that the 32 bytes of a group hold four elements of
// each row, times one activation row. Y8-Y15 hold acc's lanes 0-7 (one
// vector per lane, row r in element r); DI is acc, SI the repacked
// blocks, DX the activation blocks, R8 their per-block figures, CX the
// block count, R9 out.

// TILEARGS loads the arguments and the accumulators.
#define TILEARGS \
	TILEARGSK \
	TILEACC

#define TILEARGSK \
	MOVQ acc+0(FP), DI \
	MOVQ w+8(FP), SI \
	MOVQ y+16(FP), DX \
	MOVQ aux+24(FP), R8 \
	MOVQ blocks+32(FP), CX \
	MOVQ out+40(FP), R9

#define TILEACC \
	VMOVUPS 0(DI), Y8 \
	VMOVUPS 32(DI), Y9 \
	VMOVUPS 64(DI), Y10 \
	VMOVUPS 96(DI), Y11 \
	VMOVUPS 128(DI), Y12 \
	VMOVUPS 160(DI), Y13 \
	VMOVUPS 192(DI), Y14 \
	VMOVUPS 224(DI), Y15

// TILELOOP runs TBLOCK(j, acc) over the blocks, eight a round (block j of
// a round to lane j), then the last blocks one by one; each block is WS
// bytes repacked, YS bytes of activation and XS bytes of figures. Then it
// stores the accumulators, or with out set reduces each row's lanes by
// halving (lane j += lane j+w for w = 4, 2, 1) and stores the eight rows'
// results to out; and returns. Once per function.
#define TILELOOP(WS, YS, XS) \
	CMPQ CX, $8 \
	JLT  tail \
loop: \
	TBLOCK(0, Y8) \
	TBLOCK(1, Y9) \
	TBLOCK(2, Y10) \
	TBLOCK(3, Y11) \
	TBLOCK(4, Y12) \
	TBLOCK(5, Y13) \
	TBLOCK(6, Y14) \
	TBLOCK(7, Y15) \
	ADDQ $(8*WS), SI \
	ADDQ $(8*YS), DX \
	ADDQ $(8*XS), R8 \
	SUBQ $8, CX \
	CMPQ CX, $8 \
	JGE  loop \
tail: \
	CMPQ CX, $1 \
	JLT  done \
	TBLOCK(0, Y8) \
	CMPQ CX, $2 \
	JLT  done \
	TBLOCK(1, Y9) \
	CMPQ CX, $3 \
	JLT  done \
	TBLOCK(2, Y10) \
	CMPQ CX, $4 \
	JLT  done \
	TBLOCK(3, Y11) \
	CMPQ CX, $5 \
	JLT  done \
	TBLOCK(4, Y12) \
	CMPQ CX, $6 \
	JLT  done \
	TBLOCK(5, Y13) \
	CMPQ CX, $7 \
	JLT  done \
	TBLOCK(6, Y14) \
done: \
	TESTQ R9, R9 \
	JZ    keep \
	TILEOUT \
	VZEROUPPER \
	RET \
keep: \
	VMOVUPS Y8, 0(DI) \
	VMOVUPS Y9, 32(DI) \
	VMOVUPS Y10, 64(DI) \
	VMOVUPS Y11, 96(DI) \
	VMOVUPS Y12, 128(DI) \
	VMOVUPS Y13, 160(DI) \
	VMOVUPS Y14, 192(DI) \
	VMOVUPS Y15, 224(DI) \
	VZEROUPPER \
	RET

// HALVES loads the 32 activation bytes at Y(DX) as two vectors, bytes
// 0-15 in both lanes of A0 and 16-31 in both lanes of A1, for NIB8: one
// load a half and a VPSHUFD a group, rather than a broadcast load a
// group, keep the loads (the kernels' limit) to one a group.
#define HALVES(Y, A0, A1) \
	VBROADCASTI128 (Y)(DX), A0 \
	VBROADCASTI128 (Y+16)(DX), A1

// TILEOUT reduces each row's lanes in Y8-Y15 by halving (lane j +=
// lane j+w for w = 4, 2, 1) and stores the eight rows' results to out
// (R9).
#define TILEOUT \
	VADDPS Y12, Y8, Y8 \
	VADDPS Y13, Y9, Y9 \
	VADDPS Y14, Y10, Y10 \
	VADDPS Y15, Y11, Y11 \
	VADDPS Y10, Y8, Y8 \
	VADDPS Y11, Y9, Y9 \
	VADDPS Y9, Y8, Y8 \
	VMOVUPS Y8, (R9)

// NIB8(W, A0, A1, S) leaves in S (int16 lanes, two per row) Σ n·y over
// the 32 elements of a block whose unsigned quants n < 16 are repacked at
// W(SI) and whose activation bytes are in A0, A1 (HALVES): VPMADDUBSW
// pairs are at most 2·15·128 in size, so eight of them add up exactly in
// int16. Clobbers Y0, Y1.
#define NIB8(W, A0, A1, S) \
	VMOVDQU (W)(SI), S \
	VPSHUFD $0x00, A0, Y1 \
	VPMADDUBSW Y1, S, S \
	NIBGROUP(W+32, A0, 0x55, S) \
	NIBGROUP(W+64, A0, 0xaa, S) \
	NIBGROUP(W+96, A0, 0xff, S) \
	NIBGROUP(W+128, A1, 0x00, S) \
	NIBGROUP(W+160, A1, 0x55, S) \
	NIBGROUP(W+192, A1, 0xaa, S) \
	NIBGROUP(W+224, A1, 0xff, S)

#define NIBGROUP(W, A, SEL, S) \
	VMOVDQU (W)(SI), Y0 \
	VPSHUFD $SEL, A, Y1 \
	VPMADDUBSW Y1, Y0, Y0 \
	VPADDW Y0, S, S

// SCALEADD converts the int32 sums in S to float32 and adds S × (dx × dy)
// to ACC, each product rounded as the Go kernels do; the eight rows' dx
// are at DX(SI), the activation's dy at DY(R8). Clobbers Y3.
#define SCALEADD(S, DX, DY, ACC) \
	VCVTDQ2PS S, S \
	VBROADCASTSS (DY)(R8), Y3 \
	VMULPS (DX)(SI), Y3, Y3 \
	VMULPS Y3, S, S \
	VADDPS S, ACC, ACC

// Repacking (the pack functions of tile_simd.go): DI is dst, SI block b0
// of row 0, CX the block count; ROWPTRS sets R9 = rs, R10 = 3rs,
// R11 = 5rs, R12 = 7rs, so that ROW(r, OFF) addresses byte OFF of row r's
// block.
#define PACKARGS \
	MOVQ dst+0(FP), DI \
	MOVQ w+8(FP), SI \
	MOVQ rs+16(FP), R9 \
	MOVQ blocks+24(FP), CX \
	LEAQ (R9)(R9*2), R10 \
	LEAQ (R9)(R9*4), R11 \
	LEAQ (R10)(R9*4), R12

// ROWS8(M, A, B, C, D) runs M(Yr, Xr, ROWr, A, B, C, D) for the eight
// rows, leaving row r's vector in Yr (Xr its low half), for TRANSPOSE8.
#define ROWS8(M, A, B, C, D) \
	M(Y0, X0, ROW0, A, B, C, D) \
	M(Y1, X1, ROW1, A, B, C, D) \
	M(Y2, X2, ROW2, A, B, C, D) \
	M(Y3, X3, ROW3, A, B, C, D) \
	M(Y4, X4, ROW4, A, B, C, D) \
	M(Y5, X5, ROW5, A, B, C, D) \
	M(Y6, X6, ROW6, A, B, C, D) \
	M(Y7, X7, ROW7, A, B, C, D)

#define ROW0(OFF) (OFF)(SI)
#define ROW1(OFF) (OFF)(SI)(R9*1)
#define ROW2(OFF) (OFF)(SI)(R9*2)
#define ROW3(OFF) (OFF)(SI)(R10*1)
#define ROW4(OFF) (OFF)(SI)(R9*4)
#define ROW5(OFF) (OFF)(SI)(R11*1)
#define ROW6(OFF) (OFF)(SI)(R10*2)
#define ROW7(OFF) (OFF)(SI)(R12*1)

// TRANSPOSE8 turns Y0..Y7, eight rows of eight dwords, into groups: dword
// k of every row, row r in dword r, stored at OFF+32k(DI). Clobbers Y0-Y15.
#define TRANSPOSE8(OFF) TRANSPOSE8S(OFF, 32)

// TRANSPOSE8S is TRANSPOSE8 with the groups stored S bytes apart, at
// OFF+S·k(DI): S = 64 leaves room beside each for eight more rows' (the
// sixteen-row tiles of tile_z_amd64.s).
#define TRANSPOSE8S(OFF, S) \
	VPUNPCKLDQ Y1, Y0, Y8 \
	VPUNPCKHDQ Y1, Y0, Y9 \
	VPUNPCKLDQ Y3, Y2, Y10 \
	VPUNPCKHDQ Y3, Y2, Y11 \
	VPUNPCKLDQ Y5, Y4, Y12 \
	VPUNPCKHDQ Y5, Y4, Y13 \
	VPUNPCKLDQ Y7, Y6, Y14 \
	VPUNPCKHDQ Y7, Y6, Y15 \
	VPUNPCKLQDQ Y10, Y8, Y0 \
	VPUNPCKHQDQ Y10, Y8, Y1 \
	VPUNPCKLQDQ Y11, Y9, Y2 \
	VPUNPCKHQDQ Y11, Y9, Y3 \
	VPUNPCKLQDQ Y14, Y12, Y4 \
	VPUNPCKHQDQ Y14, Y12, Y5 \
	VPUNPCKLQDQ Y15, Y13, Y6 \
	VPUNPCKHQDQ Y15, Y13, Y7 \
	VPERM2I128 $0x20, Y4, Y0, Y8 \
	VMOVDQU Y8, (OFF)(DI) \
	VPERM2I128 $0x20, Y5, Y1, Y8 \
	VMOVDQU Y8, (OFF+1*(S))(DI) \
	VPERM2I128 $0x20, Y6, Y2, Y8 \
	VMOVDQU Y8, (OFF+2*(S))(DI) \
	VPERM2I128 $0x20, Y7, Y3, Y8 \
	VMOVDQU Y8, (OFF+3*(S))(DI) \
	VPERM2I128 $0x31, Y4, Y0, Y8 \
	VMOVDQU Y8, (OFF+4*(S))(DI) \
	VPERM2I128 $0x31, Y5, Y1, Y8 \
	VMOVDQU Y8, (OFF+5*(S))(DI) \
	VPERM2I128 $0x31, Y6, Y2, Y8 \
	VMOVDQU Y8, (OFF+6*(S))(DI) \
	VPERM2I128 $0x31, Y7, Y3, Y8 \
	VMOVDQU Y8, (OFF+7*(S))(DI)

// HALVES8H gathers the fp16 at byte H of the eight rows' blocks into X0.
// Clobbers AX.
#define HALVES8H(H) \
	MOVWLZX ROW0(H), AX \
	VMOVD AX, X0 \
	MOVWLZX ROW1(H), AX \
	VPINSRW $1, AX, X0, X0 \
	MOVWLZX ROW2(H), AX \
	VPINSRW $2, AX, X0, X0 \
	MOVWLZX ROW3(H), AX \
	VPINSRW $3, AX, X0, X0 \
	MOVWLZX ROW4(H), AX \
	VPINSRW $4, AX, X0, X0 \
	MOVWLZX ROW5(H), AX \
	VPINSRW $5, AX, X0, X0 \
	MOVWLZX ROW6(H), AX \
	VPINSRW $6, AX, X0, X0 \
	MOVWLZX ROW7(H), AX \
	VPINSRW $7, AX, X0, X0

// HALVES8 stores as float32 at OFF(DI) the fp16 at byte H of the eight
// rows' blocks. Clobbers AX, X0.
#define HALVES8(H, OFF) \
	HALVES8H(H) \
	VCVTPH2PS X0, Y0 \
	VMOVUPS Y0, (OFF)(DI)

// A K-quant tile kernel (TILEARGSK, TILELOOPK) keeps its accumulators in
// acc (DI) rather than Y8-Y15: block k's partials, left by KBLOCK in Y2,
// are added to lane k mod 8 at 32·(k mod 8)(DI) (R13). Then as TILELOOP.
// Once per function.
#define TILELOOPK(WS, YS, XS) \
	XORQ R13, R13 \
	TESTQ CX, CX \
	JZ    done \
loop: \
	KBLOCK \
	VADDPS (DI)(R13*1), Y2, Y2 \
	VMOVUPS Y2, (DI)(R13*1) \
	ADDQ $32, R13 \
	ANDQ $255, R13 \
	ADDQ $WS, SI \
	ADDQ $YS, DX \
	ADDQ $XS, R8 \
	DECQ CX \
	JNZ  loop \
done: \
	TESTQ R9, R9 \
	JZ    ret \
	TILEACC \
	TILEOUT \
ret: \
	VZEROUPPER \
	RET

// Band kernels (tile_z_amd64.s, tile_y_amd64.s: bandKernel of
// tile_simd.go), whose arguments are acc, w (repacked), y (activation
// row 0's first block; row i at y + i·ys), aux (its figures; row i at
// aux + i·xs), ys, xs, blocks, lane, out (row i's results at out + i·os
// after the last chunk, else nil), os, and pf, pfLines, pfSpan, pfSkip
// and pfCol (see BANDLOOP). BANDARGS loads them: DI acc, SI w, DX y, R8
// aux, R10 ys, R11 3·ys, R12 xs, R13 3·xs, CX blocks, AX the lane's byte
// offset in acc (lane << LSHIFT), R9 out, R14 pf, R15 pfCol; BANDLOOP
// reads pfLines, pfSpan and pfSkip from the frame, counts lines in BX,
// and loads os into BX after the loop.
#define BANDARGS(LSHIFT) \
	MOVQ acc+0(FP), DI \
	MOVQ w+8(FP), SI \
	MOVQ y+16(FP), DX \
	MOVQ aux+24(FP), R8 \
	MOVQ ys+32(FP), R10 \
	LEAQ (R10)(R10*2), R11 \
	MOVQ xs+40(FP), R12 \
	LEAQ (R12)(R12*2), R13 \
	MOVQ blocks+48(FP), CX \
	MOVQ lane+56(FP), AX \
	SHLQ $LSHIFT, AX \
	MOVQ out+64(FP), R9 \
	MOVQ pf+80(FP), R14 \
	MOVQ pfCol+112(FP), R15

// Activation row i's bytes (YRi) and figures (FGi) at OFF.
#define YR0(OFF) OFF(DX)
#define YR1(OFF) OFF(DX)(R10*1)
#define YR2(OFF) OFF(DX)(R10*2)
#define YR3(OFF) OFF(DX)(R11*1)
#define YR4(OFF) OFF(DX)(R10*4)
#define YR6(OFF) OFF(DX)(R11*2)
#define YR8(OFF) OFF(DX)(R10*8)
#define FG0(OFF) OFF(R8)
#define FG1(OFF) OFF(R8)(R12*1)
#define FG2(OFF) OFF(R8)(R12*2)
#define FG3(OFF) OFF(R8)(R13*1)
#define FG4(OFF) OFF(R8)(R12*4)
#define FG6(OFF) OFF(R8)(R13*2)
#define FG8(OFF) OFF(R8)(R12*8)

// Rows 5 and 7 (5·ys, 7·ys) have no addressing mode of DX and the
// strides: BX, free within a block (BANDLOOP counts the asks in it
// before the block, and loads os into it after the loop), holds row 4's
// address (Y4 in BX) or its figures' (X4 in BX) while a row's
// instructions take them as BX + ys or 3·ys (YB5, YB7), BX + xs or 3·xs
// (XB5, XB7).
#define Y4BX LEAQ (DX)(R10*4), BX
#define X4BX LEAQ (R8)(R12*4), BX
#define YB5(OFF) OFF(BX)(R10*1)
#define YB7(OFF) OFF(BX)(R11*1)
#define XB5(OFF) OFF(BX)(R12*1)
#define XB7(OFF) OFF(BX)(R13*1)

// BANDLOOP runs BLOCK (which loads its own weights) over the blocks, WS
// bytes repacked, YS of activation and XS of figures a block, each to
// the next lane, LANE bytes of acc apart (eight lanes), then with out set
// stores the results that OUTS reduces; and returns. Once per function.
// Before each block it asks for pfLines lines from pf on into L2
// (PREFETCHT1), pf moving on a line at a time and, after every pfSpan
// lines (counted from pfCol), on by pfSkip more: the weights the caller
// reads next, in rows of pfSpan lines pfSkip apart, requested a few at a
// time while this block's arithmetic runs, so that reading overlaps it
// where the weights stream from memory (matMulBand). R14 and R15 are
// free here: these are ABI0 functions, whose callers' wrappers restore
// R14, and no global is read.
#define BANDLOOP(WS, YS, XS, LANE, BLOCK, OUTS) \
	TESTQ CX, CX \
	JZ    done \
loop: \
	MOVQ pfLines+88(FP), BX \
	TESTQ BX, BX \
	JZ    pfdone \
pfline: \
	PREFETCHT1 (R14) \
	ADDQ $64, R14 \
	INCQ R15 \
	CMPQ R15, pfSpan+96(FP) \
	JNE  pfnext \
	XORQ R15, R15 \
	ADDQ pfSkip+104(FP), R14 \
pfnext: \
	DECQ BX \
	JNZ  pfline \
pfdone: \
	BLOCK \
	ADDQ $WS, SI \
	ADDQ $YS, DX \
	ADDQ $XS, R8 \
	ADDQ $LANE, AX \
	ANDQ $(8*LANE-1), AX \
	DECQ CX \
	JNZ  loop \
done: \
	TESTQ R9, R9 \
	JZ    ret \
	MOVQ os+72(FP), BX \
	OUTS \
ret: \
	VZEROUPPER \
	RET
