package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Features are the kernels beyond every backend's that a backend has, and
// Kernels runs.
type Features struct {
	// GptOss: MXFP4 weights (products, embeddings, experts that view
	// slices of one tensor), the clamped SwiGLU and attention sinks.
	GptOss bool
	// DeltaNet: the hybrid blocks' short convolution, scan and gates
	// (backend.DeltaNetter).
	DeltaNet bool
	// GatedConv: LFM2's gated short convolution (backend.GatedConver).
	GatedConv bool
}

// Device is a backend under test: it picks a row's largest value on the
// device too.
type Device interface {
	backend.Backend
	ArgMax(x backend.Tensor) int
}

// Kernels is the kernel suite: each kernel of dev against the CPU
// backend's on random inputs and edge values, within tol, a subtest a
// kernel.
func Kernels(t *testing.T, dev Device, tol Tolerances, f Features) {
	pair := func(t *testing.T) *Pair { return NewPair(t, dev, tol) }
	t.Run("MatMul", func(t *testing.T) { testMatMul(t, pair(t), f) })
	t.Run("Embed", func(t *testing.T) { testEmbed(t, pair(t), f) })
	t.Run("RMSNorm", func(t *testing.T) { testRMSNorm(t, pair(t)) })
	t.Run("Elementwise", func(t *testing.T) { testElementwise(t, pair(t), f) })
	t.Run("RoPE", func(t *testing.T) { testRoPE(t, pair(t)) })
	t.Run("Attention", func(t *testing.T) { testAttention(t, pair(t), f) })
	t.Run("ArgMax", func(t *testing.T) { testArgMax(t, dev) })
	if f.DeltaNet {
		t.Run("DeltaNet", func(t *testing.T) { testDeltaNet(t, pair(t)) })
	}
	if f.GatedConv {
		t.Run("GatedConv", func(t *testing.T) { testGatedConv(t, pair(t)) })
	}
}

// weightCase is one weight type with the row lengths it is tested at.
type weightCase struct {
	typ  quant.Type
	cols []int
}

// weightCases are the weight types every backend takes, and with f.GptOss
// MXFP4.
func weightCases(f Features) []weightCase {
	cases := []weightCase{
		{quant.Q4_0, []int{64, 1056, 2080}}, {quant.Q4_1, []int{96, 4128}}, {quant.Q5_0, []int{64}}, {quant.Q5_1, []int{96}},
		{quant.Q8_0, []int{32, 1056, 4640}}, {quant.IQ4_NL, []int{96}},
		{quant.Q2_K, []int{256, 2304}}, {quant.Q3_K, []int{512}}, {quant.Q4_K, []int{256, 2304}}, {quant.Q5_K, []int{512}},
		{quant.Q6_K, []int{256, 2304}}, {quant.IQ4_XS, []int{256, 1280}},
		{quant.F32, []int{40}}, {quant.F16, []int{72, 1000}}, {quant.BF16, []int{72}},
	}
	if f.GptOss {
		cases = append(cases, weightCase{quant.MXFP4, []int{64, 1056}})
	}
	return cases
}

