package cpu_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Kernels are checked against float64 references written from the
// formulas, with per-type tolerances.

func normals(rng *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
	return x
}

func newBackend(t testing.TB, threads int) *cpu.Backend {
	be := cpu.New(cpu.Options{Threads: threads})
	t.Cleanup(func() { be.Close() })
	return be
}

func tensor(be *cpu.Backend, rows, cols int, x []float32) backend.Tensor {
	t := be.NewTensor(rows, cols)
	if x != nil {
		be.Write(t, x)
	}
	return t
}

func read(be *cpu.Backend, t backend.Tensor) []float32 {
	out := make([]float32, t.Len())
	be.Read(out, t)
	return out
}

func quantized(t testing.TB, typ quant.Type, w []float32) []byte {
	b := make([]byte, mustRowSize(t, typ, len(w)))
	if err := quant.Quantize(typ, w, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRowSize(t testing.TB, typ quant.Type, n int) int {
	s, err := typ.RowSize(n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// matmulTolerance bounds |MatMul − Σ dequant(w)·x| relative to Σ|dequant(w)·x|:
// the error of quantising the activation to the weight's dot format.
var matmulTolerance = map[quant.Type]float64{
	quant.F32: 1e-6, quant.F16: 2e-4, quant.BF16: 2e-3,
	quant.Q8_0: 3e-3, quant.Q4_0: 3e-3, quant.Q4_1: 3e-3, quant.Q5_0: 3e-3, quant.Q5_1: 3e-3, quant.IQ4_NL: 3e-3,
	quant.Q2_K: 3e-3, quant.Q3_K: 3e-3, quant.Q4_K: 3e-3, quant.Q5_K: 3e-3, quant.Q6_K: 3e-3, quant.IQ4_XS: 3e-3,
}

func TestMatMul(t *testing.T) {
	const rows, cols, n = 37, 512, 5
	rng := rand.New(rand.NewPCG(1, 2))
	be1, be3 := newBackend(t, 1), newBackend(t, 3)
	x := normals(rng, n*cols, 1)
	for typ, tol := range matmulTolerance {
		t.Run(typ.String(), func(t *testing.T) {
			w := normals(rng, rows*cols, 0.05)
			data := quantized(t, typ, w)
			deq := make([]float32, len(w))
			if err := quant.Dequantize(typ, data, deq); err != nil {
				t.Fatal(err)
			}
			var got [][]float32
			for _, be := range []*cpu.Backend{be1, be3} {
				wt, err := be.Weight(typ, rows, cols, data)
				if err != nil {
					t.Fatal(err)
				}
				dst := tensor(be, n, rows, nil)
				be.MatMul(dst, wt, tensor(be, n, cols, x))
				got = append(got, read(be, dst))
				// Row by row: a token's result does not depend on its batch.
				for i := range n {
					one := tensor(be, 1, rows, nil)
					be.MatMul(one, wt, tensor(be, 1, cols, x[i*cols:(i+1)*cols]))
					if r := read(be, one); !slices.Equal(r, got[len(got)-1][i*rows:(i+1)*rows]) {
						t.Fatalf("row %d alone differs from row %d of the batch", i, i)
					}
				}
			}
			if !slices.Equal(got[0], got[1]) {
				t.Fatal("1 and 3 threads differ")
			}
			for i := range n {
				for r := range rows {
					var ref, mag float64
					for c := range cols {
						p := float64(deq[r*cols+c]) * float64(x[i*cols+c])
						ref += p
						mag += math.Abs(p)
					}
					if d := math.Abs(float64(got[0][i*rows+r]) - ref); d > tol*mag {
						t.Fatalf("[%d][%d] = %v, want %v (|Δ|/Σ|p| = %.2g > %.2g)", i, r, got[0][i*rows+r], ref, d/mag, tol)
					}
				}
			}
		})
	}
}

// TestMatMulPerturb checks Options.Perturb: the activations move by one
// ulp, so the products stay within the type's tolerance of unperturbed
// ones but move (F32 ones anywhere, half-precision and 8-bit ones where a
// value lies on a rounding boundary), the input stays as it was, and the same
// seed gives the same bits.
func TestMatMulPerturb(t *testing.T) {
	const rows, cols, n = 37, 512, 5
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0} {
		t.Run(typ.String(), func(t *testing.T) {
			x := normals(rng, n*cols, 1) // F32 products move anywhere
			switch typ {
			case quant.F16:
				// Halfway between two halves: one ulp up rounds to the
				// one above.
				for i := range x {
					x[i] = 1 + 1.0/2048
				}
			case quant.Q8_0:
				// Blocks of 32 whose scale is 1 and whose other values
				// lie on a rounding boundary (15.5), where one ulp down
				// takes an 8-bit activation to the quantum below.
				for i := range x {
					x[i] = 15.5
					if i%32 == 0 {
						x[i] = 127
					}
				}
			}
			data := quantized(t, typ, normals(rng, rows*cols, 0.05))
			run := func(perturb uint64) []float32 {
				be := cpu.New(cpu.Options{Threads: 2, Perturb: perturb})
				defer be.Close()
				wt, err := be.Weight(typ, rows, cols, data)
				if err != nil {
					t.Fatal(err)
				}
				dst, in := tensor(be, n, rows, nil), tensor(be, n, cols, x)
				be.MatMul(dst, wt, in)
				if !slices.Equal(read(be, in), x) {
					t.Fatal("MatMul changed its input")
				}
				return read(be, dst)
			}
			plain, p1 := run(0), run(1)
			if !slices.Equal(p1, run(1)) {
				t.Fatal("the same Perturb seed gave other bits")
			}
			if slices.Equal(plain, p1) {
				t.Fatal("Perturb left every product as it was")
			}
			for i := range plain {
				// One ulp of every activation: a relative change of
				// ~1e-7 in each product, or 8-bit quanta flipped.
				if d := math.Abs(float64(p1[i] - plain[i])); d > matmulTolerance[typ]*float64(cols)*15.5 {
					t.Fatalf("[%d]: perturbed %v, plain %v", i, p1[i], plain[i])
				}
			}
		})
	}
}

func TestWeightErrors(t *testing.T) {
	be := newBackend(t, 1)
	if _, err := be.Weight(quant.IQ2_XXS, 1, 256, make([]byte, 66)); !errors.Is(err, cpu.ErrType) {
		t.Errorf("IQ2_XXS: %v, want ErrType", err)
	}
	if _, err := be.Weight(quant.Q4_0, 2, 64, make([]byte, 71)); err == nil {
		t.Error("short data accepted")
	}
	if _, err := be.Weight(quant.Q4_K, 1, 100, make([]byte, 144)); err == nil {
		t.Error("a row that is no whole number of blocks accepted")
	}
}

func TestRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	be := newBackend(t, 2)
	const rows, cols = 3, 256
	const eps = 1e-6
	x := normals(rng, rows*cols, 2)
	for _, group := range []int{cols, 64} { // a whole row, and per head
		w := normals(rng, group, 1)
		wt, err := be.Weight(quant.F32, 1, group, f32bytes(w))
		if err != nil {
			t.Fatal(err)
		}
		xt := tensor(be, rows, cols, x)
		be.RMSNorm(xt, xt, wt, eps) // in place
		got := read(be, xt)
		for o := 0; o < len(x); o += group {
			var ss float64
			for _, v := range x[o : o+group] {
				ss += float64(v) * float64(v)
			}
			scale := 1 / math.Sqrt(ss/float64(group)+eps)
			for i := range group {
				want := float64(x[o+i]) * scale * float64(w[i])
				if d := math.Abs(float64(got[o+i]) - want); d > 1e-5*(math.Abs(want)+1e-3) {
					t.Fatalf("group %d: [%d] = %v, want %v", group, o+i, got[o+i], want)
				}
			}
		}
	}
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	if err := quant.Quantize(quant.F32, x, b); err != nil {
		panic(err)
	}
	return b
}

// ropeRef rotates one head as llama.cpp documents RoPE, in float64: pair
// i turns by pos·freqScale·base^(−2i/dims)/factor_i (YaRN aside).
func ropeRef(x []float64, pos int, r *backend.RoPE) {
	for i := 0; i < r.Dims/2; i++ {
		theta := float64(pos) * math.Pow(float64(r.Base), -2*float64(i)/float64(r.Dims))
		if r.Factors != nil {
			theta /= float64(r.Factors[i])
		}
		theta *= float64(r.FreqScale)
		a, b := 2*i, 2*i+1
		if r.NeoX {
			a, b = i, i+r.Dims/2
		}
		c, s := math.Cos(theta)*float64(r.AttnFactor), math.Sin(theta)*float64(r.AttnFactor)
		x[a], x[b] = x[a]*c-x[b]*s, x[a]*s+x[b]*c
	}
}

func TestRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	be := newBackend(t, 2)
	const rows, heads, hd = 4, 3, 64
	factors := make([]float32, 16)
	for i := range factors {
		factors[i] = 1 + float32(i)/4
	}
	for _, tc := range []struct {
		name string
		r    backend.RoPE
	}{
		{"normal", backend.RoPE{Dims: hd, Base: 10000, FreqScale: 1, AttnFactor: 1}},
		{"neox", backend.RoPE{Dims: hd, NeoX: true, Base: 1e6, FreqScale: 1, AttnFactor: 1}},
		{"partial neox", backend.RoPE{Dims: 32, NeoX: true, Base: 10000, FreqScale: 1, AttnFactor: 1, Factors: factors}},
		{"linear scale", backend.RoPE{Dims: hd, Base: 10000, FreqScale: 0.25, AttnFactor: 1.2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := normals(rng, rows*heads*hd, 1)
			xt := tensor(be, rows, heads*hd, x)
			const pos = 1000
			be.RoPE(xt, hd, pos, &tc.r)
			got := read(be, xt)
			for row := range rows {
				for h := range heads {
					off := (row*heads + h) * hd
					want := make([]float64, hd)
					for i := range want {
						want[i] = float64(x[off+i])
					}
					ropeRef(want, pos+row, &tc.r)
					for i := range want {
						// θ is accumulated in float32 as ggml does: at
						// position ~1000 that leaves ~1e-4 of angle.
						if d := math.Abs(float64(got[off+i]) - want[i]); d > 2e-4*(1+math.Abs(want[i])) {
							t.Fatalf("row %d head %d [%d] = %v, want %v", row, h, i, got[off+i], want[i])
						}
					}
				}
			}
		})
	}
}

// TestRoPEAnglesKept: a window's angles kept from an earlier call (the
// queries', then the keys' of every layer) rotate to the same bits as
// angles computed afresh, with two RoPEs (a model's local and global
// layers) taking turns at the same positions, another layer's RoPE of
// the same value, windows of other lengths at the same position, a
// prompt too long to keep, and a RoPE whose value changed at the same
// address (its base, then its factors).
func TestRoPEAnglesKept(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	be := newBackend(t, 2)
	a := backend.RoPE{Dims: 48, Base: 10000, FreqScale: 1, AttnFactor: 1}
	a2 := a // another layer's
	b := backend.RoPE{Dims: 48, NeoX: true, Base: 1e6, FreqScale: 1, AttnFactor: 1}
	c := a
	f1, f2 := make([]float32, 24), make([]float32, 24)
	for i := range f1 {
		f1[i], f2[i] = 1+float32(i)/8, 1+float32(i)/4
	}
	const hd, heads = 48, 2
	for i, call := range []struct {
		r         *backend.RoPE
		pos, rows int
		change    func()
	}{
		{&a, 7, 1, nil}, {&b, 7, 1, nil}, {&a, 7, 1, nil}, {&b, 7, 1, nil}, {&a2, 7, 1, nil}, {&a, 7, 3, nil}, {&a, 7, 1, nil}, {&a2, 7, 3, nil},
		{&a, 8, 1, nil}, {&b, 7, 3, nil}, {&a, 0, 40, nil}, {&a, 0, 40, nil}, {&b, 8, 1, nil}, {&a, 8, 1, nil},
		{&c, 9, 1, nil}, {&c, 9, 1, func() { c.Base = 5000 }}, {&c, 9, 1, func() { c.Factors = f1 }}, {&c, 9, 1, func() { c.Factors = f2 }},
	} {
		if call.change != nil {
			call.change()
		}
		x := normals(rng, call.rows*heads*hd, 1)
		xt := tensor(be, call.rows, heads*hd, x)
		be.RoPE(xt, hd, call.pos, call.r)
		fresh := newBackend(t, 1)
		ft := tensor(fresh, call.rows, heads*hd, x)
		fresh.RoPE(ft, hd, call.pos, call.r)
		got, want := read(be, xt), read(fresh, ft)
		for k := range want {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("call %d (%d rows at %d): [%d] = %v, afresh %v", i, call.rows, call.pos, k, got[k], want[k])
			}
		}
	}
}

