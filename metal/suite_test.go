package metal_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal"
	"github.com/meshnode/meshnode/metal/metalemu"
	"github.com/meshnode/meshnode/metal/mtl"
)

// The kernel suite runs twice: against the CPU stand-in for a Metal
// device (TestEmu*, everywhere a C++ compiler is), which executes the
// kernels' MSL as host C++, and against the real device (TestGPU*,
// skipped without one). Each kernel is compared with the CPU backend on
// random inputs. The kernels reproduce the CPU's float32 arithmetic, so
// most comparisons are exact; the tolerances below say where they are not
// and why.

// tolerance bounds |metal − cpu| / max(1, max |cpu|) per kernel.
var tolerance = map[string]float64{
	// Exact: the same float32 operations in the same order; the
	// prefill's simdgroup-matrix sums are of integers below 2^24.
	"matmul": 0, "embed": 0, "rope": 0, "argmax": 0,
	// expf's fma is rounded once here and twice (to float64, then
	// float32) on the CPU; and a GPU's division may be rounded otherwise
	// than IEEE's. Either moves a result by an ulp at most; on the
	// stand-in's test inputs none does.
	"elementwise": 1e-6,
	// RMSNorm's Σx² and the softmax's Σe are float64 sums on the CPU and
	// float-float sums here (about 48 bits, added as a tree): they round
	// to the same float32 except, rarely, by one ulp.
	"rmsnorm": 1e-6, "attend": 1e-6,
}

// emuConfig is the stand-in device the tests open unless they say
// otherwise.
var emuConfig = metalemu.Config{}

// newEmuDevice opens the stand-in as a device.
func newEmuDevice(t testing.TB, cfg metalemu.Config) *metalemu.Device {
	t.Helper()
	if testing.Short() {
		t.Skip("the Metal stand-in runs kernels slowly: not in -short")
	}
	d, err := metalemu.Open(metalemu.Path(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newEmu opens a backend on the CPU stand-in.
func newEmu(t testing.TB, cfg metalemu.Config) (*metal.Backend, *metalemu.Device) {
	t.Helper()
	d := newEmuDevice(t, cfg)
	be, err := metal.New(metal.Options{Device: d})
	if err != nil {
		t.Fatal(err)
	}
	return be, d
}

// gpuDevice is the device of the GPU tests and the benchmark: the
// system's default Metal device, or the CPU stand-in where
// metalemu.StandIn says.
func gpuDevice(tb testing.TB) mtl.Device {
	if metalemu.StandIn() {
		return newEmuDevice(tb, emuConfig)
	}
	return nil
}

// newGPU opens a backend on gpuDevice, or skips where there is no device.
func newGPU(t testing.TB) *metal.Backend {
	t.Helper()
	be, err := metal.New(metal.Options{Device: gpuDevice(t)})
	if errors.Is(err, metal.ErrNoDevice) {
		t.Skipf("no Metal device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	info := be.Info()
	t.Logf("device: %s, MSL %s (compiled in %v), working set %d MiB, unified %v", info.Name, info.Language,
		info.Compile.Round(time.Millisecond), info.WorkingSet>>20, info.Unified)
	return be
}

// pair runs the same operations on the CPU backend and on one under test.
type pair struct {
	t     testing.TB
	cpu   *cpu.Backend
	dev   backend.Backend
	rng   *rand.Rand
	worst map[string]float64 // per kernel, logged at the end
}

func newPair(t testing.TB, dev backend.Backend) *pair {
	c := cpu.New(cpu.Options{Threads: 2})
	p := &pair{t: t, cpu: c, dev: dev, rng: rand.New(rand.NewPCG(1, 2)), worst: map[string]float64{}}
	t.Cleanup(func() {
		c.Close()
		for k, w := range p.worst {
			t.Logf("%s: worst relative error %.3g (tolerance %.3g)", k, w, tolerance[k])
		}
	})
	return p
}

// tensors is one tensor on both backends.
type tensors struct{ c, d backend.Tensor }

func (p *pair) tensor(rows, cols int, vals []float32) tensors {
	tt := tensors{p.cpu.NewTensor(rows, cols), p.dev.NewTensor(rows, cols)}
	if vals != nil {
		p.cpu.Write(tt.c, vals)
		p.dev.Write(tt.d, vals)
	}
	return tt
}

func (p *pair) random(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(p.rng.NormFloat64() * scale)
	}
	return v
}

type weights struct{ c, d backend.Weight }

func (p *pair) weight(typ quant.Type, rows, cols int, data []byte) weights {
	p.t.Helper()
	c, err := p.cpu.Weight(typ, rows, cols, data)
	if err != nil {
		p.t.Fatal(err)
	}
	d, err := p.dev.Weight(typ, rows, cols, data)
	if err != nil {
		p.t.Fatal(err)
	}
	return weights{c, d}
}

// encode quantises rows of random values to typ.
func (p *pair) encode(typ quant.Type, rows, cols int, scale float64) []byte {
	p.t.Helper()
	rs, err := typ.RowSize(cols)
	if err != nil {
		p.t.Fatal(err)
	}
	out := make([]byte, rows*rs)
	for r := range rows {
		if err := quant.Quantize(typ, p.random(cols, scale), out[r*rs:(r+1)*rs]); err != nil {
			p.t.Fatal(err)
		}
	}
	return out
}

// compare reads a tensor from both and checks them within the kernel's
// tolerance, returning the relative error.
func (p *pair) compare(kernel, what string, tt tensors) float64 {
	p.t.Helper()
	n := tt.c.Len()
	want, got := make([]float32, n), make([]float32, n)
	p.cpu.Read(want, tt.c)
	p.dev.Read(got, tt.d)
	return p.check(kernel, what, want, got)
}

func (p *pair) check(kernel, what string, want, got []float32) float64 {
	p.t.Helper()
	var scale, worst float64
	at := -1
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])))
	}
	scale = max(scale, 1)
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if math.IsNaN(w) != math.IsNaN(g) {
			p.t.Errorf("%s %s: element %d is %v, want %v", kernel, what, i, g, w)
			return math.Inf(1)
		}
		if d := math.Abs(w-g) / scale; d > worst {
			worst, at = d, i
		}
	}
	tol, ok := tolerance[kernel]
	if !ok {
		p.t.Fatalf("no tolerance for %s", kernel)
	}
	p.worst[kernel] = max(p.worst[kernel], worst)
	if worst > tol {
		p.t.Errorf("%s %s: relative error %.3g at %d (got %v, want %v) exceeds %.3g", kernel, what, worst, at, got[at], want[at], tol)
	}
	return worst
}