func testMatMul(t *testing.T, p *Pair, f Features) {
	for _, wc := range weightCases(f) {
		for _, cols := range wc.cols {
			// 37 rows: not a whole number of 4-row blocks; 1056, 2080 and
			// 2304 columns: more than one warp step, with a partial one;
			// 4128 and 4640: past the 128 blocks a row from which CUDA's
			// block of threads shares its rows, in two passes, the last
			// partial.
			rows := 37
			w := p.Weight(wc.typ, rows, cols, p.Encode(wc.typ, rows, cols, 1))
			for _, n := range []int{1, 3, 8, 11} {
				x := p.Tensor(n, cols, p.Random(n*cols, 2))
				y := p.Tensor(n, rows, nil)
				p.CPU.MatMul(y.C, w.C, x.C)
				p.Dev.MatMul(y.D, w.D, x.D)
				p.Compare("matmul", fmt.Sprintf("%s %d×%d · %d rows", wc.typ, rows, cols, n), y)
			}
		}
	}
	// Products sharing an input (Q, K, V) and an input rewritten between
	// them: the quantised copy must follow the writes.
	w1 := p.Weight(quant.Q8_0, 16, 64, p.Encode(quant.Q8_0, 16, 64, 1))
	w2 := p.Weight(quant.Q4_K, 16, 256, p.Encode(quant.Q4_K, 16, 256, 1))
	x := p.Tensor(2, 64, p.Random(128, 1))
	x2 := p.Tensor(2, 256, p.Random(512, 1))
	y1, y2, y3 := p.Tensor(2, 16, nil), p.Tensor(2, 16, nil), p.Tensor(2, 16, nil)
	for _, b := range []backend.Backend{p.CPU, p.Dev} {
		xs, x2s, ys := x.C, x2.C, [3]backend.Tensor{y1.C, y2.C, y3.C}
		if b == p.Dev {
			xs, x2s, ys = x.D, x2.D, [3]backend.Tensor{y1.D, y2.D, y3.D}
		}
		b.MatMul(ys[0], w1.Pick(b, p), xs)
		b.MatMul(ys[1], w2.Pick(b, p), x2s)
		b.Scale(xs, 3)
		b.MatMul(ys[2], w1.Pick(b, p), xs)
	}
	p.Compare("matmul", "shared input, first", y1)
	p.Compare("matmul", "other input between", y2)
	p.Compare("matmul", "input rewritten", y3)
	if j, ok := p.Dev.(backend.Joint); ok {
		testJoint(p, j)
	}
	if f.GptOss {
		testExperts(t, p)
	}
}

// testJoint: a device's joint products (backend.Joint) against the CPU's
// MatMul of each weight: a block's query, key and value of one type, and
// a Q4_K_M block's, whose value is Q6_K; one row and windows.
func testJoint(p *Pair, j backend.Joint) {
	for name, set := range map[string][]quant.Type{"qkv": {quant.Q8_0, quant.Q8_0, quant.Q8_0}, "Q4_K_M qkv": {quant.Q4_K, quant.Q4_K, quant.Q6_K}} {
		rows := []int{48, 16, 16}
		ws := make([]Weights, len(set))
		dev := make([]backend.Weight, len(set))
		for i, typ := range set {
			ws[i] = p.Weight(typ, rows[i], 256, p.Encode(typ, rows[i], 256, 1))
			dev[i] = ws[i].D
		}
		for _, n := range []int{1, 5, 9} {
			x := p.Tensor(n, 256, p.Random(n*256, 1))
			ys := make([]Tensors, len(set))
			out := make([]backend.Tensor, len(set))
			for i := range set {
				ys[i] = p.Tensor(n, rows[i], nil)
				p.CPU.MatMul(ys[i].C, ws[i].C, x.C)
				out[i] = ys[i].D
			}
			j.MatMuls(out, dev, x.D)
			for i := range set {
				p.Compare("matmul", fmt.Sprintf("joint %s, weight %d (%s) · %d rows", name, i, set[i], n), ys[i])
			}
		}
	}
}

// testExperts is the mixture-of-experts path as gpt-oss takes it
// (gguf/model/moe.go): each expert a weight viewing its slice of one 3-D
// MXFP4 tensor (here 255 bytes each, so every expert but the first starts
// at an odd offset of the tensor), multiplied with the rows routed to it
// gathered into a tensor of their own, one row (decode) or several. The
// blocks are random bytes with E8M0 scales among the smallest (the
// float32 subnormals 2^-128 and 2^-127 that e8m0_half makes of 0 and 1)
// and about 1.
func testExperts(t *testing.T, p *Pair) {
	const experts, rows, cols, n = 4, 5, 96, 9
	data := make([]byte, experts*rows*cols/32*17)
	for i := range data {
		data[i] = byte(p.Rng.Uint32())
		if i%17 == 0 {
			data[i] = []byte{0, 1, 2, 3, 125, 126, 127, 128}[p.Rng.IntN(8)]
		}
	}
	size := len(data) / experts
	all := p.Weight(quant.MXFP4, experts*rows, cols, data)
	ids := []uint32{0, 19, 7, 3, 12}
	emb := p.Tensor(len(ids), cols, nil)
	p.CPU.Embed(emb.C, all.C, ids)
	p.Dev.Embed(emb.D, all.D, ids)
	p.Compare("embed", "MXFP4 small scales", emb)
	x := p.Random(n*cols, 2)
	route := [][]int{{0, 3, 4, 8}, {2}, {}, {1, 2, 5, 6, 7, 8}}
	for e, routed := range route {
		if len(routed) == 0 {
			continue // an expert no row chose is not read
		}
		w := p.Weight(quant.MXFP4, rows, cols, data[e*size:(e+1)*size])
		var g []float32
		for _, r := range routed {
			g = append(g, x[r*cols:(r+1)*cols]...)
		}
		xe := p.Tensor(len(routed), cols, g)
		y := p.Tensor(len(routed), rows, nil)
		p.CPU.MatMul(y.C, w.C, xe.C)
		p.Dev.MatMul(y.D, w.D, xe.D)
		p.Compare("matmul", fmt.Sprintf("expert %d of %d, %d rows", e, experts, len(routed)), y)
	}
}

