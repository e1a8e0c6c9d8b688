// Macros shared by the AVX2 dot-product kernels.

// HSUM8 turns eight vectors of eight int32 (one block each, in A..H) into
// one vector whose lane k is the sum of block k's vector: pairs of
// vectors are interleaved and added, twice, then the two 128-bit halves
// are added (VPHADDD would do the same in fewer but slower instructions).
// Integer addition is exact, so the grouping does not matter. Result in
// A; B..H and the scratch T are clobbered.
#define HSUM8(A, B, C, D, E, F, G, H, T) \
	HPAIR(A, B, T, VPUNPCKLDQ, VPUNPCKHDQ) \
	HPAIR(C, D, T, VPUNPCKLDQ, VPUNPCKHDQ) \
	HPAIR(E, F, T, VPUNPCKLDQ, VPUNPCKHDQ) \
	HPAIR(G, H, T, VPUNPCKLDQ, VPUNPCKHDQ) \
	HPAIR(A, C, T, VPUNPCKLQDQ, VPUNPCKHQDQ) \
	HPAIR(E, G, T, VPUNPCKLQDQ, VPUNPCKHQDQ) \
	VPBLENDD $0xf0, E, A, B \
	VPERM2I128 $0x21, E, A, C \
	VPADDD C, B, A

// GROUP8 runs BLOCK(k, V) for the eight blocks k of a round, V = Y4..Y11,
// and HSUM8s the results into Y4 (Y0 scratch).
#define GROUP8(BLOCK) \
	BLOCK(0, Y4) \
	BLOCK(1, Y5) \
	BLOCK(2, Y6) \
	BLOCK(3, Y7) \
	BLOCK(4, Y8) \
	BLOCK(5, Y9) \
	BLOCK(6, Y10) \
	BLOCK(7, Y11) \
	HSUM8(Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y0)

// HPAIR sets A to the sum of the LO and HI interleavings of A with B.
#define HPAIR(A, B, T, LO, HI) \
	LO B, A, T \
	HI B, A, B \
	VPADDD B, T, A

// SCALES8 loads the fp16 scales at P, P+S, ..., P+7S into the eight
// float32 lanes of Y (X is Y's low half).
#define SCALES8(P, S, X, Y) \
	MOVWQZX 0*S(P), AX \
	MOVWQZX 1*S(P), R8 \
	SHLQ $16, R8 \
	ORQ R8, AX \
	MOVWQZX 2*S(P), R8 \
	SHLQ $32, R8 \
	ORQ R8, AX \
	MOVWQZX 3*S(P), R8 \
	SHLQ $48, R8 \
	ORQ R8, AX \
	MOVWQZX 4*S(P), R9 \
	MOVWQZX 5*S(P), R8 \
	SHLQ $16, R8 \
	ORQ R8, R9 \
	MOVWQZX 6*S(P), R8 \
	SHLQ $32, R8 \
	ORQ R8, R9 \
	MOVWQZX 7*S(P), R8 \
	SHLQ $48, R8 \
	ORQ R8, R9 \
	VMOVQ AX, X \
	VPINSRQ $1, R9, X, X \
	VCVTPH2PS X, Y

// ACCUM8 adds float32(SUMI) × (DX × DY) to ACC lane by lane, rounding each
// product as the Go kernels do (no FMA). SUMI and DX are clobbered.
#define ACCUM8(SUMI, DX, DY, ACC) \
	VMULPS DY, DX, DX \
	VCVTDQ2PS SUMI, SUMI \
	VMULPS DX, SUMI, SUMI \
	VADDPS SUMI, ACC, ACC

// NIBBLES leaves in Y0 the 32 nibbles of the 16 bytes at OFF(SI), the
// low ones in bytes 0-15 and the high ones in bytes 16-31; Y14 holds 0x0f
// bytes. Clobbers Y1.
#define NIBBLES(OFF) \
	VMOVDQU (OFF)(SI), X0 \
	VPSRLW $4, X0, X1 \
	VINSERTI128 $1, X1, Y0, Y0 \
	VPAND Y14, Y0, Y0

