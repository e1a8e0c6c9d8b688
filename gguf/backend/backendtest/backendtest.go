// Package backendtest holds a device backend's kernels to the CPU
// backend's: Pair runs the same operations on both and compares what they
// read back within a per-kernel tolerance, and Kernels is the suite every
// GPU backend (cuda, metal) runs, on its CPU stand-in in make test and on
// the device where there is one. The kernels reproduce the CPU's float32
// arithmetic, so most tolerances are zero; each backend states its own and
// why.
package backendtest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Tolerances bound |device − cpu| / max(1, max |cpu|) per kernel name
// ("matmul", "embed", "rmsnorm", "elementwise", "rope", "attend", and the
// delta net's "shortconv", "deltascan", "sigmoidmul", LFM2's
// "gatedconv"). A comparison of a
// kernel without one fails.
type Tolerances map[string]float64

// Pair runs the same operations on the CPU backend and on the one under
// test.
type Pair struct {
	T   testing.TB
	CPU *cpu.Backend
	Dev backend.Backend
	Rng *rand.Rand

	tol   Tolerances
	worst map[string]float64 // per kernel, logged at the end
}

// NewPair pairs dev with a CPU backend of its own, closed (and the worst
// error of each kernel logged) when t ends.
func NewPair(t testing.TB, dev backend.Backend, tol Tolerances) *Pair {
	c := cpu.New(cpu.Options{Threads: 2})
	p := &Pair{T: t, CPU: c, Dev: dev, Rng: rand.New(rand.NewPCG(1, 2)), tol: tol, worst: map[string]float64{}}
	t.Cleanup(func() {
		c.Close()
		for k, w := range p.worst {
			t.Logf("%s: worst relative error %.3g (tolerance %.3g)", k, w, tol[k])
		}
	})
	return p
}

// Tensors is one tensor on both backends: C on the CPU, D on the device.
type Tensors struct{ C, D backend.Tensor }

// Tensor makes a rows × cols tensor on both, set to vals unless nil.
func (p *Pair) Tensor(rows, cols int, vals []float32) Tensors {
	tt := Tensors{p.CPU.NewTensor(rows, cols), p.Dev.NewTensor(rows, cols)}
	if vals != nil {
		p.CPU.Write(tt.C, vals)
		p.Dev.Write(tt.D, vals)
	}
	return tt
}

// Random is n normal values times scale.
func (p *Pair) Random(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(p.Rng.NormFloat64() * scale)
	}
	return v
}

// Weights is one weight on both backends.
type Weights struct{ C, D backend.Weight }

// Pick is the weight of b, one of the pair's backends.
func (w Weights) Pick(b backend.Backend, p *Pair) backend.Weight {
	if b == p.Dev {
		return w.D
	}
	return w.C
}

// Weight makes a weight of typ from data on both.
func (p *Pair) Weight(typ quant.Type, rows, cols int, data []byte) Weights {
	p.T.Helper()
	c, err := p.CPU.Weight(typ, rows, cols, data)
	if err != nil {
		p.T.Fatal(err)
	}
	d, err := p.Dev.Weight(typ, rows, cols, data)
	if err != nil {
		p.T.Fatal(err)
	}
	return Weights{c, d}
}

// Encode quantises rows of random values (times scale) to typ.
func (p *Pair) Encode(typ quant.Type, rows, cols int, scale float64) []byte {
	p.T.Helper()
	rs, err := typ.RowSize(cols)
	if err != nil {
		p.T.Fatal(err)
	}
	out := make([]byte, rows*rs)
	for r := range rows {
		if err := quant.Quantize(typ, p.Random(cols, scale), out[r*rs:(r+1)*rs]); err != nil {
			p.T.Fatal(err)
		}
	}
	return out
}

// Compare reads a tensor from both and checks them within the kernel's
// tolerance, returning the relative error.
func (p *Pair) Compare(kernel, what string, tt Tensors) float64 {
	p.T.Helper()
	n := tt.C.Len()
	want, got := make([]float32, n), make([]float32, n)
	p.CPU.Read(want, tt.C)
	p.Dev.Read(got, tt.D)
	return p.Check(kernel, what, want, got)
}

// Check is Compare of values already read.
func (p *Pair) Check(kernel, what string, want, got []float32) float64 {
	p.T.Helper()
	var scale, worst float64
	at := -1
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])))
	}
	scale = max(scale, 1)
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if math.IsNaN(w) != math.IsNaN(g) {
			p.T.Errorf("%s %s: element %d is %v, want %v", kernel, what, i, g, w)
			return math.Inf(1)
		}
		if d := math.Abs(w-g) / scale; d > worst {
			worst, at = d, i
		}
	}
	tol, ok := p.tol[kernel]
	if !ok {
		p.T.Fatalf("no tolerance for %s", kernel)
	}
	p.worst[kernel] = max(p.worst[kernel], worst)
	if worst > tol {
		p.T.Errorf("%s %s: relative error %.3g at %d (got %v, want %v) exceeds %.3g", kernel, what, worst, at, got[at], want[at], tol)
	}
	return worst
}

// F32Bytes is v as an F32 tensor's bytes (little-endian, as GGUF's).
func F32Bytes(v []float32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, f := range v {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
	}
	return out
}