func testEmbed(t *testing.T, p *Pair, f Features) {
	for _, wc := range weightCases(f) {
		cols := wc.cols[0]
		w := p.Weight(wc.typ, 50, cols, p.Encode(wc.typ, 50, cols, 1))
		ids := []uint32{0, 49, 7, 7, 23}
		y := p.Tensor(len(ids), cols, nil)
		p.CPU.Embed(y.C, w.C, ids)
		p.Dev.Embed(y.D, w.D, ids)
		p.Compare("embed", wc.typ.String(), y)
	}
}

func testRMSNorm(t *testing.T, p *Pair) {
	for _, c := range []struct{ rows, cols, group int }{{1, 2048, 2048}, {5, 256, 256}, {3, 512, 64}, {2, 100, 100}, {2, 4100, 4100}} {
		w := p.Weight(quant.F32, 1, c.group, F32Bytes(p.Random(c.group, 0.5)))
		x := p.Tensor(c.rows, c.cols, p.Random(c.rows*c.cols, 3))
		y := p.Tensor(c.rows, c.cols, nil)
		p.CPU.RMSNorm(y.C, x.C, w.C, 1e-6)
		p.Dev.RMSNorm(y.D, x.D, w.D, 1e-6)
		p.Compare("rmsnorm", fmt.Sprintf("%d×%d by %d", c.rows, c.cols, c.group), y)
		// In place.
		p.CPU.RMSNorm(x.C, x.C, w.C, 1e-5)
		p.Dev.RMSNorm(x.D, x.D, w.D, 1e-5)
		p.Compare("rmsnorm", "in place", x)
	}
	// The residual add just before a norm, which the GPU backends launch as
	// one kernel (a row that fits its threads' registers and a wider one),
	// and the products each norm feeds (Q8_0, Q4_1 and Q4_K weights: the
	// three activation types), whose quantisation CUDA launches with the
	// norm: each product is compared with the CPU's of the device's norm
	// output, since the norms may differ by an ulp.
	q8 := func(what string, y, out Tensors, wq Weights) {
		yd := make([]float32, y.D.Len())
		p.Dev.MatMul(out.D, wq.D, y.D)
		p.Dev.Read(yd, y.D)
		p.CPU.Write(y.C, yd)
		p.CPU.MatMul(out.C, wq.C, y.C)
		p.Compare("matmul", what, out)
	}
	for _, cols := range []int{2048, 4100, 4128} {
		w := p.Weight(quant.F32, 1, cols, F32Bytes(p.Random(cols, 0.5)))
		x := p.Tensor(2, cols, p.Random(2*cols, 3))
		a := p.Tensor(2, cols, p.Random(2*cols, 1))
		y := p.Tensor(2, cols, nil)
		out := p.Tensor(2, 5, nil)
		p.CPU.Add(x.C, a.C)
		p.CPU.RMSNorm(y.C, x.C, w.C, 1e-6)
		p.Dev.Add(x.D, a.D)
		p.Dev.RMSNorm(y.D, x.D, w.D, 1e-6)
		p.Compare("rmsnorm", fmt.Sprintf("after an add, %d wide", cols), y)
		p.Compare("rmsnorm", fmt.Sprintf("the add before it, %d wide", cols), x)
		for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_1, quant.Q4_K} {
			if cols%typ.BlockSize() != 0 {
				continue
			}
			wq := p.Weight(typ, 5, cols, p.Encode(typ, 5, cols, 1))
			p.Dev.Add(x.D, a.D)
			p.Dev.RMSNorm(y.D, x.D, w.D, 1e-6)
			q8(fmt.Sprintf("%s after an add and a norm, %d wide", typ, cols), y, out, wq)
			p.Dev.RMSNorm(y.D, x.D, w.D, 1e-5)
			q8(fmt.Sprintf("%s after a norm, %d wide", typ, cols), y, out, wq)
		}
	}
	// A norm weight stored as F16 is dequantised for the kernel.
	w := p.Weight(quant.F16, 1, 64, p.Encode(quant.F16, 1, 64, 1))
	x := p.Tensor(2, 64, p.Random(128, 1))
	p.CPU.RMSNorm(x.C, x.C, w.C, 1e-6)
	p.Dev.RMSNorm(x.D, x.D, w.D, 1e-6)
	p.Compare("rmsnorm", "f16 weight", x)
}