// TestRoPEYaRN checks YaRN's two ends: dimensions below the ramp rotate as
// extrapolation (unscaled), those above as interpolation (scaled).
func TestRoPEYaRN(t *testing.T) {
	be := newBackend(t, 1)
	const hd = 64
	r := backend.RoPE{Dims: hd, NeoX: true, Base: 10000, FreqScale: 0.25, AttnFactor: 1, ExtFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 1024}
	x := make([]float32, hd)
	for i := range hd / 2 {
		x[i] = 1 // (1, 0) pairs: the result is (cos θ, sin θ)·mscale
	}
	xt := tensor(be, 1, hd, x)
	be.RoPE(xt, hd, 7, &r)
	got := read(be, xt)
	mscale := 1 + 0.1*math.Log(4)
	angle := func(i int) float64 { return math.Atan2(float64(got[i+hd/2]), float64(got[i])) }
	// Pair 0 (below the ramp, which spans pairs 5 … 18 here) turns by
	// the unscaled θ = 7 rad; compare modulo 2π.
	if math.Abs(math.Remainder(angle(0)-7, 2*math.Pi)) > 1e-5 {
		t.Errorf("pair 0 turned %v, want 7 (mod 2π)", angle(0))
	}
	last := hd/2 - 1
	want := 7 * math.Pow(10000, -2*float64(last)/hd) * 0.25
	if math.Abs(angle(last)-want) > 1e-6 {
		t.Errorf("pair %d turned %v, want %v (interpolated)", last, angle(last), want)
	}
	if n := math.Hypot(float64(got[0]), float64(got[hd/2])); math.Abs(n-mscale) > 1e-5 {
		t.Errorf("magnitude %v, want YaRN's %v", n, mscale)
	}
}

