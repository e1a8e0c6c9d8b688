package backend

import (
	"errors"
	"fmt"
)

// Qwen3.5's gated delta net (gguf/model/hybrid.go) keeps a recurrent
// state per sequence and block. A backend that implements DeltaNetter runs
// its short convolution and its scan where the activations are, with the
// state in its own memory, so a step needs no read-back per block.

// DeltaState is one sequence's memory in one delta-net block, in the
// backend's memory (NewTensor, zero for an empty sequence).
type DeltaState struct {
	// Conv is (ConvKernel−1) × channels: the convolution's last inputs,
	// oldest first.
	Conv Tensor
	// SSM is Heads·HeadDim × HeadDim floats: each head's HeadDim ×
	// HeadDim state, laid out as the backend keeps it (only its own
	// kernels read it; zero is the empty state in every layout).
	SSM Tensor
}

// RowSpan is N consecutive rows of a step from Row on.
type RowSpan struct{ Row, N int }

// DeltaSeq is one sequence's rows of a step and its state.
type DeltaSeq struct {
	// Spans are the sequence's rows, in the order they advance the state
	// (a step has a sequence's body rows first and its logits rows in the
	// tail); an empty span (N 0) is none. At least one row in all.
	Spans [2]RowSpan
	// Prev is the state before the step, which the kernels read; Next
	// receives the state after it. They may be the same tensors
	// (in place); when they differ Prev is left as it was, so a caller
	// that keeps two states per sequence has a checkpoint without
	// copying.
	Prev, Next DeltaState
}

// Check says what is wrong with s as a sequence of a step of rows rows
// whose states are conv and ssm floats (0: not checked), nil if nothing;
// backends panic with it, as they do on other misuse.
func (s DeltaSeq) Check(rows, conv, ssm int) error {
	n := 0
	for _, sp := range s.Spans {
		if sp.N < 0 || sp.Row < 0 || sp.Row+sp.N > rows {
			return fmt.Errorf("rows %d+%d outside %d", sp.Row, sp.N, rows)
		}
		n += sp.N
	}
	if n == 0 {
		return errors.New("no rows")
	}
	if conv > 0 && (s.Prev.Conv.Len() != conv || s.Next.Conv.Len() != conv) {
		return fmt.Errorf("convolution state is not %d floats", conv)
	}
	if ssm > 0 && (s.Prev.SSM.Len() != ssm || s.Next.SSM.Len() != ssm) {
		return fmt.Errorf("recurrent state is not %d floats", ssm)
	}
	return nil
}

// DeltaNet is one delta-net block's shape and its small weights (F32).
type DeltaNet struct {
	// KeyHeads query/key heads and Heads value heads, each HeadDim wide;
	// value head h reads key head h mod KeyHeads. The convolved rows are
	// the queries' KeyHeads·HeadDim, the keys' as many, then the values'
	// Heads·HeadDim.
	KeyHeads, Heads, HeadDim int
	// DTBias and A (1 × Heads) make the decay g = softplus(α + DTBias)·A.
	DTBias, A Weight
	// Norm (1 × HeadDim) is the gated RMSNorm's weight.
	Norm Weight
	// Eps is the L2 norms' and the RMSNorm's epsilon.
	Eps float32
}

// DeltaNetter is a backend that runs the delta net's per-sequence parts
// (the capability is the interface: its kernels come with their own
// state and a shape limit, DeltaNetFits). Both kernels take the step's
// sequences at once; a row's result depends only on its own sequence's
// earlier rows, so batching keeps a token's bits. Their arithmetic is the
// host's (gguf/model hybrid.go) operation for operation: Σ of squares in
// float64 in element order, exp and log in float64, rounded to float32
// where the host rounds.
type DeltaNetter interface {
	// DeltaNetFits reports whether the kernels take a block of this head
	// size and convolution width; a model falls back to the host when
	// they do not.
	DeltaNetFits(headDim, convKernel int) bool
	// ShortConv replaces each sequence's rows of x (n × channels) by
	// silu of their causal convolution with w (channels × ConvKernel, a
	// channel's taps together, oldest first) over Prev.Conv's rows then
	// the sequence's, and leaves the last ConvKernel−1 inputs in
	// Next.Conv.
	ShortConv(x Tensor, w Weight, seqs []DeltaSeq)
	// DeltaScan runs the gated delta rule over each sequence's rows of
	// the convolved x, from Prev.SSM into Next.SSM, and sets y's rows
	// (n × Heads·HeadDim) to the gated RMSNorm of the output with the
	// gate rows z (n × Heads·HeadDim); beta and alpha are n × Heads (the
	// pre-sigmoid β and the pre-softplus α):
	//
	//	q, k = L2-normalised key heads; v the value head
	//	g = softplus(α + DTBias)·A, β = σ(β)
	//	S = e^g·S; S += k ⊗ β(v − Sᵀk); o = Sᵀq / √HeadDim
	//	y = RMSNorm(o)·Norm·silu(z)
	DeltaScan(y, x, z, beta, alpha Tensor, d *DeltaNet, seqs []DeltaSeq)
	// SigmoidMul sets x *= σ(g) elementwise, g as wide as x or one
	// column (a gate per row), σ(v) = 1/(1 + e^−v) with e^−v in float64:
	// the hybrid's attention output gate and its shared expert's gate.
	SigmoidMul(x, g Tensor)
}

// GatedConver is a backend that runs LFM2's gated short convolution
// (llama.cpp's shortconv block) where the activations are, each
// sequence's convolution state (a DeltaState with Conv only) in its own
// memory. Its arithmetic is the host's (gguf/model shortconv.go)
// operation for operation: b·x and c·Σ rounded to float32, the taps
// summed oldest first each by a fused multiply-add (detmath.FMA32), as
// llama.cpp's compiled ssm_conv loop sums LFM2's three taps.
type GatedConver interface {
	// GatedConv sets each sequence's rows of y (n × ch) to c ⊙ conv(b ⊙
	// x), where bcx's rows (n × 3·ch) hold b, c and x side by side (the
	// in-projection's three chunks) and conv is the causal convolution,
	// without an activation, with w (ch × K, a channel's taps together,
	// oldest first; K ≤ MaxConvKernel) over Prev.Conv's K−1 rows of b ⊙ x
	// then the sequence's own. It leaves the last K−1 rows of b ⊙ x in
	// Next.Conv.
	GatedConv(y, bcx Tensor, w Weight, seqs []DeltaSeq)
}

// MaxConvKernel bounds the taps of a GatedConver's convolution (and a
// model's: LFM2's have 3).
const MaxConvKernel = 64
