//go:build !purego

#include "textflag.h"
#include "tile_amd64.h"

// Eight-row tiles of four activation rows at once, for AVX2 (tile_simd.go,
// where the sixteen-row AVX-512 tiles are not): q4_0Pack's layout (eight
// rows, 32 bytes a group), each weight group loaded once into a register
// for the four activation rows, each activation's four bytes broadcast
// from memory (a load, where the one-row tile spends a shuffle). Each
// activation row keeps its accumulators in acc: lane j of the eight rows
// at 32j, 256 bytes a row. Arguments and registers as the sixteen-row
// kernels' (tile_z_amd64.s); AX the lane's byte offset (32 a lane).

#define YARGS \
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
	SHLQ $5, AX \
	MOVQ out+64(FP), R9 \
	MOVQ os+72(FP), BX

#define YR0(OFF) OFF(DX)
#define YR1(OFF) OFF(DX)(R10*1)
#define YR2(OFF) OFF(DX)(R10*2)
#define YR3(OFF) OFF(DX)(R11*1)
#define FG0(OFF) OFF(R8)
#define FG1(OFF) OFF(R8)(R12*1)
#define FG2(OFF) OFF(R8)(R12*2)
#define FG3(OFF) OFF(R8)(R13*1)

// YACT adds the block's partials with activation row i (YA, FA) to its
// lane at ACC(DI)(AX): Σ n·y − 8·Σy (VPMADDUBSW's pairs are at most
// 2·15·128, so eight add up exactly in int16), then float32(sumi)·(dx·dy),
// as q4_0Tile does. The groups are in Y8-Y15, the rows' d in Y6, 1s (int16)
// in Y7.
#define YACT(YA, FA, ACC) \
	VPBROADCASTD YA(2), Y1 \
	VPMADDUBSW Y1, Y8, Y2 \
	VPBROADCASTD YA(6), Y1 \
	VPMADDUBSW Y1, Y9, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(10), Y1 \
	VPMADDUBSW Y1, Y10, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(14), Y1 \
	VPMADDUBSW Y1, Y11, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(18), Y1 \
	VPMADDUBSW Y1, Y12, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(22), Y1 \
	VPMADDUBSW Y1, Y13, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(26), Y1 \
	VPMADDUBSW Y1, Y14, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPBROADCASTD YA(30), Y1 \
	VPMADDUBSW Y1, Y15, Y0 \
	VPADDW Y0, Y2, Y2 \
	VPMADDWD Y7, Y2, Y2 \
	VPBROADCASTD FA(4), Y3 \
	VPSLLD $3, Y3, Y3 \
	VPSUBD Y3, Y2, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VBROADCASTSS FA(0), Y3 \
	VMULPS Y6, Y3, Y3 \
	VMULPS Y3, Y2, Y2 \
	VADDPS ACC(DI)(AX*1), Y2, Y2 \
	VMOVUPS Y2, ACC(DI)(AX*1)

// YOUT reduces activation row i's lanes (at ACC(DI)) by halving and
// stores the eight rows' results at R9, then moves R9 on by BX.
#define YOUT(ACC) \
	VMOVUPS (ACC)(DI), Y0 \
	VMOVUPS (ACC+32)(DI), Y1 \
	VMOVUPS (ACC+64)(DI), Y2 \
	VMOVUPS (ACC+96)(DI), Y3 \
	VADDPS (ACC+128)(DI), Y0, Y0 \
	VADDPS (ACC+160)(DI), Y1, Y1 \
	VADDPS (ACC+192)(DI), Y2, Y2 \
	VADDPS (ACC+224)(DI), Y3, Y3 \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y3, Y1, Y1 \
	VADDPS Y1, Y0, Y0 \
	VMOVUPS Y0, (R9) \
	ADDQ BX, R9

#define YLOOP(BLOCK, OUTS) \
	VPCMPEQW Y7, Y7, Y7 \
	VPSRLW $15, Y7, Y7 \
	TESTQ CX, CX \
	JZ    done \
loop: \
	VMOVDQU 0(SI), Y8 \
	VMOVDQU 32(SI), Y9 \
	VMOVDQU 64(SI), Y10 \
	VMOVDQU 96(SI), Y11 \
	VMOVDQU 128(SI), Y12 \
	VMOVDQU 160(SI), Y13 \
	VMOVDQU 192(SI), Y14 \
	VMOVDQU 224(SI), Y15 \
	VMOVUPS 256(SI), Y6 \
	BLOCK \
	ADDQ $288, SI \
	ADDQ $34, DX \
	ADDQ $8, R8 \
	ADDQ $32, AX \
	ANDQ $255, AX \
	DECQ CX \
	JNZ  loop \
done: \
	TESTQ R9, R9 \
	JZ    ret \
	OUTS \
ret: \
	VZEROUPPER \
	RET

#define Q40Y4 \
	YACT(YR0, FG0, 0) \
	YACT(YR1, FG1, 256) \
	YACT(YR2, FG2, 512) \
	YACT(YR3, FG3, 768)

#define YOUT4 \
	YOUT(0) \
	YOUT(256) \
	YOUT(512) \
	YOUT(768)

// func q4_0TileY4(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int)
TEXT ·q4_0TileY4(SB), NOSPLIT, $0-80
	YARGS
	YLOOP(Q40Y4, YOUT4)

// func q4_0TileY1(acc *float32, w, y, aux *byte, ys, xs, blocks, lane int, out *float32, os int)
TEXT ·q4_0TileY1(SB), NOSPLIT, $0-80
	YARGS
	YLOOP(YACT(YR0, FG0, 0), YOUT(0))