// attentionRef is causal softmax attention in float64 over keys and values
// given per position.
func attentionRef(q []float32, k, v [][]float32, a *backend.Attention, pos, heads int) []float64 {
	out := make([]float64, heads*a.HeadDimV)
	group := a.Heads / a.KVHeads
	lo := 0
	if a.Window > 0 {
		lo = max(0, pos-a.Window+1)
	}
	for h := range heads {
		kh := h / group
		scores := make([]float64, pos+1)
		top := math.Inf(-1)
		for j := lo; j <= pos; j++ {
			var s float64
			for d := range a.HeadDimK {
				s += float64(q[h*a.HeadDimK+d]) * float64(k[j][kh*a.HeadDimK+d])
			}
			if a.Softcap > 0 {
				s = float64(a.Softcap) * math.Tanh(s/float64(a.Softcap))
			}
			scores[j] = s * float64(a.Scale)
			top = max(top, scores[j])
		}
		var sum float64
		for j := lo; j <= pos; j++ {
			scores[j] = math.Exp(scores[j] - top)
			sum += scores[j]
		}
		if a.Sinks != nil {
			// The sink is one more term of the denominator (the shift by
			// top cancels).
			sum += math.Exp(float64(a.Sinks[h]) - top)
		}
		for j := lo; j <= pos; j++ {
			for d := range a.HeadDimV {
				out[h*a.HeadDimV+d] += scores[j] / sum * float64(v[j][kh*a.HeadDimV+d])
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	be := newBackend(t, 2)
	const positions = 20
	for _, tc := range []struct {
		name string
		typ  quant.Type
		a    backend.Attention
		tol  float64
	}{
		{"f32 gqa", quant.F32, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 32, HeadDimV: 32, Scale: 0.18}, 1e-5},
		{"f16 gqa", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 32, HeadDimV: 32, Scale: 0.18}, 3e-3},
		{"f32 window", quant.F32, backend.Attention{Heads: 2, KVHeads: 1, HeadDimK: 16, HeadDimV: 24, Scale: 0.25, Window: 5}, 1e-5},
		{"f32 softcap mha", quant.F32, backend.Attention{Heads: 3, KVHeads: 3, HeadDimK: 16, HeadDimV: 16, Scale: 0.25, Softcap: 2}, 1e-5},
		// Sinks from negligible to dominant (above every score: the max is
		// the sink's), with a window, as gpt-oss has them.
		{"f32 sinks window", quant.F32, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 16, HeadDimV: 16, Scale: 0.25, Window: 4,
			Sinks: []float32{-30, 0, 1.5, 40}}, 1e-5},
		{"f16 sinks", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 32, HeadDimV: 32, Scale: 0.18, Sinks: []float32{-2, 0.5, 3, 9}}, 3e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.a
			kd, vd := a.KVHeads*a.HeadDimK, a.KVHeads*a.HeadDimV
			shape := backend.KVShape{KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}
			cache, err := be.NewKVCache(tc.typ, positions, []backend.KVShape{shape, shape})
			if err != nil {
				t.Fatal(err)
			}
			var ks, vs [][]float32
			for range positions {
				ks = append(ks, normals(rng, kd, 1))
				vs = append(vs, normals(rng, vd, 1))
			}
			// Store in two batches (prompt, then more), in layer 1.
			for _, r := range [][2]int{{0, 13}, {13, positions}} {
				n := r[1] - r[0]
				be.StoreKV(cache, 1, r[0], tensor(be, n, kd, slices.Concat(ks[r[0]:r[1]]...)), tensor(be, n, vd, slices.Concat(vs[r[0]:r[1]]...)))
			}
			const pos0, n = 11, 9
			q := normals(rng, n*a.Heads*a.HeadDimK, 1)
			dst := tensor(be, n, a.Heads*a.HeadDimV, nil)
			be.Attend(dst, tensor(be, n, a.Heads*a.HeadDimK, q), cache, 1, pos0, &a)
			got := read(be, dst)
			for i := range n {
				want := attentionRef(q[i*a.Heads*a.HeadDimK:], ks, vs, &a, pos0+i, a.Heads)
				for d, w := range want {
					if diff := math.Abs(float64(got[i*a.Heads*a.HeadDimV+d]) - w); diff > tc.tol*(1+math.Abs(w)) {
						t.Fatalf("query %d [%d] = %v, want %v", i, d, got[i*a.Heads*a.HeadDimV+d], w)
					}
				}
			}
		})
	}
}