func testElementwise(t *testing.T, p *Pair, f Features) {
	const rows, cols = 3, 700
	vals := p.Random(rows*cols, 4)
	// Values around GeGLU's table edges and the tanh branches.
	copy(vals, []float32{-10, -9.999, 10, 10.001, 0.624, 0.625, -0.625, 0, float32(math.Copysign(0, -1)), 30, -88, 89, 1e-30})
	a := p.Tensor(rows, cols, vals)
	b := p.Tensor(rows, cols, p.Random(rows*cols, 1))
	bias := p.Weight(quant.F32, 1, cols, F32Bytes(p.Random(cols, 1)))
	type step struct {
		name string
		do   func(be backend.Backend, a, b backend.Tensor, w backend.Weight)
	}
	steps := []step{
		{"add", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.Add(a, b) }},
		{"scale", func(be backend.Backend, a, _ backend.Tensor, _ backend.Weight) { be.Scale(a, 0.37) }},
		{"bias", func(be backend.Backend, a, _ backend.Tensor, w backend.Weight) { be.AddBias(a, w) }},
		{"softcap", func(be backend.Backend, a, _ backend.Tensor, _ backend.Weight) { be.Softcap(a, 3) }},
		{"silu", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.GLU(b, a, b, backend.SiLU) }},
		{"gelu", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.GLU(a, a, b, backend.GELUTanh) }},
	}
	if f.GptOss {
		steps = append(steps, step{"swiglu_oai", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.GLU(b, a, b, backend.SwiGLUOAI) }})
	}
	for _, s := range steps {
		s.do(p.CPU, a.C, b.C, bias.C)
		s.do(p.Dev, a.D, b.D, bias.D)
		p.Compare("elementwise", s.name+" a", a)
		p.Compare("elementwise", s.name+" b", b)
	}
	// A GLU and the product it feeds, whose quantisation CUDA launches with
	// the GLU: rows of whole 256-element blocks and rows whose last block of
	// threads is partial, for each activation type (Q8_0, Q4_1 and Q4_K
	// weights).
	for _, c := range []struct{ rows, cols int }{{3, 512}, {3, 96}} {
		g := p.Tensor(c.rows, c.cols, p.Random(c.rows*c.cols, 4))
		u := p.Tensor(c.rows, c.cols, p.Random(c.rows*c.cols, 1))
		h := p.Tensor(c.rows, c.cols, nil)
		out := p.Tensor(c.rows, 7, nil)
		for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_1, quant.Q4_K} {
			if c.cols%typ.BlockSize() != 0 {
				continue
			}
			w := p.Weight(typ, 7, c.cols, p.Encode(typ, 7, c.cols, 1))
			for _, fn := range []backend.GLU{backend.SiLU, backend.GELUTanh} {
				p.CPU.GLU(h.C, g.C, u.C, fn)
				p.CPU.MatMul(out.C, w.C, h.C)
				p.Dev.GLU(h.D, g.D, u.D, fn)
				p.Dev.MatMul(out.D, w.D, h.D)
				p.Compare("matmul", fmt.Sprintf("%s after a GLU of %d×%d", typ, c.rows, c.cols), out)
			}
		}
	}
	if f.GptOss {
		testSwiGLUOAI(t, p)
	}
}

