// Macros shared by the NEON tile kernels (tile_simd.go): eight weight
// rows times one activation row. The repacked layout puts rows 0-3 and
// rows 4-7 of a block (or sub-block) in separate runs, where 16 bytes
// hold four elements of each of four rows (row r in bytes 4r..4r+3), so
// that SDOT by element multiplies four activation bytes with four rows
// at once and each row's sum lands in its own lane. The register
// kernels keep acc in V16-V31: lane j of rows 0-3 in V(16+2j), of rows
// 4-7 in V(17+2j). R0 is acc, R1 the repacked blocks (read in order, by
// post-increment), R2 the activation blocks, R3 their per-block figures,
// R4 the block count, R5 out.

// Instructions Go's assembler lacks, by register number (dot_arm64.h has
// the rest). SDOTE and MLAE take an element of Vm by index.
#define SDOTE(d, n, m, i) WORD $(0x4f80e000|((i)&1)<<21|(m)<<16|((i)>>1)<<11|(n)<<5|(d)) // sdot vd.4s, vn.16b, vm.4b[i]
#define MLAE(d, n, m, i)  WORD $(0x6f800000|((i)&1)<<21|(m)<<16|((i)>>1)<<11|(n)<<5|(d)) // mla vd.4s, vn.4s, vm.s[i]
#define SADDLP(d, n)      WORD $(0x4e602800|(n)<<5|(d))                                  // saddlp vd.4s, vn.8h
#define FSUB(d, n, m)     WORD $(0x4ea0d400|(m)<<16|(n)<<5|(d))                          // fsub vd.4s, vn.4s, vm.4s

// TILEARGS loads the arguments; TILEACC also loads the accumulators.
#define TILEARGS \
	MOVD acc+0(FP), R0 \
	MOVD w+8(FP), R1 \
	MOVD y+16(FP), R2 \
	MOVD aux+24(FP), R3 \
	MOVD blocks+32(FP), R4 \
	MOVD out+40(FP), R5

#define TILEACC \
	MOVD R0, R6 \
	VLD1.P 64(R6), [V16.S4, V17.S4, V18.S4, V19.S4] \
	VLD1.P 64(R6), [V20.S4, V21.S4, V22.S4, V23.S4] \
	VLD1.P 64(R6), [V24.S4, V25.S4, V26.S4, V27.S4] \
	VLD1 (R6), [V28.S4, V29.S4, V30.S4, V31.S4]

// TILELOOP runs TBLOCK(lo, hi) over the blocks, lane j of a round of
// eight into V(16+2j), V(17+2j), then the last blocks one by one; TBLOCK
// advances R1-R3 itself. Then it stores the accumulators, or with out set
// reduces each row's lanes by halving (lane j += lane j+w for w = 4, 2,
// 1) and stores the eight rows' results to out; and returns. Once per
// function.
#define TILELOOP \
	CMP  $8, R4 \
	BLT  tail \
loop: \
	TBLOCK(16, 17) \
	TBLOCK(18, 19) \
	TBLOCK(20, 21) \
	TBLOCK(22, 23) \
	TBLOCK(24, 25) \
	TBLOCK(26, 27) \
	TBLOCK(28, 29) \
	TBLOCK(30, 31) \
	SUB  $8, R4 \
	CMP  $8, R4 \
	BGE  loop \
tail: \
	CBZ  R4, done \
	TBLOCK(16, 17) \
	CMP  $2, R4 \
	BLT  done \
	TBLOCK(18, 19) \
	CMP  $3, R4 \
	BLT  done \
	TBLOCK(20, 21) \
	CMP  $4, R4 \
	BLT  done \
	TBLOCK(22, 23) \
	CMP  $5, R4 \
	BLT  done \
	TBLOCK(24, 25) \
	CMP  $6, R4 \
	BLT  done \
	TBLOCK(26, 27) \
	CMP  $7, R4 \
	BLT  done \
	TBLOCK(28, 29) \
done: \
	CBZ  R5, keep \
	TILEOUT \
	RET \
keep: \
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R0) \
	VST1.P [V20.S4, V21.S4, V22.S4, V23.S4], 64(R0) \
	VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R0) \
	VST1 [V28.S4, V29.S4, V30.S4, V31.S4], (R0) \
	RET

// TILEOUT reduces each row's lanes in V16-V31 by halving (lane j +=
// lane j+w for w = 4, 2, 1) and stores the eight rows' results to out
// (R5).
#define TILEOUT \
	FADD(16, 16, 24) \
	FADD(17, 17, 25) \
	FADD(18, 18, 26) \
	FADD(19, 19, 27) \
	FADD(20, 20, 28) \
	FADD(21, 21, 29) \
	FADD(22, 22, 30) \
	FADD(23, 23, 31) \
	FADD(16, 16, 20) \
	FADD(17, 17, 21) \
	FADD(18, 18, 22) \
	FADD(19, 19, 23) \
	FADD(16, 16, 18) \
	FADD(17, 17, 19) \
	VST1 [V16.S4, V17.S4], (R5)