// FIFTHBITS ORs into byte e of Y0 bit e of the little-endian uint32 at
// OFF(SI), moved to bit 4 (the fifth bits of Q5_0 and Q5_1). Clobbers Y1.
#define FIFTHBITS(OFF) \
	VPBROADCASTD (OFF)(SI), Y1 \
	VPSHUFB qhBytes<>(SB), Y1, Y1 \
	VPAND qhBits<>(SB), Y1, Y1 \
	VPCMPEQB qhBits<>(SB), Y1, Y1 \
	VPAND qhFifth<>(SB), Y1, Y1 \
	VPOR Y1, Y0, Y0

// Files using FIFTHBITS say FIFTHDATA once: qhBytes copies byte e/8 of
// the uint32 to byte e, qhBits picks bit e mod 8 of it, qhFifth is 0x10.
#define FIFTHDATA \
	DATA qhBytes<>+0(SB)/8, $0x0000000000000000 \
	DATA qhBytes<>+8(SB)/8, $0x0101010101010101 \
	DATA qhBytes<>+16(SB)/8, $0x0202020202020202 \
	DATA qhBytes<>+24(SB)/8, $0x0303030303030303 \
	GLOBL qhBytes<>(SB), RODATA|NOPTR, $32 \
	DATA qhBits<>+0(SB)/8, $0x8040201008040201 \
	DATA qhBits<>+8(SB)/8, $0x8040201008040201 \
	DATA qhBits<>+16(SB)/8, $0x8040201008040201 \
	DATA qhBits<>+24(SB)/8, $0x8040201008040201 \
	GLOBL qhBits<>(SB), RODATA|NOPTR, $32 \
	DATA qhFifth<>+0(SB)/8, $0x1010101010101010 \
	DATA qhFifth<>+8(SB)/8, $0x1010101010101010 \
	DATA qhFifth<>+16(SB)/8, $0x1010101010101010 \
	DATA qhFifth<>+24(SB)/8, $0x1010101010101010 \
	GLOBL qhFifth<>(SB), RODATA|NOPTR, $32

// ACCUM8MIN is ACCUM8 plus the min term of Q4_1/Q5_1 (as scaledMin):
// ACC += (float32(SUMI) × (DX × DY) + MX × SY), each product and the
// inner sum rounded. SUMI, DX and MX are clobbered.
#define ACCUM8MIN(SUMI, DX, DY, MX, SY, ACC) \
	VMULPS DY, DX, DX \
	VCVTDQ2PS SUMI, SUMI \
	VMULPS DX, SUMI, SUMI \
	VMULPS SY, MX, MX \
	VADDPS MX, SUMI, SUMI \
	VADDPS SUMI, ACC, ACC

// ROUNDS32 is the loop of a 32-element-block kernel after its setup:
// rounds of eight blocks (XS and YS bytes each) through GROUP8(BLOCK),
// scaled by ACCUM8 into Y15, which goes to acc (DI) at the end.
// ROUNDS32MIN is the same with the min term of Q4_1/Q5_1 (ACCUM8MIN).
// Once per function.
#define ROUNDS32(XS, YS) \
loop: \
	GROUP8(BLOCK) \
	SCALES8(SI, XS, X5, Y5) \
	SCALES8(DX, YS, X6, Y6) \
	ACCUM8(Y4, Y5, Y6, Y15) \
	ROUNDSEND(XS, YS)

#define ROUNDS32MIN(XS, YS) \
loop: \
	GROUP8(BLOCK) \
	SCALES8(SI, XS, X5, Y5) \
	SCALES8(DX, YS, X6, Y6) \
	LEAQ 2(SI), R12 \
	LEAQ 2(DX), R13 \
	SCALES8(R12, XS, X7, Y7) \
	SCALES8(R13, YS, X8, Y8) \
	ACCUM8MIN(Y4, Y5, Y6, Y7, Y8, Y15) \
	ROUNDSEND(XS, YS)

