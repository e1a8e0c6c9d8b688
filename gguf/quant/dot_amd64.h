// Macros shared by the AVX2 dot-product kernels.

// HSUM8 turns eight vectors of eight int32 (one block each, in A..H) into
// one vector whose lane k is the sum of block k's vector: three rounds of
// pairwise adds, then the two 128-bit halves. Integer addition is exact,
// so the grouping does not matter. Result in A; B, C, E, G are clobbered.
#define HSUM8(A, B, C, D, E, F, G, H) \
	VPHADDD B, A, A \
	VPHADDD D, C, C \
	VPHADDD F, E, E \
	VPHADDD H, G, G \
	VPHADDD C, A, A \
	VPHADDD G, E, E \
	VPERM2I128 $0x20, E, A, B \
	VPERM2I128 $0x31, E, A, C \
	VPADDD C, B, A

// SCALES8 loads the fp16 scales at P, P+S, ..., P+7S into the eight
// float32 lanes of Y (X is Y's low half).
#define SCALES8(P, S, X, Y) \
	VPINSRW $0, 0*S(P), X, X \
	VPINSRW $1, 1*S(P), X, X \
	VPINSRW $2, 2*S(P), X, X \
	VPINSRW $3, 3*S(P), X, X \
	VPINSRW $4, 4*S(P), X, X \
	VPINSRW $5, 5*S(P), X, X \
	VPINSRW $6, 6*S(P), X, X \
	VPINSRW $7, 7*S(P), X, X \
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
	VPHADDD SY, IY, IY \
	VEXTRACTI128 $1, IY, X0 \
	VPADDD X0, IX, IX \
	VPHADDD IX, IX, IX \
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