func TestKVCacheErrors(t *testing.T) {
	be := newBackend(t, 1)
	shape := []backend.KVShape{{KVHeads: 1, HeadDimK: 8, HeadDimV: 8}}
	if _, err := be.NewKVCache(quant.Q8_0, 4, shape); err == nil {
		t.Error("Q8_0 cache accepted")
	}
	if _, err := be.NewKVCache(quant.F16, 0, shape); err == nil {
		t.Error("empty cache accepted")
	}
	if _, err := be.NewKVCache(quant.F16, 4, []backend.KVShape{{KVHeads: 0, HeadDimK: 8, HeadDimV: 8}}); err == nil {
		t.Error("a layer without heads accepted")
	}
}

func TestGLUAndElementwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	be := newBackend(t, 2)
	const rows, cols = 2, 300
	g, u := normals(rng, rows*cols, 3), normals(rng, rows*cols, 1)
	g[0], g[1] = -12, 11 // GELU's table ends
	for _, tc := range []struct {
		f   backend.GLU
		ref func(float64) float64
		// tol is relative to |gate·up|: GELU is read from a table over
		// fp16 inputs, as ggml does, so an input is off by up to 2⁻¹¹ of
		// itself and the output by 2⁻¹¹ of itself.
		tol float64
	}{
		{backend.SiLU, func(x float64) float64 { return x / (1 + math.Exp(-x)) }, 1e-6},
		{backend.GELUTanh, func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*x*(1+0.044715*x*x)))
		}, 1.5e-3},
		// SwiGLUOAI's ref is the gate's factor; its up is clamped and
		// shifted below. The gate's std of 3 crosses the limit of 7.
		{backend.SwiGLUOAI, func(x float64) float64 {
			x = min(x, 7)
			return x / (1 + math.Exp(-1.702*x))
		}, 1e-6},
	} {
		dst := tensor(be, rows, cols, nil)
		up := u
		if tc.f == backend.SwiGLUOAI {
			up = slices.Clone(u)
			up[2], up[3] = 9, -8 // beyond the clamp both ways
		}
		be.GLU(dst, tensor(be, rows, cols, g), tensor(be, rows, cols, up), tc.f)
		got := read(be, dst)
		for i := range got {
			want := tc.ref(float64(g[i])) * float64(up[i])
			if tc.f == backend.SwiGLUOAI {
				want = tc.ref(float64(g[i])) * (max(-7, min(float64(up[i]), 7)) + 1)
			}
			if d := math.Abs(float64(got[i]) - want); d > tc.tol*math.Abs(want)+tc.tol*math.Abs(float64(g[i])*float64(up[i]))+1e-6 {
				t.Fatalf("GLU %d [%d]: %v, want %v", tc.f, i, got[i], want)
			}
		}
	}

	x := tensor(be, rows, cols, g)
	be.Add(x, tensor(be, rows, cols, u))
	be.Scale(x, 0.5)
	bias := normals(rng, cols, 1)
	bt, err := be.Weight(quant.F32, 1, cols, f32bytes(bias))
	if err != nil {
		t.Fatal(err)
	}
	be.AddBias(x, bt)
	be.Softcap(x, 3)
	got := read(be, x)
	for i := range got {
		v := (float64(g[i])+float64(u[i]))*0.5 + float64(bias[i%cols])
		want := 3 * math.Tanh(v/3)
		if math.Abs(float64(got[i])-want) > 1e-5 {
			t.Fatalf("elementwise [%d]: %v, want %v", i, got[i], want)
		}
	}
}