// testKernels is the kernel suite.
func testKernels(t *testing.T, dev *metal.Backend) {
	t.Run("MatMul", func(t *testing.T) { testMatMul(t, newPair(t, dev)) })
	t.Run("Embed", func(t *testing.T) { testEmbed(t, newPair(t, dev)) })
	t.Run("RMSNorm", func(t *testing.T) { testRMSNorm(t, newPair(t, dev)) })
	t.Run("Elementwise", func(t *testing.T) { testElementwise(t, newPair(t, dev)) })
	t.Run("RoPE", func(t *testing.T) { testRoPE(t, newPair(t, dev)) })
	t.Run("Attention", func(t *testing.T) { testAttention(t, newPair(t, dev)) })
	t.Run("ArgMax", func(t *testing.T) { testArgMax(t, dev) })
}

// weightCase is one weight type with a row length it allows.
var weightCases = []struct {
	typ  quant.Type
	cols []int
}{
	{quant.Q4_0, []int{64, 1056}}, {quant.Q4_1, []int{96}}, {quant.Q5_0, []int{64}}, {quant.Q5_1, []int{96}},
	{quant.Q8_0, []int{32, 1056}}, {quant.IQ4_NL, []int{96}},
	{quant.Q2_K, []int{256, 2304}}, {quant.Q3_K, []int{512}}, {quant.Q4_K, []int{256, 2304}}, {quant.Q5_K, []int{512}},
	{quant.Q6_K, []int{256, 2304}}, {quant.IQ4_XS, []int{256, 1280}},
	{quant.F32, []int{40}}, {quant.F16, []int{72, 1000}}, {quant.BF16, []int{72}},
}

