// Package deltanet is the arithmetic of Qwen3.5's gated delta nets, as
// ggml computes it: one head's recurrence for one token and the scalar
// functions around it. The CPU backend's ops and the model's host path
// (for backends without the ops) both run it, so their results are the
// same bits.
package deltanet

import (
	"math"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// HeadRow advances one head's S×S state by one token and writes the head's
// gated output: the state src (which may be m itself) decays by e^g into m,
// takes the delta rule's update of key k towards value v at rate beta, and
// out = RMSNorm(m·q / √S) · norm · silu(z). q and k must already be
// L2-normalised.
//
// Row j of the state (value component j) alone decides its delta, its
// update and output j, so each row is done in two visits while it is in
// L1 (kernel.go), where ggml makes four passes over the whole state.
func HeadRow(m, src, q, k, v, z, norm, out []float32, g, beta, eps float32) {
	S := len(q)
	decay := float32(detmath.Exp(float64(g)))
	scale := 1 / float32(math.Sqrt(float64(S)))
	for j := range S {
		row := m[j*S : (j+1)*S]
		dj := (v[j] - decayRow(row, src[j*S:(j+1)*S], k, decay)) * beta
		out[j] = updateRow(row, k, q, dj) * scale
	}
	// The gated norm: RMSNorm over the head, times norm, times silu of
	// the gate.
	var ss float64
	for _, o := range out {
		ss += float64(o * o)
	}
	inv := 1 / float32(math.Sqrt(float64(float32(ss/float64(S))+eps)))
	for j := range out {
		out[j] = out[j] * inv * norm[j] * Silu(z[j])
	}
}

// Silu and Sigmoid take e^x in float64 (the delta net's, unlike the
// GLU's ggml expf).
func Silu(x float32) float32    { return x / (1 + float32(detmath.Exp(float64(-x)))) }
func Sigmoid(x float32) float32 { return 1 / (1 + float32(detmath.Exp(float64(-x)))) }

// Softplus is ggml's: x itself above 20.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(detmath.Log(1 + detmath.Exp(float64(x))))
}

// L2Norm scales x to unit length as ggml_l2_norm does (the sum in
// float64, the length at least eps).
func L2Norm(x []float32, eps float32) {
	var s float64
	for _, v := range x {
		s += float64(v * v)
	}
	scale := 1 / max(float32(math.Sqrt(s)), eps)
	for i := range x {
		x[i] *= scale
	}
}