// testSwiGLUOAI holds gpt-oss's clamped SwiGLU to the CPU's: gates and ups
// on both sides of the clamps (±7) and at them, NaN, signed zeros, and a
// sweep of gates over [-64, 8) with up 0, which compares the kernel's
// exponential (the C library's expf, as the CPU takes it) on 2^16 inputs,
// the sigmoid's underflow and the gate's large negative values included.
func testSwiGLUOAI(t *testing.T, p *Pair) {
	const n = 1 << 16
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	gate, up := p.Random(n, 10), p.Random(n, 10)
	edges := [][2]float32{{7, 7}, {7.0000005, -7}, {6.9999995, -7.0000005}, {-7, 7.5}, {100, -100}, {-100, 100},
		{nan, 1}, {1, nan}, {negZero, negZero}, {0, -1}, {-88, 3}, {-1e30, 1}, {1e-30, 2}}
	for i, e := range edges {
		gate[i], up[i] = e[0], e[1]
	}
	g, u := p.Tensor(1, n, gate), p.Tensor(1, n, up)
	p.CPU.GLU(u.C, g.C, u.C, backend.SwiGLUOAI)
	p.Dev.GLU(u.D, g.D, u.D, backend.SwiGLUOAI)
	p.Compare("elementwise", "swiglu_oai edges", u)

	for i := range gate {
		gate[i] = -64 + float32(72*float32(i)/n)
		up[i] = 0
	}
	g, u = p.Tensor(1, n, gate), p.Tensor(1, n, up)
	out := p.Tensor(1, n, nil)
	p.CPU.GLU(out.C, g.C, u.C, backend.SwiGLUOAI)
	p.Dev.GLU(out.D, g.D, u.D, backend.SwiGLUOAI)
	p.Compare("elementwise", "swiglu_oai sweep", out)
}

func testRoPE(t *testing.T, p *Pair) {
	factors := make([]float32, 16)
	for i := range factors {
		factors[i] = 1 + float32(float32(i)/4)
	}
	cases := []struct {
		name    string
		headDim int
		r       backend.RoPE
	}{
		{"llama", 64, backend.RoPE{Dims: 64, Base: 10000, FreqScale: 1}},
		{"neox", 64, backend.RoPE{Dims: 64, NeoX: true, Base: 1e6, FreqScale: 1}},
		{"factors", 32, backend.RoPE{Dims: 32, Base: 500000, FreqScale: 1, Factors: factors}},
		{"partial", 64, backend.RoPE{Dims: 32, NeoX: true, Base: 10000, FreqScale: 1, AttnFactor: 1.19}},
		{"yarn", 64, backend.RoPE{Dims: 64, NeoX: true, Base: 1e6, FreqScale: 0.25, ExtFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 1024}},
	}
	for _, c := range cases {
		for _, pos := range []int{0, 3, 300} {
			x := p.Tensor(4, 4*c.headDim, p.Random(16*c.headDim, 1))
			r := c.r
			p.CPU.RoPE(x.C, c.headDim, pos, &r)
			p.Dev.RoPE(x.D, c.headDim, pos, &r)
			p.Compare("rope", fmt.Sprintf("%s at %d", c.name, pos), x)
		}
	}
	// Q then K, as attention rotates them (one launch on the GPU
	// backends): 12 query heads and 2 key heads, more pairs than a block's
	// threads in one and fewer in the other.
	q := p.Tensor(3, 12*64, p.Random(3*12*64, 1))
	k := p.Tensor(3, 2*64, p.Random(3*2*64, 1))
	r := cases[1].r
	for _, b := range []backend.Backend{p.CPU, p.Dev} {
		qt, kt := q.C, k.C
		if b == p.Dev {
			qt, kt = q.D, k.D
		}
		b.RoPE(qt, 64, 7, &r)
		b.RoPE(kt, 64, 7, &r)
	}
	p.Compare("rope", "queries of 12 heads", q)
	p.Compare("rope", "keys of 2 heads after them", k)
}