func testMatMul(t *testing.T, p *pair) {
	for _, wc := range weightCases {
		for _, cols := range wc.cols {
			// 37 rows: not a whole number of 4-row blocks; 1056 and 2304
			// columns: more than one warp step, with a partial one.
			rows := 37
			w := p.weight(wc.typ, rows, cols, p.encode(wc.typ, rows, cols, 1))
			for _, n := range []int{1, 3, 8, 11} {
				x := p.tensor(n, cols, p.random(n*cols, 2))
				y := p.tensor(n, rows, nil)
				p.cpu.MatMul(y.c, w.c, x.c)
				p.dev.MatMul(y.d, w.d, x.d)
				p.compare("matmul", fmt.Sprintf("%s %d×%d · %d rows", wc.typ, rows, cols, n), y)
			}
		}
	}
	// Products sharing an input (Q, K, V) and an input rewritten between
	// them: the quantised copy must follow the writes.
	w1 := p.weight(quant.Q8_0, 16, 64, p.encode(quant.Q8_0, 16, 64, 1))
	w2 := p.weight(quant.Q4_K, 16, 256, p.encode(quant.Q4_K, 16, 256, 1))
	x := p.tensor(2, 64, p.random(128, 1))
	x2 := p.tensor(2, 256, p.random(512, 1))
	y1, y2, y3 := p.tensor(2, 16, nil), p.tensor(2, 16, nil), p.tensor(2, 16, nil)
	for _, b := range []backend.Backend{p.cpu, p.dev} {
		xs, x2s, ys := x.c, x2.c, [3]backend.Tensor{y1.c, y2.c, y3.c}
		if b == p.dev {
			xs, x2s, ys = x.d, x2.d, [3]backend.Tensor{y1.d, y2.d, y3.d}
		}
		b.MatMul(ys[0], w1.pick(b, p), xs)
		b.MatMul(ys[1], w2.pick(b, p), x2s)
		b.Scale(xs, 3)
		b.MatMul(ys[2], w1.pick(b, p), xs)
	}
	p.compare("matmul", "shared input, first", y1)
	p.compare("matmul", "other input between", y2)
	p.compare("matmul", "input rewritten", y3)
}

func (w weights) pick(b backend.Backend, p *pair) backend.Weight {
	if b == p.dev {
		return w.d
	}
	return w.c
}

func testEmbed(t *testing.T, p *pair) {
	for _, wc := range weightCases {
		cols := wc.cols[0]
		w := p.weight(wc.typ, 50, cols, p.encode(wc.typ, 50, cols, 1))
		ids := []uint32{0, 49, 7, 7, 23}
		y := p.tensor(len(ids), cols, nil)
		p.cpu.Embed(y.c, w.c, ids)
		p.dev.Embed(y.d, w.d, ids)
		p.compare("embed", wc.typ.String(), y)
	}
}

func testRMSNorm(t *testing.T, p *pair) {
	for _, c := range []struct{ rows, cols, group int }{{1, 2048, 2048}, {5, 256, 256}, {3, 512, 64}, {2, 100, 100}} {
		w := p.weight(quant.F32, 1, c.group, f32bytes(p.random(c.group, 0.5)))
		x := p.tensor(c.rows, c.cols, p.random(c.rows*c.cols, 3))
		y := p.tensor(c.rows, c.cols, nil)
		p.cpu.RMSNorm(y.c, x.c, w.c, 1e-6)
		p.dev.RMSNorm(y.d, x.d, w.d, 1e-6)
		p.compare("rmsnorm", fmt.Sprintf("%d×%d by %d", c.rows, c.cols, c.group), y)
		// In place.
		p.cpu.RMSNorm(x.c, x.c, w.c, 1e-5)
		p.dev.RMSNorm(x.d, x.d, w.d, 1e-5)
		p.compare("rmsnorm", "in place", x)
	}
	// A norm weight stored as F16 is dequantised for the kernel.
	w := p.weight(quant.F16, 1, 64, p.encode(quant.F16, 1, 64, 1))
	x := p.tensor(2, 64, p.random(128, 1))
	p.cpu.RMSNorm(x.c, x.c, w.c, 1e-6)
	p.dev.RMSNorm(x.d, x.d, w.d, 1e-6)
	p.compare("rmsnorm", "f16 weight", x)
}