// TestElementwiseSplitMatchesOneThread: an elementwise kernel split
// between workers — a flat op in runs of elements that cross rows, a
// row-wise one in runs of rows — gives the bits one worker does, on
// tensors large enough to split (the exponentials' at a few rows, the
// additions' at tens of thousands of elements).
func TestElementwiseSplitMatchesOneThread(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	one, three := newBackend(t, 1), newBackend(t, 3)
	for _, shape := range [][2]int{{7, 333}, {3, 512}, {9, 4001}} {
		rows, cols := shape[0], shape[1]
		g, u := normals(rng, rows*cols, 3), normals(rng, rows*cols, 1)
		bias := normals(rng, cols, 1)
		run := func(be *cpu.Backend) [][]float32 {
			var out [][]float32
			for _, f := range []backend.GLU{backend.SiLU, backend.GELUTanh, backend.SwiGLUOAI} {
				dst := tensor(be, rows, cols, nil)
				be.GLU(dst, tensor(be, rows, cols, g), tensor(be, rows, cols, u), f)
				out = append(out, read(be, dst))
			}
			x := tensor(be, rows, cols, g)
			be.Add(x, tensor(be, rows, cols, u))
			be.Scale(x, 0.75)
			bw, err := be.Weight(quant.F32, 1, cols, f32bytes(bias))
			if err != nil {
				t.Fatal(err)
			}
			be.AddBias(x, bw)
			be.Softcap(x, 2)
			out = append(out, read(be, x))
			be.RMSNorm(x, x, bw, 1e-5)
			return append(out, read(be, x))
		}
		want, got := run(one), run(three)
		for k := range want {
			for i := range want[k] {
				if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("%d × %d, kernel %d [%d]: three workers %v, one %v", rows, cols, k, i, got[k][i], want[k][i])
				}
			}
		}
	}
}