func testAttention(t *testing.T, p *Pair, f Features) {
	type attCase struct {
		name string
		kv   quant.Type
		a    backend.Attention
	}
	cases := []attCase{
		{"f16", quant.F16, backend.Attention{Heads: 4, KVHeads: 4, HeadDimK: 64, HeadDimV: 64, Scale: 0.125}},
		{"f32 gqa", quant.F32, backend.Attention{Heads: 8, KVHeads: 2, HeadDimK: 32, HeadDimV: 32, Scale: 0.17}},
		{"window softcap", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 128, HeadDimV: 128, Scale: 1, Window: 5, Softcap: 50}},
		{"wide head", quant.F16, backend.Attention{Heads: 2, KVHeads: 1, HeadDimK: 256, HeadDimV: 256, Scale: 0.0625}},
		{"long window", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 64, HeadDimV: 64, Scale: 0.125, Window: 300}},
	}
	if f.GptOss {
		// gpt-oss's sinks: one about the scores' size, one that
		// outweighs them all (it sets the max), one too small to count
		// (its exponential underflows), one negative.
		cases = append(cases,
			attCase{"sinks window", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 64, HeadDimV: 64, Scale: 0.125, Window: 4,
				Sinks: []float32{0.7, 40, -1e4, -2.5}}},
			attCase{"sinks f32", quant.F32, backend.Attention{Heads: 4, KVHeads: 1, HeadDimK: 32, HeadDimV: 32, Scale: 0.17,
				Sinks: []float32{1.5, -0.3, 12, 0}}})
	}
	for _, c := range cases {
		a := c.a
		shapes := []backend.KVShape{{KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}, {KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}}
		cc, err := p.CPU.NewKVCache(c.kv, 400, shapes)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := p.Dev.NewKVCache(c.kv, 400, shapes)
		if err != nil {
			t.Fatal(err)
		}
		pos := 0
		// A prompt of 37 tokens, then single-token steps, in layer 1; then
		// 100 more and one, past the 128 keys a lane's four loads cover;
		// then a long context, which a GPU may attend otherwise (CUDA
		// splits a step's keys over blocks past 256): 200 more, one (past
		// a window of 300), 34, and a window of 5 whose last rows reach a
		// chunk of 128 keys its first do not.
		for _, n := range []int{37, 1, 1, 5, 1, 100, 1, 200, 1, 34, 5} {
			k := p.Tensor(n, a.KVHeads*a.HeadDimK, p.Random(n*a.KVHeads*a.HeadDimK, 1))
			v := p.Tensor(n, a.KVHeads*a.HeadDimV, p.Random(n*a.KVHeads*a.HeadDimV, 1))
			q := p.Tensor(n, a.Heads*a.HeadDimK, p.Random(n*a.Heads*a.HeadDimK, 1))
			out := p.Tensor(n, a.Heads*a.HeadDimV, nil)
			p.CPU.StoreKV(cc, 1, pos, k.C, v.C)
			p.Dev.StoreKV(dc, 1, pos, k.D, v.D)
			p.CPU.Attend(out.C, q.C, cc, 1, pos, &a)
			p.Dev.Attend(out.D, q.D, dc, 1, pos, &a)
			p.Compare("attend", fmt.Sprintf("%s, %d at %d", c.name, n, pos), out)
			pos += n
		}
	}
}

func testArgMax(t *testing.T, dev Device) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	cases := []struct {
		vals []float32
		want int
	}{
		{[]float32{1, 3, 2}, 1},
		{[]float32{5, 1, 5}, 0},
		{[]float32{-inf, -inf}, 0},
		{[]float32{nan, -inf, 2, nan, 2}, 2},
		{[]float32{nan, nan}, 0},
		{[]float32{-1, inf, 0}, 1},
	}
	long := make([]float32, 50000)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range long {
		long[i] = rng.Float32()
	}
	long[31337], long[41000] = 2, 2
	cases = append(cases, struct {
		vals []float32
		want int
	}{long, 31337})
	for _, c := range cases {
		x := dev.NewTensor(1, len(c.vals))
		dev.Write(x, c.vals)
		if got := dev.ArgMax(x); got != c.want {
			t.Errorf("ArgMax of %d values = %d, want %d", len(c.vals), got, c.want)
		}
	}
	// Every row of a tensor at once, where the device can (a batched
	// step's greedy tokens, model.RowArgMaxer); the last row ties.
	want := []int{31337, 7, len(long) - 1, 0, 20000}
	all := make([]float32, 0, len(want)*len(long))
	for r, at := range want {
		row := slices.Clone(long)
		row[at] = 3 + float32(r)
		if r == len(want)-1 {
			row[30000] = row[at]
		}
		all = append(all, row...)
	}
	x := dev.NewTensor(len(want), len(long))
	dev.Write(x, all)
	if rd, ok := dev.(interface{ ArgMaxRows(backend.Tensor, []int) }); ok {
		got := make([]int, len(want))
		rd.ArgMaxRows(x, got)
		if !slices.Equal(got, want) {
			t.Errorf("ArgMaxRows of %d rows of %d = %v, want %v", len(want), len(long), got, want)
		}
	}
	// And each row's pick with its softmax probability (model.TopProber):
	// those rows, a peaked row with logits more than 16 below its top, and
	// a tie between two of four, the rest -Inf.
	tp, ok := dev.(interface {
		TopProbRows(backend.Tensor, []int, []float64)
	})
	if !ok {
		return
	}
	inf32 := float32(math.Inf(-1))
	small := []float32{0, 20, 1, 19.5, inf32, 5, inf32, 5}
	for _, c := range []struct {
		x    backend.Tensor
		vals []float32
		want []int
	}{{x, all, want}, {dev.NewTensor(2, 4), small, []int{1, 1}}} {
		dev.Write(c.x, c.vals)
		n := len(c.vals) / len(c.want)
		ids, probs := make([]int, len(c.want)), make([]float64, len(c.want))
		tp.TopProbRows(c.x, ids, probs)
		for r, at := range c.want {
			row := c.vals[r*n : (r+1)*n]
			sum := 1.0 // the top's own term; those more than 16 below it left out
			for i, l := range row {
				if d := float64(row[at] - l); i != at && d < 16 {
					sum += math.Exp(-d)
				}
			}
			if ids[r] != at || math.Abs(probs[r]-1/sum) > 1e-6/sum {
				t.Errorf("TopProbRows row %d of %d = %d, %.7f; want %d, %.7f", r, n, ids[r], probs[r], at, 1/sum)
			}
		}
	}
}

