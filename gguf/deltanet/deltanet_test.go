package deltanet

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHeadRow: decaying a separate source gives the same bits as decaying
// in place, and the output is the float64 delta rule's within 1e-5.
func TestHeadRow(t *testing.T) {
	const S = 16
	rng := rand.New(rand.NewPCG(1, 2))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	src, q, k, v, z, norm := vec(S*S), vec(S), vec(S), vec(S), vec(S), vec(S)
	L2Norm(q, 1e-6)
	L2Norm(k, 1e-6)
	g, beta := float32(-0.3), float32(0.7)

	m1, out1 := make([]float32, S*S), make([]float32, S)
	HeadRow(m1, src, q, k, v, z, norm, out1, make([]float32, S), g, beta, 1e-6)
	m2, out2 := slices.Clone(src), make([]float32, S)
	HeadRow(m2, m2, q, k, v, z, norm, out2, make([]float32, S), g, beta, 1e-6)
	if !slices.Equal(m1, m2) || !slices.Equal(out1, out2) {
		t.Fatal("decaying in place differs from decaying a separate source")
	}

	// The reference in float64.
	m := make([]float64, S*S)
	for i, x := range src {
		m[i] = float64(x) * math.Exp(float64(g))
	}
	for j := range S {
		var mk float64
		for i := range S {
			mk += m[j*S+i] * float64(k[i])
		}
		d := (float64(v[j]) - mk) * float64(beta)
		for i := range S {
			m[j*S+i] += float64(k[i]) * d
		}
	}
	o := make([]float64, S)
	var ss float64
	for j := range S {
		for i := range S {
			o[j] += m[j*S+i] * float64(q[i])
		}
		o[j] /= math.Sqrt(S)
		ss += o[j] * o[j]
	}
	inv := 1 / math.Sqrt(ss/S+1e-6)
	for j := range S {
		zj := float64(z[j])
		want := o[j] * inv * float64(norm[j]) * zj / (1 + math.Exp(-zj))
		if d := math.Abs(float64(out1[j]) - want); d > 1e-5*max(1, math.Abs(want)) {
			t.Errorf("out[%d] = %v, float64 reference %v", j, out1[j], want)
		}
	}
	for i := range m {
		if d := math.Abs(float64(m1[i]) - m[i]); d > 1e-5*max(1, math.Abs(m[i])) {
			t.Fatalf("state[%d] = %v, float64 reference %v", i, m1[i], m[i])
		}
	}
}

// TestScalars pins ggml's edge rules: softplus is x above 20, and an
// all-zero vector's L2 norm divides by eps rather than zero.
func TestScalars(t *testing.T) {
	if got := Softplus(25); got != 25 {
		t.Errorf("Softplus(25) = %v", got)
	}
	if got, want := Softplus(0), float32(math.Ln2); got != want {
		t.Errorf("Softplus(0) = %v, want %v", got, want)
	}
	x := []float32{0, 0}
	L2Norm(x, 1e-6)
	if x[0] != 0 || x[1] != 0 {
		t.Errorf("L2Norm of zeros = %v", x)
	}
	y := []float32{3, 4}
	L2Norm(y, 1e-6)
	if math.Abs(float64(y[0])-0.6) > 1e-7 || math.Abs(float64(y[1])-0.8) > 1e-7 {
		t.Errorf("L2Norm(3,4) = %v", y)
	}
	if Sigmoid(0) != 0.5 || Silu(0) != 0 {
		t.Errorf("Sigmoid(0) %v, Silu(0) %v", Sigmoid(0), Silu(0))
	}
}