#define ROUNDSEND(XS, YS) \
	ADDQ $(8*XS), SI \
	ADDQ $(8*YS), DX \
	DECQ CX \
	JNZ  loop \
	VMOVUPS Y15, (DI) \
	VZEROUPPER \
	RET

// ROUNDSF is the loop of a float kernel: LANES(off, acc) adds the
// products of 8 elements at off to an accumulator of lanes (Y12-Y15: lanes
// 0-7, 8-15, 16-23, 24-31 of acc, loaded from DI first and stored back at
// the end), OFF bytes apart, STEP bytes a round. Once per function.
#define ROUNDSF(OFF, STEP) \
	VMOVUPS 0(DI), Y12 \
	VMOVUPS 32(DI), Y13 \
	VMOVUPS 64(DI), Y14 \
	VMOVUPS 96(DI), Y15 \
loop: \
	LANES(0, Y12) \
	LANES(OFF, Y13) \
	LANES(2*OFF, Y14) \
	LANES(3*OFF, Y15) \
	ADDQ $STEP, SI \
	ADDQ $STEP, DX \
	DECQ CX \
	JNZ  loop \
	VMOVUPS Y12, 0(DI) \
	VMOVUPS Y13, 32(DI) \
	VMOVUPS Y14, 64(DI) \
	VMOVUPS Y15, 96(DI) \
	VZEROUPPER \
	RET

// ONES16 fills the int16 lanes of Y with 1.
#define ONES16(X, Y) \
	MOVL $0x00010001, AX \
	VMOVD AX, X \
	VPBROADCASTD X, Y

// BCASTB fills every byte of Y with the byte value B (X is Y's low half).
#define BCASTB(B, X, Y) \
	MOVL $(B*0x01010101), AX \
	VMOVD AX, X \
	VPBROADCASTD X, Y

// KEND closes a K-quant kernel's loop over blocks of XS bytes, then
// flushes the last slots and stores ACC to acc (DI).
#define KEND(XS, ACC) \
	ADDQ $XS, SI \
	ADDQ $292, DX \
	DECQ CX \
	JNZ  loop \
	KTAIL(ACC) \
	VMOVUPS ACC, (DI) \
	VZEROUPPER \
	RET

// The K-quant kernels finish eight blocks at a time: KSAVE and KSAVEMIN
// put a block's int32 terms and scales in slot R12 (0-7) of a 576-byte
// stack buffer at BX (Σ scale·q·a vectors at 0, Σ bsum·min vectors at
// 256, fp16 d at 512, fp16 dmin at 528, float32 dy at 544), and KFLUSH
// turns the eight slots into the float32 partials of kPartial, slot k in
// lane k: isum·(d·dy) − summs·(dmin·dy), each product rounded, added to
// ACC. Types without mins leave those slots zero, which kPartial's
// arithmetic reproduces; slots past the last block are zeroed (KTAIL) and
// add +0, which leaves an accumulator lane unchanged (it is never −0).

// KSAVE stores IY (Σ scale·q·a) and the scales d at D, dy at (DX).
// Clobbers R13.
#define KSAVE(IY, D) \
	MOVQ    R12, R13 \
	SHLQ    $5, R13 \
	VMOVDQU IY, (BX)(R13*1) \
	MOVWLZX D, R13 \
	MOVW    R13, 512(BX)(R12*2) \
	MOVL    (DX), R13 \
	MOVL    R13, 544(BX)(R12*4)

// KSAVEMIN stores SY (Σ bsum·min) and dmin at DMIN. Clobbers R13.
#define KSAVEMIN(SY, DMIN) \
	MOVQ    R12, R13 \
	SHLQ    $5, R13 \
	VMOVDQU SY, 256(BX)(R13*1) \
	MOVWLZX DMIN, R13 \
	MOVW    R13, 528(BX)(R12*2)

