package quant

import "fmt"

// VecDotType is the format an activation vector is quantised to before it is
// dotted with a row of weights of type t: ggml's vec_dot_type (ggml-cpu.c).
// Q8_0 for Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4; Q8_1 for Q4_1 and Q5_1; Q8_K for the
// K-quants and IQ4_XS; F32, F16 and BF16 dot their own type.
func VecDotType(t Type) (Type, bool) {
	switch t {
	case F32, F16, BF16:
		return t, true
	case Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4:
		return Q8_0, true
	case Q4_1, Q5_1:
		return Q8_1, true
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
		return Q8_K, true
	}
	return 0, false
}

// Activation is an activation vector quantised into the format that rows of
// one weight type are dotted with. Reuse one across calls: Quantize
// overwrites Data in place.
type Activation struct {
	Type Type   // the activation format: VecDotType of the weight type
	N    int    // elements
	Data []byte // N elements of Type
}

// NewActivation allocates an n-element activation for weights of type w.
func NewActivation(w Type, n int) (*Activation, error) {
	at, ok := VecDotType(w)
	if !ok {
		return nil, fmt.Errorf("quant: no dot product for %s", w)
	}
	size, err := at.RowSize(n)
	if err != nil {
		return nil, fmt.Errorf("quant: activation for %s: %w", w, err)
	}
	return &Activation{Type: at, N: n, Data: make([]byte, size)}, nil
}

// Quantize fills a from x, which must have a.N elements, with ggml's
// reference quantiser for a.Type (quantize_row_q8_0_ref and friends).
//
// llama.cpp's own activation quantisers are SIMD variants of these which
// differ in the last bit now and then (AVX2 Q8_0 rounds ties to even and
// scales by 127/amax rather than 1/(amax/127)); the reference is the one
// every platform agrees on.
func (a *Activation) Quantize(x []float32) error {
	if len(x) != a.N {
		return fmt.Errorf("quant: activation holds %d elements, got %d", a.N, len(x))
	}
	return Quantize(a.Type, x, a.Data)
}
