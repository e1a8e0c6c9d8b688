package deltanet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHeadRow: decaying a separate source gives the same bits as decaying
// in place, and the output is the float64 delta rule's within 1e-5, at
// head sizes below, at and past the row kernels' 32-element chunk.
func TestHeadRow(t *testing.T) {
	for _, S := range []int{16, 40, 128} {
		t.Run(fmt.Sprint(S), func(t *testing.T) { testHeadRow(t, S) })
	}
}

func testHeadRow(t *testing.T, S int) {
	rng := rand.New(rand.NewPCG(1, uint64(S)))
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
	HeadRow(m1, src, q, k, v, z, norm, out1, g, beta, 1e-6)
	m2, out2 := slices.Clone(src), make([]float32, S)
	HeadRow(m2, m2, q, k, v, z, norm, out2, g, beta, 1e-6)
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
		o[j] /= math.Sqrt(float64(S))
		ss += o[j] * o[j]
	}
	inv := 1 / math.Sqrt(ss/float64(S)+1e-6)
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

// TestRowKernelsMatchGo: the assembly row kernels give the Go loops' bits
// (the returned dot and every element of the row), in place and not, at
// lengths that leave no tail, a tail, or no whole chunk.
func TestRowKernelsMatchGo(t *testing.T) {
	if !haveKernels {
		t.Skip("no row kernels on this machine: the Go loops are all there is")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vec := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	both := func(f func() float32) (asm, pure float32) {
		asm = f()
		useKernels = false
		defer func() { useKernels = haveKernels }()
		return asm, f()
	}
	for _, n := range []int{1, 31, 32, 33, 64, 100, 128, 256} {
		old, k, q := vec(n, 3), vec(n, 0.2), vec(n, 0.2)
		decay, d := float32(0.93), float32(-0.71)
		for _, inPlace := range []bool{false, true} {
			rows := [2][]float32{make([]float32, n), make([]float32, n)}
			if inPlace {
				rows = [2][]float32{slices.Clone(old), slices.Clone(old)}
			}
			i := 0
			src := func() []float32 {
				if inPlace {
					return rows[i]
				}
				return old
			}
			decayed := func() float32 { r := decayRow(rows[i], src(), k, decay); i++; return r }
			da, dp := both(decayed)
			if math.Float32bits(da) != math.Float32bits(dp) || !slices.Equal(rows[0], rows[1]) {
				t.Fatalf("n=%d in place %v: decayRow's kernel gives %v, the Go %v (rows equal: %v)", n, inPlace, da, dp, slices.Equal(rows[0], rows[1]))
			}
			i = 0
			updated := func() float32 { r := updateRow(rows[i], k, q, d); i++; return r }
			ua, up := both(updated)
			if math.Float32bits(ua) != math.Float32bits(up) || !slices.Equal(rows[0], rows[1]) {
				t.Fatalf("n=%d in place %v: updateRow's kernel gives %v, the Go %v (rows equal: %v)", n, inPlace, ua, up, slices.Equal(rows[0], rows[1]))
			}
		}
	}
}