// KFLUSH adds the partials of the eight slots to ACC. Clobbers Y0-Y9.
#define KFLUSH(ACC) \
	VMOVDQU 0(BX), Y0 \
	VMOVDQU 32(BX), Y1 \
	VMOVDQU 64(BX), Y2 \
	VMOVDQU 96(BX), Y3 \
	VMOVDQU 128(BX), Y4 \
	VMOVDQU 160(BX), Y5 \
	VMOVDQU 192(BX), Y6 \
	VMOVDQU 224(BX), Y7 \
	HSUM8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8) \
	VCVTDQ2PS Y0, Y9 \
	VMOVDQU 256(BX), Y0 \
	VMOVDQU 288(BX), Y1 \
	VMOVDQU 320(BX), Y2 \
	VMOVDQU 352(BX), Y3 \
	VMOVDQU 384(BX), Y4 \
	VMOVDQU 416(BX), Y5 \
	VMOVDQU 448(BX), Y6 \
	VMOVDQU 480(BX), Y7 \
	HSUM8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8) \
	VCVTDQ2PS Y0, Y0 \
	VCVTPH2PS 512(BX), Y1 \
	VCVTPH2PS 528(BX), Y2 \
	VMOVUPS 544(BX), Y3 \
	VMULPS Y3, Y1, Y1 \
	VMULPS Y3, Y2, Y2 \
	VMULPS Y1, Y9, Y9 \
	VMULPS Y2, Y0, Y0 \
	VSUBPS Y0, Y9, Y9 \
	VADDPS Y9, ACC, ACC

// KNEXT moves to the next slot, flushing after the eighth (then AFTER,
// e.g. reloading constants KFLUSH clobbered). Once per function.
#define KNEXT(ACC, AFTER) \
	INCQ R12 \
	CMPQ R12, $8 \
	JLT  knextdone \
	KFLUSH(ACC) \
	AFTER \
	XORQ R12, R12 \
knextdone:

// KTAIL zeroes the slots from R12 on and flushes, if any block is in
// them. Clobbers R13, Y0-Y9. Once per function.
#define KTAIL(ACC) \
	TESTQ R12, R12 \
	JZ    ktaildone \
	VPXOR Y0, Y0, Y0 \
ktailzero: \
	MOVQ    R12, R13 \
	SHLQ    $5, R13 \
	VMOVDQU Y0, (BX)(R13*1) \
	VMOVDQU Y0, 256(BX)(R13*1) \
	MOVW    $0, 512(BX)(R12*2) \
	MOVW    $0, 528(BX)(R12*2) \
	MOVL    $0, 544(BX)(R12*4) \
	INCQ    R12 \
	CMPQ    R12, $8 \
	JLT     ktailzero \
	KFLUSH(ACC) \
ktaildone:

// KCLEARMIN zeroes the min slots, for types without mins.
#define KCLEARMIN \
	VPXOR   Y0, Y0, Y0 \
	VMOVDQU Y0, 256(BX) \
	VMOVDQU Y0, 288(BX) \
	VMOVDQU Y0, 320(BX) \
	VMOVDQU Y0, 352(BX) \
	VMOVDQU Y0, 384(BX) \
	VMOVDQU Y0, 416(BX) \
	VMOVDQU Y0, 448(BX) \
	VMOVDQU Y0, 480(BX) \
	VMOVDQU X0, 528(BX)

