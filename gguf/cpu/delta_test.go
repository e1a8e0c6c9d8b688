package cpu_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// deltaRef is the delta net of one sequence in float64, written from the
// formulas (backend.DeltaNetter): the causal convolution over the
// previous inputs then the rows, SiLU, L2 norms, the gates, the delta
// rule on S[h][j][i] (value component j, key component i) and the gated
// RMSNorm. It returns the outputs, n × heads·d.
func deltaRef(x, z, beta, alpha, conv, dt, a, norm []float32, n, kh, nh, d, k int, eps float64) []float64 {
	ch := (2*kh + nh) * d
	hist := make([]float64, (k-1+n)*ch) // the convolution's inputs, zero before the first row
	for r := range n {
		for i := range ch {
			hist[(k-1+r)*ch+i] = float64(x[r*ch+i])
		}
	}
	silu := func(v float64) float64 { return v / (1 + math.Exp(-v)) }
	S := make([]float64, nh*d*d)
	y := make([]float64, n*nh*d)
	for r := range n {
		xc := make([]float64, ch)
		for i := range ch {
			var s float64
			for t := range k {
				s += hist[(r+t)*ch+i] * float64(conv[i*k+t])
			}
			xc[i] = silu(s)
		}
		unit := func(v []float64) []float64 {
			var s float64
			for _, e := range v {
				s += e * e
			}
			l := max(math.Sqrt(s), eps)
			out := make([]float64, len(v))
			for i, e := range v {
				out[i] = e / l
			}
			return out
		}
		for h := range nh {
			g0 := h % kh
			q, kk := unit(xc[g0*d:(g0+1)*d]), unit(xc[kh*d+g0*d:kh*d+(g0+1)*d])
			v := xc[2*kh*d+h*d : 2*kh*d+(h+1)*d]
			g := math.Log1p(math.Exp(float64(alpha[r*nh+h]+dt[h]))) * float64(a[h])
			b := 1 / (1 + math.Exp(-float64(beta[r*nh+h])))
			M := S[h*d*d : (h+1)*d*d]
			o := make([]float64, d)
			for j := range d {
				var sk float64
				for i := range d {
					M[j*d+i] *= math.Exp(g)
					sk += M[j*d+i] * kk[i]
				}
				dj := (v[j] - sk) * b
				for i := range d {
					M[j*d+i] += kk[i] * dj
					o[j] += M[j*d+i] * q[i]
				}
				o[j] /= math.Sqrt(float64(d))
			}
			var ss float64
			for _, e := range o {
				ss += e * e
			}
			inv := 1 / math.Sqrt(ss/float64(d)+eps)
			for j := range d {
				y[r*nh*d+h*d+j] = o[j] * inv * float64(norm[j]) * silu(float64(z[r*nh*d+h*d+j]))
			}
		}
	}
	return y
}

// TestDeltaNet checks the convolution and the scan against deltaRef
// (relative to the outputs' scale, 1e-4: float32 arithmetic through a
// recurrence), a sequence split over two spans with another sequence's
// rows between, and that two states (Prev, Next) give the in-place bits,
// on one thread and on three, leaving Prev as it was.
func TestDeltaNet(t *testing.T) {
	const kh, nh, d, k, n = 2, 4, 16, 4, 6
	ch, inner := (2*kh+nh)*d, nh*d
	rng := rand.New(rand.NewPCG(7, 8))
	x := normals(rng, n*ch, 1)
	z, beta := normals(rng, n*inner, 1), normals(rng, n*nh, 2)
	alpha := normals(rng, n*nh, 6)
	alpha[3] = 24 // softplus's linear branch
	conv, dt, norm := normals(rng, ch*k, 0.5), normals(rng, nh, 1), normals(rng, d, 1)
	a := make([]float32, nh)
	for i := range a {
		a[i] = -float32(math.Exp(rng.NormFloat64()))
	}
	// Rows 0-1 and 4-5 are sequence A's, rows 2-3 sequence B's.
	var xa, za, ba, aa []float32
	for _, r := range []int{0, 1, 4, 5} {
		xa = append(xa, x[r*ch:(r+1)*ch]...)
		za = append(za, z[r*inner:(r+1)*inner]...)
		ba = append(ba, beta[r*nh:(r+1)*nh]...)
		aa = append(aa, alpha[r*nh:(r+1)*nh]...)
	}
	want := deltaRef(xa, za, ba, aa, conv, dt, a, norm, 4, kh, nh, d, k, 1e-6)

	run := func(threads int, twoStates bool) (y []float32, next, prev []float32) {
		be := newBackend(t, threads)
		w := func(v []float32, rows, cols int) backend.Weight {
			wt, err := be.Weight(quant.F32, rows, cols, f32bytes(v))
			if err != nil {
				t.Fatal(err)
			}
			return wt
		}
		params := &backend.DeltaNet{KeyHeads: kh, Heads: nh, HeadDim: d, Eps: 1e-6, DTBias: w(dt, 1, nh), A: w(a, 1, nh), Norm: w(norm, 1, d)}
		state := func() backend.DeltaState {
			return backend.DeltaState{Conv: be.NewTensor(k-1, ch), SSM: be.NewTensor(nh*d, d)}
		}
		pa, pb := state(), state()
		na := pa
		if twoStates {
			na = state()
		}
		seqs := []backend.DeltaSeq{
			{Spans: [2]backend.RowSpan{{Row: 0, N: 2}, {Row: 4, N: 2}}, Prev: pa, Next: na},
			{Spans: [2]backend.RowSpan{{Row: 2, N: 2}}, Prev: pb, Next: pb},
		}
		xt, yt := tensor(be, n, ch, x), be.NewTensor(n, inner)
		be.ShortConv(xt, w(conv, ch, k), seqs)
		be.DeltaScan(yt, xt, tensor(be, n, inner, z), tensor(be, n, nh, beta), tensor(be, n, nh, alpha), params, seqs)
		return read(be, yt), append(read(be, na.Conv), read(be, na.SSM)...), append(read(be, pa.Conv), read(be, pa.SSM)...)
	}
	y, inPlace, _ := run(1, false)
	var scale, worst float64
	for _, v := range want {
		scale = max(scale, math.Abs(v))
	}
	for i, r := range []int{0, 1, 4, 5} {
		for j := range inner {
			worst = max(worst, math.Abs(float64(y[r*inner+j])-want[i*inner+j])/scale)
		}
	}
	t.Logf("relative error %.3g against the float64 reference", worst)
	if worst > 1e-4 {
		t.Errorf("relative error %.3g exceeds 1e-4", worst)
	}
	y3, next, prev := run(3, true)
	if !slices.Equal(y3, y) || !slices.Equal(next, inPlace) {
		t.Error("two states on three threads differ from one state in place on one")
	}
	if slices.ContainsFunc(prev, func(v float32) bool { return v != 0 }) {
		t.Error("the previous state changed")
	}
}