func TestEmbed(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	be := newBackend(t, 1)
	const vocab, dim = 10, 64
	w := normals(rng, vocab*dim, 1)
	data := quantized(t, quant.Q8_0, w)
	wt, err := be.Weight(quant.Q8_0, vocab, dim, data)
	if err != nil {
		t.Fatal(err)
	}
	ids := []uint32{3, 9, 0, 3}
	dst := tensor(be, len(ids), dim, nil)
	be.Embed(dst, wt, ids)
	got := read(be, dst)
	rs := mustRowSize(t, quant.Q8_0, dim)
	for i, id := range ids {
		want := make([]float32, dim)
		if err := quant.Dequantize(quant.Q8_0, data[int(id)*rs:(int(id)+1)*rs], want); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[i*dim:(i+1)*dim], want) {
			t.Fatalf("row %d (token %d) is not the dequantised embedding", i, id)
		}
	}
}

func TestShapeMisfitPanics(t *testing.T) {
	be := newBackend(t, 1)
	w, err := be.Weight(quant.F32, 4, 8, make([]byte, 4*4*8))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MatMul of a 7-wide input by an 8-wide weight did not panic")
		}
	}()
	be.MatMul(be.NewTensor(1, 4), w, be.NewTensor(1, 7))
}

// TestArgMax: the in-place argmax picks the lowest index on a tie, skips
// NaN, and returns 0 for a row with nothing above -Inf, on a row of a
// tensor (its offset honoured); ArgMaxRows gives each row's.
func TestArgMax(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := []struct {
		row  []float32
		want int
	}{
		{[]float32{1, 3, 2, 3}, 1},
		{[]float32{nan, -5, nan, -4}, 3},
		{[]float32{-inf, -inf, -inf, -inf}, 0},
		{[]float32{nan, nan, nan, nan}, 0},
		{[]float32{0, 0, inf, inf}, 2},
	}
	ten := be.NewTensor(len(cases)+1, 4)
	for i, c := range cases {
		be.Write(ten.Slice(i+1, i+2), c.row)
	}
	for i, c := range cases {
		if got := be.ArgMax(ten.Slice(i+1, i+2)); got != c.want {
			t.Errorf("ArgMax(%v) = %d, want %d", c.row, got, c.want)
		}
	}
	// ArgMaxRows: every row's, shared among two workers.
	be2 := cpu.New(cpu.Options{Threads: 2})
	defer be2.Close()
	all := be2.NewTensor(len(cases)+1, 4)
	for i, c := range cases {
		be2.Write(all.Slice(i+1, i+2), c.row)
	}
	got := make([]int, len(cases))
	be2.ArgMaxRows(all.Slice(1, len(cases)+1), got)
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("ArgMaxRows row %d (%v) = %d, want %d", i, c.row, got[i], c.want)
		}
	}
}

