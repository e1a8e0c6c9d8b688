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

// BCASTB fills every byte of Y with the byte value B (X is Y's low half).
#define BCASTB(B, X, Y) \
	MOVL $(B*0x01010101), AX \
	VMOVD AX, X \
	VPBROADCASTD X, Y

// KPARTIAL finishes a K-quant block as kPartial does. IY (IX its low
// half) holds int32 terms of the block's Σ scale·q·a, SY those of its
// Σ bsum·min (zero where the type has none); DD holds the fp16 pair
// d, dmin (dmin zero where none) in its low 32 bits; DY is the address of
// the activation's float32 scale. It adds isum·(d·dy) − summs·(dmin·dy),
// each product rounded, to the float32 at ACC. Clobbers X0, X1, IY.
#define KPARTIAL(IY, IX, SY, DD, DY, ACC) \
	VPUNPCKLDQ SY, IY, Y0 \
	VPUNPCKHDQ SY, IY, IY \
	VPADDD Y0, IY, IY \
	VPSHUFD $0x4e, IY, Y0 \
	VPADDD Y0, IY, IY \
	VEXTRACTI128 $1, IY, X0 \
	VPADDD X0, IX, IX \
	VCVTDQ2PS IX, IX \
	VCVTPH2PS DD, X0 \
	VBROADCASTSS DY, X1 \
	VMULPS X1, X0, X0 \
	VMULPS X0, IX, IX \
	VMOVSHDUP IX, X0 \
	VSUBSS X0, IX, IX \
	VADDSS ACC, IX, IX \
	VMOVSS IX, ACC

// The Go declarations of the kernels, with their contracts, are in
// dot_simd.go.
