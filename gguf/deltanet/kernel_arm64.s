//go:build arm64 && !purego

#include "textflag.h"

// kernel.go's decayRow and updateRow over whole chunks of 32 elements,
// with NEON: the 32 lanes of acc in V16-V23, each product rounded before
// its add (FMUL then FADD, never FMLA), so the same bits as the Go.

#define FMUL(d, n, m)  WORD $(0x6e20dc00|(m)<<16|(n)<<5|(d)) // fmul vd.4s, vn.4s, vm.4s
#define FADD(d, n, m)  WORD $(0x4e20d400|(m)<<16|(n)<<5|(d)) // fadd vd.4s, vn.4s, vm.4s
#define FMULE(d, n, m) WORD $(0x4f809000|(m)<<16|(n)<<5|(d)) // fmul vd.4s, vn.4s, vm.s[0]

#define LOADACC \
	VLD1 (R0), [V16.S4, V17.S4, V18.S4, V19.S4] \
	ADD  $64, R0, R4 \
	VLD1 (R4), [V20.S4, V21.S4, V22.S4, V23.S4]

#define STOREACC \
	VST1 [V16.S4, V17.S4, V18.S4, V19.S4], (R0) \
	VST1 [V20.S4, V21.S4, V22.S4, V23.S4], (R4)

// DECAY16 scales 16 elements of old (R2) by V8.s[0] into row (R1), then
// adds their products with k (R3) to lanes A0-A3. old is read before row
// is written: they may be one buffer.
#define DECAY16(A0, A1, A2, A3) \
	VLD1.P 64(R2), [V0.S4, V1.S4, V2.S4, V3.S4] \
	FMULE(0, 0, 8) \
	FMULE(1, 1, 8) \
	FMULE(2, 2, 8) \
	FMULE(3, 3, 8) \
	VST1.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R1) \
	VLD1.P 64(R3), [V4.S4, V5.S4, V6.S4, V7.S4] \
	FMUL(0, 0, 4) \
	FMUL(1, 1, 5) \
	FMUL(2, 2, 6) \
	FMUL(3, 3, 7) \
	FADD(A0, A0, 0) \
	FADD(A1, A1, 1) \
	FADD(A2, A2, 2) \
	FADD(A3, A3, 3)

// UPDATE16 adds k (R2) times V8.s[0] to 16 elements of row (R1), then
// adds their products with q (R3) to lanes A0-A3.
#define UPDATE16(A0, A1, A2, A3) \
	VLD1.P 64(R2), [V4.S4, V5.S4, V6.S4, V7.S4] \
	FMULE(4, 4, 8) \
	FMULE(5, 5, 8) \
	FMULE(6, 6, 8) \
	FMULE(7, 7, 8) \
	VLD1 (R1), [V0.S4, V1.S4, V2.S4, V3.S4] \
	FADD(0, 0, 4) \
	FADD(1, 1, 5) \
	FADD(2, 2, 6) \
	FADD(3, 3, 7) \
	VST1.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R1) \
	VLD1.P 64(R3), [V4.S4, V5.S4, V6.S4, V7.S4] \
	FMUL(0, 0, 4) \
	FMUL(1, 1, 5) \
	FMUL(2, 2, 6) \
	FMUL(3, 3, 7) \
	FADD(A0, A0, 0) \
	FADD(A1, A1, 1) \
	FADD(A2, A2, 2) \
	FADD(A3, A3, 3)

// func decayRow32(acc *[32]float32, row, old, k *float32, decay float32, chunks int)
TEXT ·decayRow32(SB), NOSPLIT, $0-48
	MOVD  acc+0(FP), R0
	MOVD  row+8(FP), R1
	MOVD  old+16(FP), R2
	MOVD  k+24(FP), R3
	FMOVS decay+32(FP), F8
	MOVD  chunks+40(FP), R5
	LOADACC

decay:
	DECAY16(16, 17, 18, 19)
	DECAY16(20, 21, 22, 23)
	SUBS $1, R5
	BNE  decay

	STOREACC
	RET

// func updateRow32(acc *[32]float32, row, k, q *float32, d float32, chunks int)
TEXT ·updateRow32(SB), NOSPLIT, $0-48
	MOVD  acc+0(FP), R0
	MOVD  row+8(FP), R1
	MOVD  k+16(FP), R2
	MOVD  q+24(FP), R3
	FMOVS d+32(FP), F8
	MOVD  chunks+40(FP), R5
	LOADACC

update:
	UPDATE16(16, 17, 18, 19)
	UPDATE16(20, 21, 22, 23)
	SUBS $1, R5
	BNE  update

	STOREACC
	RET