// TestMatMulCacheSize: whether MatMul prefetches follows the weights made
// against Options.CacheBytes, and does not change a bit of its results.
//
// Where the weights are expected in cache, MatMul packs their rows for
// the kernels of one-row batches and of larger ones (the types quant.Pack
// packs); where they are read from memory, once for both, where
// quant.PacksStreamed says (unless Options.RepackStreamed), and then
// times no kernels for their one-row products. The packed products give
// the same bits.
func TestMatMulCacheSize(t *testing.T) {
	const rows = 70
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		typ  quant.Type
		cols int
	}{{quant.Q8_0, 512}, {quant.Q8_0, 192}, {quant.Q4_0, 512}, {quant.Q4_K, 512}} {
		typ, cols := tc.typ, tc.cols
		x := normals(rng, 3*cols, 1)
		data := quantized(t, typ, normals(rng, rows*cols, 0.05))
		var got [][]float32
		for _, c := range []struct {
			cache  int64
			cached []bool // after each of two weights
			repack bool
		}{
			{-1, []bool{false, false}, false},
			{1 << 40, []bool{true, true}, false},
			{2*int64(len(data)) + 1, []bool{true, false}, false},
			{-1, []bool{false, false}, true},
			{1 << 40, []bool{true, true}, true},
		} {
			be := cpu.New(cpu.Options{Threads: 2, CacheBytes: c.cache, RepackStreamed: c.repack})
			t.Cleanup(func() { be.Close() })
			var wt backend.Weight
			for i, want := range c.cached {
				var err error
				if wt, err = be.Weight(typ, rows, cols, data); err != nil {
					t.Fatal(err)
				}
				if got := be.WeightsCached(); got != want {
					t.Fatalf("%s, cache of %d bytes, %d weights of %d: cached %v, want %v", typ, c.cache, i+1, len(data), got, want)
				}
			}
			for _, n := range []int{1, 3} {
				dst := tensor(be, n, rows, nil)
				be.MatMul(dst, wt, tensor(be, n, cols, x[:n*cols]))
				got = append(got, read(be, dst))
				cached := c.cached[len(c.cached)-1]
				streamed := !cached && !c.repack && quant.PacksStreamed(typ, cols)
				want := cached && quant.Pack(typ, data, cols, n) != nil || streamed
				if packed := cpu.Packed(wt, n); packed != want {
					t.Errorf("%s × %d, cache of %d bytes, repack %v, %d rows: packed %v, want %v", typ, cols, c.cache, c.repack, n, packed, want)
				}
				if n == 1 && streamed && be.StreamedPacked() != 1 {
					t.Errorf("%s × %d: %d weights counted packed for products from memory, want 1", typ, cols, be.StreamedPacked())
				}
			}
			// A packed weight's one-row products time no kernels: the
			// band kernels read its copy.
			for range 12 {
				dst := tensor(be, 1, rows, nil)
				be.MatMul(dst, wt, tensor(be, 1, cols, x[:cols]))
			}
			band, rowsK, ahead := be.OneRowChoices()
			if tuned := band + rowsK + ahead; tuned != 0 && (c.cached[len(c.cached)-1] || !c.repack && quant.PacksStreamed(typ, cols)) {
				t.Errorf("%s × %d, cache of %d bytes, repack %v: one-row kernels timed for %d weights", typ, cols, c.cache, c.repack, tuned)
			}
		}
		for i := 2; i < len(got); i++ {
			if !slices.Equal(got[i], got[i%2]) {
				t.Fatalf("%s × %d: results differ with the cache size (run %d)", typ, cols, i)
			}
		}
	}
}