// DOT8(S, A, B) adds to V(S) the dots of the four rows' 32 elements in
// groups at R1 (advanced by 128) with the activation bytes in V(A) (0-15)
// and V(B) (16-31). Clobbers V0-V3.
#define DOT8(S, A, B) \
	VLD1.P 64(R1), [V0.B16, V1.B16, V2.B16, V3.B16] \
	SDOTE(S, 0, A, 0) \
	SDOTE(S, 1, A, 1) \
	SDOTE(S, 2, A, 2) \
	SDOTE(S, 3, A, 3) \
	VLD1.P 64(R1), [V0.B16, V1.B16, V2.B16, V3.B16] \
	SDOTE(S, 0, B, 0) \
	SDOTE(S, 1, B, 1) \
	SDOTE(S, 2, B, 2) \
	SDOTE(S, 3, B, 3)

// Repacking (the pack functions of tile_simd.go): R0 is dst (written in
// order, by post-increment), R1 block b0 of row 0, R2 rs, R3 the block
// count; PACKARGS sets R6-R13 to the eight rows' blocks, which PACKNEXT
// advances by WS bytes.
#define PACKARGS \
	MOVD dst+0(FP), R0 \
	MOVD w+8(FP), R1 \
	MOVD rs+16(FP), R2 \
	MOVD blocks+24(FP), R3 \
	MOVD R1, R6 \
	ADD  R2, R6, R7 \
	ADD  R2, R7, R8 \
	ADD  R2, R8, R9 \
	ADD  R2, R9, R10 \
	ADD  R2, R10, R11 \
	ADD  R2, R11, R12 \
	ADD  R2, R12, R13

#define PACKNEXT(WS) \
	ADD  $WS, R6 \
	ADD  $WS, R7 \
	ADD  $WS, R8 \
	ADD  $WS, R9 \
	ADD  $WS, R10 \
	ADD  $WS, R11 \
	ADD  $WS, R12 \
	ADD  $WS, R13 \
	SUBS $1, R3 \
	BNE  pack \
	RET

// HALVES8(OFF) stores as eight float32 (rows 0-7) the fp16 at byte OFF of
// the rows' blocks. Clobbers R14, R15, V8-V10.
#define HALF1(R, OFF, L) \
	MOVHU OFF(R), R14 \
	VMOV  R14, V8.H[L]

#define HALVES8(OFF) \
	HALF1(R6, OFF, 0) \
	HALF1(R7, OFF, 1) \
	HALF1(R8, OFF, 2) \
	HALF1(R9, OFF, 3) \
	HALF1(R10, OFF, 4) \
	HALF1(R11, OFF, 5) \
	HALF1(R12, OFF, 6) \
	HALF1(R13, OFF, 7) \
	FCVTL(9, 8) \
	FCVTL2(10, 8) \
	VST1.P [V9.S4, V10.S4], 32(R0)

// LOAD16(R, OFF, V) loads the 16 bytes at OFF of a row's block into V.
// Clobbers R14.
#define LOAD16(R, OFF, V) \
	ADD  $(OFF), R, R14 \
	VLD1 (R14), [V.B16]

// The K-quant kernels keep acc in memory: KBLOCK leaves a block's
// partials in V6 (rows 0-3) and V7 (rows 4-7), and TILELOOPK adds them
// to lane k mod 8 of acc, at 32·(k mod 8) (R7); then as TILELOOP. KBLOCK
// advances R1-R3. Once per function.
#define TILELOOPK \
	MOVD $0, R7 \
	CBZ  R4, done \
loop: \
	KBLOCK \
	ADD  R7, R0, R8 \
	VLD1 (R8), [V8.S4, V9.S4] \
	FADD(8, 8, 6) \
	FADD(9, 9, 7) \
	VST1 [V8.S4, V9.S4], (R8) \
	ADD  $32, R7 \
	AND  $255, R7 \
	SUBS $1, R4 \
	BNE  loop \
done: \
	CBZ  R5, ret \
	TILEACC \
	TILEOUT \
ret: \
	RET

// STROWS4 stores the int32 vectors A0-A3 (rows 0-3 of four sub-blocks
// each) as sub-block-major runs of four rows, through ST4.
#define STROWS4(A0, A1, A2, A3) \
	VST4.P [A0.S4, A1.S4, A2.S4, A3.S4], 64(R0)