// KSCALEMIN unpacks the 6-bit scales and mins of the Q4_K/Q5_K block at
// SI as ggml's get_scale_min_k4 does, and leaves the eight scale bytes
// repeated across Y10 and Σ bsum·min over the Q8_K block at DX in the
// int32 lanes of Y9 (Y12 holds minPairs). Clobbers AX, R8-R11, X0, Y11.
#define KSCALEMIN \
	MOVL 4(SI), AX \
	MOVL 8(SI), R8 \
	MOVL 12(SI), R9 \
	MOVL AX, R10 \
	ANDL $0x3f3f3f3f, R10 \
	MOVL R9, R11 \
	ANDL $0x0f0f0f0f, R11 \
	SHRL $6, AX \
	ANDL $0x03030303, AX \
	SHLL $4, AX \
	ORL  AX, R11 \
	SHLQ $32, R11 \
	ORQ  R11, R10 \
	MOVL R8, R11 \
	ANDL $0x3f3f3f3f, R11 \
	SHRL $4, R9 \
	ANDL $0x0f0f0f0f, R9 \
	SHRL $6, R8 \
	ANDL $0x03030303, R8 \
	SHLL $4, R8 \
	ORL  R8, R9 \
	SHLQ $32, R9 \
	ORQ  R9, R11 \
	VMOVQ R10, X0 \
	VPBROADCASTQ X0, Y10 \
	VMOVQ R11, X0 \
	VPBROADCASTQ X0, Y11 \
	VPSHUFB Y12, Y11, Y11 \
	VPMADDWD 260(DX), Y11, Y9

// K45SETUP loads the constants of the Q4_K and Q5_K kernels: Y15 0x0f
// bytes, Y12 minPairs.
#define K45SETUP \
	BCASTB(0x0f, X15, Y15) \
	VMOVDQU minPairs<>(SB), Y12

// K45SCALE finishes sub-blocks 2J and 2J+1 of a Q4_K/Q5_K block, whose
// unsigned quants are in Y0 and Y1: they multiply the activations in int16
// pairs (VPMADDUBSW, at most 2·31·128), then their scales (spread from
// Y10 to int16 lanes) into int32 (VPMADDWD), added to Y7.
#define K45SCALE(J) \
	VPMADDUBSW (4+64*J)(DX), Y0, Y0 \
	VPMADDUBSW (36+64*J)(DX), Y1, Y1 \
	VPSHUFB spread<>+(64*J)(SB), Y10, Y2 \
	VPSHUFB spread<>+(64*J+32)(SB), Y10, Y3 \
	VPMADDWD Y2, Y0, Y0 \
	VPMADDWD Y3, Y1, Y1 \
	VPADDD Y0, Y7, Y7 \
	VPADDD Y1, Y7, Y7

// minPairs (for Y12) spreads min j, byte j of every 8, to int16 lanes 2j
// and 2j+1, against bsums 2j and 2j+1.
// Files using K45SETUP say K45DATA once. spread (mask j at 32j) puts
// scale byte j in every int16 lane.
#define K45DATA \
	DATA spread<>+0(SB)/8, $0x8000800080008000 \
	DATA spread<>+8(SB)/8, $0x8000800080008000 \
	DATA spread<>+16(SB)/8, $0x8000800080008000 \
	DATA spread<>+24(SB)/8, $0x8000800080008000 \
	DATA spread<>+32(SB)/8, $0x8001800180018001 \
	DATA spread<>+40(SB)/8, $0x8001800180018001 \
	DATA spread<>+48(SB)/8, $0x8001800180018001 \
	DATA spread<>+56(SB)/8, $0x8001800180018001 \
	DATA spread<>+64(SB)/8, $0x8002800280028002 \
	DATA spread<>+72(SB)/8, $0x8002800280028002 \
	DATA spread<>+80(SB)/8, $0x8002800280028002 \
	DATA spread<>+88(SB)/8, $0x8002800280028002 \
	DATA spread<>+96(SB)/8, $0x8003800380038003 \
	DATA spread<>+104(SB)/8, $0x8003800380038003 \
	DATA spread<>+112(SB)/8, $0x8003800380038003 \
	DATA spread<>+120(SB)/8, $0x8003800380038003 \
	DATA spread<>+128(SB)/8, $0x8004800480048004 \
	DATA spread<>+136(SB)/8, $0x8004800480048004 \
	DATA spread<>+144(SB)/8, $0x8004800480048004 \
	DATA spread<>+152(SB)/8, $0x8004800480048004 \
	DATA spread<>+160(SB)/8, $0x8005800580058005 \
	DATA spread<>+168(SB)/8, $0x8005800580058005 \
	DATA spread<>+176(SB)/8, $0x8005800580058005 \
	DATA spread<>+184(SB)/8, $0x8005800580058005 \
	DATA spread<>+192(SB)/8, $0x8006800680068006 \
	DATA spread<>+200(SB)/8, $0x8006800680068006 \
	DATA spread<>+208(SB)/8, $0x8006800680068006 \
	DATA spread<>+216(SB)/8, $0x8006800680068006 \
	DATA spread<>+224(SB)/8, $0x8007800780078007 \
	DATA spread<>+232(SB)/8, $0x8007800780078007 \
	DATA spread<>+240(SB)/8, $0x8007800780078007 \
	DATA spread<>+248(SB)/8, $0x8007800780078007 \
	GLOBL spread<>(SB), RODATA|NOPTR, $256 \
	DATA minPairs<>+0(SB)/8, $0x8001800180008000 \
	DATA minPairs<>+8(SB)/8, $0x8003800380028002 \
	DATA minPairs<>+16(SB)/8, $0x8005800580048004 \
	DATA minPairs<>+24(SB)/8, $0x8007800780068006 \
	GLOBL minPairs<>(SB), RODATA|NOPTR, $32