func testElementwise(t *testing.T, p *pair) {
	const rows, cols = 3, 700
	vals := p.random(rows*cols, 4)
	// Values around GeGLU's table edges and the tanh branches.
	copy(vals, []float32{-10, -9.999, 10, 10.001, 0.624, 0.625, -0.625, 0, float32(math.Copysign(0, -1)), 30, -88, 89, 1e-30})
	a := p.tensor(rows, cols, vals)
	b := p.tensor(rows, cols, p.random(rows*cols, 1))
	bias := p.weight(quant.F32, 1, cols, f32bytes(p.random(cols, 1)))
	steps := []struct {
		name string
		do   func(be backend.Backend, a, b backend.Tensor, w backend.Weight)
	}{
		{"add", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.Add(a, b) }},
		{"scale", func(be backend.Backend, a, _ backend.Tensor, _ backend.Weight) { be.Scale(a, 0.37) }},
		{"bias", func(be backend.Backend, a, _ backend.Tensor, w backend.Weight) { be.AddBias(a, w) }},
		{"softcap", func(be backend.Backend, a, _ backend.Tensor, _ backend.Weight) { be.Softcap(a, 3) }},
		{"silu", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.GLU(b, a, b, backend.SiLU) }},
		{"gelu", func(be backend.Backend, a, b backend.Tensor, _ backend.Weight) { be.GLU(a, a, b, backend.GELUTanh) }},
	}
	for _, s := range steps {
		s.do(p.cpu, a.c, b.c, bias.c)
		s.do(p.dev, a.d, b.d, bias.d)
		p.compare("elementwise", s.name+" a", a)
		p.compare("elementwise", s.name+" b", b)
	}
}

func testRoPE(t *testing.T, p *pair) {
	factors := make([]float32, 16)
	for i := range factors {
		factors[i] = 1 + float32(i)/4
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
			x := p.tensor(4, 4*c.headDim, p.random(16*c.headDim, 1))
			r := c.r
			p.cpu.RoPE(x.c, c.headDim, pos, &r)
			p.dev.RoPE(x.d, c.headDim, pos, &r)
			p.compare("rope", fmt.Sprintf("%s at %d", c.name, pos), x)
		}
	}
}

func testAttention(t *testing.T, p *pair) {
	cases := []struct {
		name string
		kv   quant.Type
		a    backend.Attention
	}{
		{"f16", quant.F16, backend.Attention{Heads: 4, KVHeads: 4, HeadDimK: 64, HeadDimV: 64, Scale: 0.125}},
		{"f32 gqa", quant.F32, backend.Attention{Heads: 8, KVHeads: 2, HeadDimK: 32, HeadDimV: 32, Scale: 0.17}},
		{"window softcap", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 128, HeadDimV: 128, Scale: 1, Window: 5, Softcap: 50}},
		{"wide head", quant.F16, backend.Attention{Heads: 2, KVHeads: 1, HeadDimK: 256, HeadDimV: 256, Scale: 0.0625}},
	}
	for _, c := range cases {
		a := c.a
		shapes := []backend.KVShape{{KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}, {KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}}
		cc, err := p.cpu.NewKVCache(c.kv, 80, shapes)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := p.dev.NewKVCache(c.kv, 80, shapes)
		if err != nil {
			t.Fatal(err)
		}
		pos := 0
		// A prompt of 37 tokens, then single-token steps, in layer 1.
		for _, n := range []int{37, 1, 1, 5, 1} {
			k := p.tensor(n, a.KVHeads*a.HeadDimK, p.random(n*a.KVHeads*a.HeadDimK, 1))
			v := p.tensor(n, a.KVHeads*a.HeadDimV, p.random(n*a.KVHeads*a.HeadDimV, 1))
			q := p.tensor(n, a.Heads*a.HeadDimK, p.random(n*a.Heads*a.HeadDimK, 1))
			out := p.tensor(n, a.Heads*a.HeadDimV, nil)
			p.cpu.StoreKV(cc, 1, pos, k.c, v.c)
			p.dev.StoreKV(dc, 1, pos, k.d, v.d)
			p.cpu.Attend(out.c, q.c, cc, 1, pos, &a)
			p.dev.Attend(out.d, q.d, dc, 1, pos, &a)
			p.compare("attend", fmt.Sprintf("%s, %d at %d", c.name, n, pos), out)
			pos += n
		}
	}
}

func testArgMax(t *testing.T, dev *metal.Backend) {
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
}

func f32bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, f := range v {
		b := math.Float32bits(f)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
	}
	return out
}

// settle runs the cleanups of unreachable device memory.
func settle() {
	for range 3 {
		runtime.GC()
	}
}
