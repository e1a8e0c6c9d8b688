package backend

import (
	"fmt"
	"github.com/meshnode/meshnode/gguf/detmath"
	"math"
)

// A mixture-of-experts FFN (gguf/model/moe.go) picks each row's experts
// from its router scores. A backend that implements MoE does the picking,
// the chosen experts' products and their weighted sum where the
// activations are, with the choice in its own memory, so a step needs no
// read-back per layer (a CUDA decode step stays one graph).

// Gating is how a router's scores become the chosen experts' weights.
type Gating int

// The gatings of the architectures this project runs.
const (
	// GateSoftmax: a softmax over all experts, the k most probable
	// (qwen3moe, qwen35moe, gemma4).
	GateSoftmax Gating = iota
	// GateSoftmaxNorm: GateSoftmax with the k probabilities divided by
	// their sum.
	GateSoftmaxNorm
	// GateSoftmaxChosen: the k largest logits, weighted by a softmax over
	// those k alone (gpt-oss).
	GateSoftmaxChosen
	// GateSigmoidNorm: each logit's sigmoid; the k largest of the
	// sigmoids plus the layer's selection bias (DeepSeek V3's
	// exp_probs_b), weighted by their unbiased sigmoids divided by their
	// sum (lfm2moe).
	GateSigmoidNorm
)

// MoE is a backend that routes and runs a mixture of experts on its own
// (the capability is the interface). Its arithmetic is the host's
// (gguf/model moe.go) operation for operation: the softmax's
// exponentials in float64 rounded to float32, its sum in float64 in
// expert order, ties broken toward the lower expert index; the products
// are MatMul's and AddBias's, row for row. A row's result depends on its
// own row only, so batching keeps a token's bits.
type MoE interface {
	// MoERoute sets each row's chosen experts sel (n × k, the expert
	// indices as float32, best first) and their weights w (n × k) from
	// the router scores logits (n × experts); bias (1 × experts, F32) is
	// GateSigmoidNorm's selection bias, nil for the others.
	MoERoute(sel, w, logits Tensor, bias Weight, g Gating)
	// MoEMatMul sets row r·k+j of dst (n·k × the experts' rows) to
	// experts[sel[r][j]] · x's row (r when x has n rows, r·k+j when it
	// has n·k), plus biases[sel[r][j]] when biases is not nil. The
	// experts are one shape and type. dst must not alias x.
	MoEMatMul(dst Tensor, experts, biases []Weight, x, sel Tensor)
	// MoESum sets row r of dst (n × cols) to Σ over j, best first, of
	// (y's row r·k+j · scale[sel[r][j]]) · w[r][j], each product rounded
	// (the first term is the sum's start, not added to 0); a nil scale
	// is none.
	MoESum(dst, y, sel, w Tensor, scale []float32)
	// MoEMaxRows is the most rows of a step the backend routes itself
	// (0: any). A backend whose MoEMatMul reads an expert once per
	// (row, rank) pair sets it, so that a long prompt takes the host's
	// grouped path, which reads each chosen expert once per batch of its
	// rows; the bits are the same either way.
	MoEMaxRows() int
}

// CheckMoEMatMul says what is wrong with MoEMatMul's operands, nil if
// nothing; backends panic with it, as they do on other misuse.
func CheckMoEMatMul(dst Tensor, experts, biases []Weight, x, sel Tensor) error {
	n, k := sel.Rows, sel.Cols
	if len(experts) == 0 || dst.Rows != n*k || x.Rows != n && x.Rows != n*k || biases != nil && len(biases) != len(experts) {
		return fmt.Errorf("MoEMatMul of %d rows (%d × %d chosen) from %d rows", dst.Rows, n, k, x.Rows)
	}
	if w := experts[0]; x.Cols != w.Cols() || dst.Cols != w.Rows() {
		return fmt.Errorf("MoEMatMul %d × %d = (%d × %d) · (%d × %d)ᵀ", dst.Rows, dst.Cols, x.Rows, x.Cols, w.Rows(), w.Cols())
	}
	return nil
}

// Route picks one row's experts from its router logits as build_moe_ffn
// does, the reference the backends' MoERoute match: sel and w (k long)
// receive the chosen experts, best first, and their weights; probs (as
// long as logits) is scratch.
//
// GateSoftmax and GateSoftmaxNorm: probabilities by ggml_soft_max
// (exp(x − max) in float64 rounded to float32, the sum in float64, then
// one scale by the float32 inverse), the k most probable (the lower index
// first among equals), divided by their sum (float64, clamped as ggml
// clamps it) when normalised. GateSoftmaxChosen (SOFTMAX_WEIGHT): the k
// largest logits, the same way, weighted by the same softmax over those k
// alone. GateSigmoidNorm: sigmoids 1/(1 + e^−x) (e^−x in float64 rounded
// to float32, as the C library's expf), plus bias (one per expert) to
// choose by, the chosen experts' unbiased sigmoids normalised as above.
func Route(logits, bias, probs []float32, sel []int, w []float32, g Gating) {
	if g == GateSigmoidNorm {
		for i, x := range logits {
			probs[i] = Sigmoid(x) + bias[i]
		}
		pick(probs, sel, w)
		for j, x := range sel {
			w[j] = Sigmoid(logits[x])
		}
		normalise(w)
		return
	}
	if g == GateSoftmaxChosen {
		pick(logits, sel, w)
		softmax(w, w[0]) // w[0] is the largest: sel is best first
		return
	}
	mx := float32(math.Inf(-1))
	for _, v := range logits {
		mx = max(mx, v)
	}
	copy(probs, logits)
	softmax(probs, mx)
	pick(probs, sel, w)
	if g == GateSoftmaxNorm {
		normalise(w)
	}
}

// normalise divides the chosen weights by their sum (float64, clamped as
// ggml clamps it: no smaller than half's least normal).
func normalise(w []float32) {
	var ws float64
	for _, v := range w {
		ws += float64(v)
	}
	d := max(float32(ws), 6.103515625e-5)
	for j := range w {
		w[j] /= d
	}
}

// Sigmoid is ggml's 1/(1 + expf(−x)), expf as the C library's (e^x in
// float64 rounded to float32).
func Sigmoid(x float32) float32 { return 1 / (1 + float32(detmath.Exp(float64(-x)))) }

// softmax replaces v by its softmax given its maximum mx.
func softmax(v []float32, mx float32) {
	var sum float64
	for i, x := range v {
		v[i] = float32(detmath.Exp(float64(x - mx)))
		sum += float64(v[i])
	}
	inv := float32(1 / sum)
	for i := range v {
		v[i] *= inv
	}
}

// pick sets sel and w to the len(sel) largest of v, best first, the lower
// index first among equals.
func pick(v []float32, sel []int, w []float32) {
	for j := range sel {
		best := -1
		for i, x := range v {
			if best >= 0 && x <= v[best] || taken(sel[:j], i) {
				continue
			}
			best = i
		}
		sel[j], w[j] = best, v[best]
	}
}

func taken(sel []int, i int) bool {
	for _, s := range sel {
		if s == i {
			return true
		}
	}
	return false
}