// testDeltaNet runs the short convolution and the scan on both backends
// over three steps of two sequences, one advanced in place and one from a
// previous state into the next (then swapped, as a session does), with
// head sizes a warp does and does not divide; the scan's state layouts
// differ, so the outputs of later steps are what compares them.
func testDeltaNet(t *testing.T, p *Pair) {
	dev, ok := p.Dev.(backend.DeltaNetter)
	if !ok {
		t.Fatal("the backend has no delta-net kernels")
	}
	for _, sz := range []int{32, 40} {
		const kh, nh, k, n = 2, 4, 4, 8
		ch, inner := (2*kh+nh)*sz, nh*sz
		conv := p.Weight(quant.F32, ch, k, F32Bytes(p.Random(ch*k, 0.5)))
		a := make([]float32, nh)
		for i := range a {
			a[i] = -float32(math.Exp(p.Rng.NormFloat64()))
		}
		// Both sides' Weights from one draw.
		dtv, normv := p.Random(nh, 1), p.Random(sz, 1)
		mk := func(v []float32) Weights { return p.Weight(quant.F32, 1, len(v), F32Bytes(v)) }
		dtw, aw, normw := mk(dtv), mk(a), mk(normv)
		dc := &backend.DeltaNet{KeyHeads: kh, Heads: nh, HeadDim: sz, Eps: 1e-6, DTBias: dtw.C, A: aw.C, Norm: normw.C}
		dd := &backend.DeltaNet{KeyHeads: kh, Heads: nh, HeadDim: sz, Eps: 1e-6, DTBias: dtw.D, A: aw.D, Norm: normw.D}

		type state struct{ conv, ssm Tensors }
		newState := func() state {
			return state{p.Tensor(k-1, ch, nil), p.Tensor(nh*sz, sz, nil)}
		}
		// Sequence 0 alternates two states; sequence 1 is in place.
		s0 := [2]state{newState(), newState()}
		s1 := newState()
		seqs := func(side int, cur int) []backend.DeltaSeq {
			pick := func(st state) backend.DeltaState {
				if side == 0 {
					return backend.DeltaState{Conv: st.conv.C, SSM: st.ssm.C}
				}
				return backend.DeltaState{Conv: st.conv.D, SSM: st.ssm.D}
			}
			return []backend.DeltaSeq{
				{Spans: [2]backend.RowSpan{{Row: 0, N: 3}, {Row: 7, N: 1}}, Prev: pick(s0[cur]), Next: pick(s0[1-cur])},
				{Spans: [2]backend.RowSpan{{Row: 3, N: 4}}, Prev: pick(s1), Next: pick(s1)},
			}
		}
		for step := range 3 {
			what := fmt.Sprintf("head %d, step %d", sz, step)
			cur := step % 2
			x := p.Tensor(n, ch, p.Random(n*ch, 1))
			z := p.Tensor(n, inner, p.Random(n*inner, 1))
			beta := p.Tensor(n, nh, p.Random(n*nh, 2))
			av := p.Random(n*nh, 8)
			av[1] = 25 // softplus's linear branch
			alpha := p.Tensor(n, nh, av)
			y := p.Tensor(n, inner, nil)
			before := make([]float32, nh*sz*sz)
			p.Dev.Read(before, s0[cur].ssm.D)

			p.CPU.ShortConv(x.C, conv.C, seqs(0, cur))
			dev.ShortConv(x.D, conv.D, seqs(1, cur))
			p.Compare("shortconv", what, x)
			p.Compare("shortconv", what+" state", s0[1-cur].conv)
			p.Compare("shortconv", what+" in-place state", s1.conv)

			p.CPU.DeltaScan(y.C, x.C, z.C, beta.C, alpha.C, dc, seqs(0, cur))
			dev.DeltaScan(y.D, x.D, z.D, beta.D, alpha.D, dd, seqs(1, cur))
			p.Compare("deltascan", what, y)

			after := make([]float32, nh*sz*sz)
			p.Dev.Read(after, s0[cur].ssm.D)
			if !slices.Equal(before, after) {
				t.Errorf("%s: the scan changed its previous state", what)
			}
			if step > 0 && slices.Equal(after, make([]float32, len(after))) {
				t.Errorf("%s: the previous state is empty", what)
			}
		}
	}
	// The gates: elementwise (the attention's) and one per row (the
	// shared expert's), with inputs past float32's e^x range.
	for _, gc := range []int{24, 1} {
		xv := p.Random(5*24, 2)
		gv := p.Random(5*gc, 6)
		gv[0] = -120
		x := p.Tensor(5, 24, xv)
		g := p.Tensor(5, gc, gv)
		p.CPU.SigmoidMul(x.C, g.C)
		dev.SigmoidMul(x.D, g.D)
		p.Compare("sigmoidmul", fmt.Sprintf("gate of %d columns", gc), x)
	}
}

