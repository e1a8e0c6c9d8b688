//go:build !purego

#include "textflag.h"
#include "dot_amd64.h"

// IQ4_XS·Q8_K, one block a round (136 bytes: fp16 d | uint16 scales_h |
// scales_l[4] | qs[128]). Sub-block ib (32 elements) is laid out as an
// IQ4_NL block: the levels of its 16 bytes' low nibbles, then the high
// ones, times the sign trick's VPMADDUBSW (as IQ4_NL), times its 6-bit
// scale less 32 (nibble ib of scales_l, bits 2ib of scales_h above it)
// into int32. KFLUSH finishes, eight blocks at a time.

// SUB adds sub-block IB; Y13 holds the levels, Y14 0x0f, Y6 the eight
// scales as int16 in both lanes.
#define SUB(IB) \
	NIBBLES(8+16*IB) \
	VPSHUFB Y0, Y13, Y0 \
	VMOVDQU (4+32*IB)(DX), Y1 \
	VPSIGNB Y1, Y0, Y0 \
	VPSIGNB Y1, Y1, Y1 \
	VPMADDUBSW Y0, Y1, Y0 \
	VPSHUFB wordSpread<>+(32*IB)(SB), Y6, Y2 \
	VPMADDWD Y2, Y0, Y0 \
	VPADDD Y0, Y7, Y7

DATA levels<>+0(SB)/8, $0xf6eaddcfbfad9881 // -127 -104 -83 -65 -49 -35 -22 -10
DATA levels<>+8(SB)/8, $0x7159453526190d01 // 1 13 25 38 53 69 89 113
GLOBL levels<>(SB), RODATA|NOPTR, $16

// wordSpread's mask k puts int16 k in every lane.
DATA wordSpread<>+0(SB)/8, $0x0100010001000100
DATA wordSpread<>+8(SB)/8, $0x0100010001000100
DATA wordSpread<>+16(SB)/8, $0x0100010001000100
DATA wordSpread<>+24(SB)/8, $0x0100010001000100
DATA wordSpread<>+32(SB)/8, $0x0302030203020302
DATA wordSpread<>+40(SB)/8, $0x0302030203020302
DATA wordSpread<>+48(SB)/8, $0x0302030203020302
DATA wordSpread<>+56(SB)/8, $0x0302030203020302
DATA wordSpread<>+64(SB)/8, $0x0504050405040504
DATA wordSpread<>+72(SB)/8, $0x0504050405040504
DATA wordSpread<>+80(SB)/8, $0x0504050405040504
DATA wordSpread<>+88(SB)/8, $0x0504050405040504
DATA wordSpread<>+96(SB)/8, $0x0706070607060706
DATA wordSpread<>+104(SB)/8, $0x0706070607060706
DATA wordSpread<>+112(SB)/8, $0x0706070607060706
DATA wordSpread<>+120(SB)/8, $0x0706070607060706
DATA wordSpread<>+128(SB)/8, $0x0908090809080908
DATA wordSpread<>+136(SB)/8, $0x0908090809080908
DATA wordSpread<>+144(SB)/8, $0x0908090809080908
DATA wordSpread<>+152(SB)/8, $0x0908090809080908
DATA wordSpread<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA wordSpread<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA wordSpread<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA wordSpread<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA wordSpread<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA wordSpread<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA wordSpread<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA wordSpread<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA wordSpread<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA wordSpread<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA wordSpread<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA wordSpread<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL wordSpread<>(SB), RODATA|NOPTR, $256

// highShift moves bits 2ib, 2ib+1 of a uint16 to bits 14, 15 of lane ib.
DATA highShift<>+0(SB)/8, $0x0100040010004000
DATA highShift<>+8(SB)/8, $0x0001000400100040
GLOBL highShift<>(SB), RODATA|NOPTR, $16

// func iq4xsDot(acc *[8]float32, x, y *byte, blocks int)
TEXT ·iq4xsDot(SB), 0, $576-32
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ blocks+24(FP), CX
	LEAQ slots-576(SP), BX
	XORQ R12, R12 // slot
	VMOVUPS (DI), Y12
	KCLEARMIN // no min term
	BCASTB(0x0f, X14, Y14)
	VBROADCASTI128 levels<>(SB), Y13
	BCASTB(32, X11, Y11)
	MOVL $0xc000c000, AX
	VMOVD AX, X10
	VPBROADCASTD X10, X10

loop:
	// The eight scales less 32, as int16 in both lanes of Y6: low nibbles
	// of scales_l interleaved, and scales_h's bit pairs shifted up.
	VMOVD      4(SI), X1
	VPSRLW     $4, X1, X2
	VPUNPCKLBW X2, X1, X1
	VPAND      X14, X1, X1
	VPBROADCASTW 2(SI), X2
	VPMULLW    highShift<>(SB), X2, X2
	VPAND      X10, X2, X2
	VPSRLW     $10, X2, X2
	VPACKUSWB  X2, X2, X2
	VPOR       X2, X1, X1
	VPSUBB     X11, X1, X1
	VPMOVSXBW  X1, X6
	VINSERTI128 $1, X6, Y6, Y6

	VPXOR Y7, Y7, Y7
	SUB(0)
	SUB(1)
	SUB(2)
	SUB(3)
	SUB(4)
	SUB(5)
	SUB(6)
	SUB(7)
	KSAVE(Y7, (SI))
	KNEXT(Y12, NOP)
	KEND(136, Y12)