// K16SCALES multiplies the int16 pairs in Y0 (a Q2_K/Q3_K/Q6_K group of
// 32 activations: two sub-blocks of 16, one per 128-bit lane) by their
// scales, 2M and 2M+1 of the eight int16 in both lanes of Y6, into int32
// added to Y7. Clobbers Y2.
#define K16SCALES(M) \
	VPSHUFB scalePick<>+(32*M)(SB), Y6, Y2 \
	VPMADDWD Y2, Y0, Y0 \
	VPADDD Y0, Y7, Y7

// Files using K16SCALES say K16DATA once: scalePick's mask m spreads
// int16 scale 2m over the low 128 bits and scale 2m+1 over the high.
#define K16DATA \
	DATA scalePick<>+0(SB)/8, $0x0100010001000100 \
	DATA scalePick<>+8(SB)/8, $0x0100010001000100 \
	DATA scalePick<>+16(SB)/8, $0x0302030203020302 \
	DATA scalePick<>+24(SB)/8, $0x0302030203020302 \
	DATA scalePick<>+32(SB)/8, $0x0504050405040504 \
	DATA scalePick<>+40(SB)/8, $0x0504050405040504 \
	DATA scalePick<>+48(SB)/8, $0x0706070607060706 \
	DATA scalePick<>+56(SB)/8, $0x0706070607060706 \
	DATA scalePick<>+64(SB)/8, $0x0908090809080908 \
	DATA scalePick<>+72(SB)/8, $0x0908090809080908 \
	DATA scalePick<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a \
	DATA scalePick<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a \
	DATA scalePick<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c \
	DATA scalePick<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c \
	DATA scalePick<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e \
	DATA scalePick<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e \
	GLOBL scalePick<>(SB), RODATA|NOPTR, $128

// The Go declarations of the kernels, with their contracts, are in
// dot_simd.go.

// FIGURES8 loads the per-block figures of eight Q8_0 blocks from a Batch
// (float32 dy, int32 Σy, interleaved, at R10): the dy into DY and the Σy
// into SUMS, block k in lane k. Clobbers Y2.
#define FIGURES8(DY, SUMS) \
	VMOVUPS (R10), SUMS \
	VMOVUPS 32(R10), Y2 \
	VSHUFPS $0x88, Y2, SUMS, DY \
	VSHUFPS $0xdd, Y2, SUMS, SUMS \
	VPERMPD $0xd8, DY, DY \
	VPERMPD $0xd8, SUMS, SUMS