// testGatedConv runs the gated convolution on both backends over three
// steps of two sequences, one from a previous state into the next (then
// swapped, as a session does) and one in place, at widths a block of
// threads does and does not divide, and at LFM2's 3 taps and more.
func testGatedConv(t *testing.T, p *Pair) {
	dev, ok := p.Dev.(backend.GatedConver)
	if !ok {
		t.Fatal("the backend has no gated convolution")
	}
	for _, sh := range []struct{ ch, k int }{{256, 3}, {300, 3}, {40, 5}} {
		const n = 8
		ch, k := sh.ch, sh.k
		w := p.Weight(quant.F32, ch, k, F32Bytes(p.Random(ch*k, 0.5)))
		s0 := [2]Tensors{p.Tensor(k-1, ch, nil), p.Tensor(k-1, ch, nil)}
		s1 := p.Tensor(k-1, ch, nil)
		seqs := func(side, cur int) []backend.DeltaSeq {
			pick := func(st Tensors) backend.DeltaState {
				if side == 0 {
					return backend.DeltaState{Conv: st.C}
				}
				return backend.DeltaState{Conv: st.D}
			}
			return []backend.DeltaSeq{
				{Spans: [2]backend.RowSpan{{Row: 0, N: 3}, {Row: 7, N: 1}}, Prev: pick(s0[cur]), Next: pick(s0[1-cur])},
				{Spans: [2]backend.RowSpan{{Row: 3, N: 4}}, Prev: pick(s1), Next: pick(s1)},
			}
		}
		for step := range 3 {
			what := fmt.Sprintf("%d channels, %d taps, step %d", ch, k, step)
			cur := step % 2
			bcx := p.Tensor(n, 3*ch, p.Random(n*3*ch, 1))
			y := p.Tensor(n, ch, nil)
			p.CPU.GatedConv(y.C, bcx.C, w.C, seqs(0, cur))
			dev.GatedConv(y.D, bcx.D, w.D, seqs(1, cur))
			p.Compare("gatedconv", what, y)
			p.Compare("gatedconv", what+" state", s0[1-cur])
			p.Compare("gatedconv", what+" in-place state", s1)
		}
	}
}
