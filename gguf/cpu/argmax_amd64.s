//go:build !purego

#include "textflag.h"

// maxOf32 (argmax_amd64.go): four running maxima of eight lanes each.
// VMAXPS returns its second source where either is NaN; the running
// maximum is that source, so a NaN element leaves it as it was, as the
// Go loop's l > best does. The maxima start at −Inf and never become NaN.

// func maxOf32(x *float32, n int) float32
TEXT ·maxOf32(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX
	VMOVD AX, X0
	VBROADCASTSS X0, Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
mloop:
	VMOVUPS 0(SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ $128, SI
	SUBQ $32, CX
	JNZ  mloop
	VMAXPS Y0, Y1, Y0
	VMAXPS Y2, Y3, Y2
	VMAXPS Y0, Y2, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X0, X1, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X0, X1, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X0, X1, X0
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func indexOf8(x *float32, n int, v float32) int
TEXT ·indexOf8(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS v+16(FP), Y1
	XORQ AX, AX
iloop:
	CMPQ AX, CX
	JGE  inone
	VCMPPS $0, (SI)(AX*4), Y1, Y2
	VMOVMSKPS Y2, DX
	TESTL DX, DX
	JNZ  ifound
	ADDQ $8, AX
	JMP  iloop
ifound:
	BSFL DX, DX
	ADDQ DX, AX
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET
inone:
	MOVQ $-1, ret+24(FP)
	VZEROUPPER
	RET
