package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/detmath"
	"github.com/meshnode/meshnode/gguf/quant"
)

// parallelElems is the tensor size from which elementwise kernels are
// worth splitting between workers; below it, waking them costs more than
// the work. A variable so that BenchmarkGLU can compare.
var parallelElems = 1 << 15

type elemOp uint8

const (
	opRMSNorm elemOp = iota
	opAdd
	opScale
	opSoftcap
	opGLU
	opBias
)

// elemJob runs one row-wise kernel over a range of rows.
type elemJob struct {
	op         elemOp
	dst, a, b  []float32 // dst and operands, rows × cols
	w          []float32 // the norm weight or bias
	rows, cols int
	chunk      int
	s          float32 // eps, scale or cap
	glu        backend.GLU
}

func (j *elemJob) do(_, t int) {
	if j.flat() {
		// chunk counts elements: the op does not see rows.
		lo, hi := split(t, j.chunk, j.rows*j.cols)
		j.doRange(lo, hi)
		return
	}
	r0, r1 := split(t, j.chunk, j.rows)
	switch j.op {
	case opRMSNorm:
		// The rows are whole groups, one after another.
		rmsNorm(j.dst[r0*j.cols:r1*j.cols], j.a[r0*j.cols:r1*j.cols], j.w, j.s)
	case opBias:
		for r := r0; r < r1; r++ {
			dst := j.dst[r*j.cols : (r+1)*j.cols]
			for i, v := range j.w {
				dst[i] += v
			}
		}
	}
}

// flat: j's op is element by element, so its tasks may split rows.
func (j *elemJob) flat() bool { return j.op != opRMSNorm && j.op != opBias }

// doRange runs a flat op over elements lo … hi-1.
func (j *elemJob) doRange(lo, hi int) {
	switch j.op {
	case opAdd:
		dst, a := j.dst[lo:hi], j.a[lo:hi]
		for i := range dst {
			dst[i] += a[i]
		}
	case opScale:
		dst := j.dst[lo:hi]
		for i := range dst {
			dst[i] *= j.s
		}
	case opSoftcap:
		dst, c := j.dst[lo:hi], j.s
		for i, v := range dst {
			dst[i] = c * tanhf(v/c)
		}
	case opGLU:
		glu(j.dst[lo:hi], j.a[lo:hi], j.b[lo:hi], j.glu)
	}
}

// weight is what an element of j costs, in additions: an exponential
// (SiLU, GELU's tanh) costs some tens of them, so the feed-forward gate of
// a few rows, a speculative window's, is worth splitting where as many
// additions are not. From 2048 SiLU elements, not fewer: on 2 cores the
// built-in model's gate (512 a row) took 2.2 µs alone at 3 rows and 2.3
// split, 2.9 and 2.8 at 4, 3.6 and 3.0 at 5 (BenchmarkGLU).
func (j *elemJob) weight() int {
	switch j.op {
	case opGLU, opSoftcap:
		return 16
	}
	return 1
}

// runElem runs j over its rows, in parallel when it is large: a flat op
// in even runs of elements (multiples of 16, whole vectors), a row-wise
// one in runs of rows.
func (b *Backend) runElem(j elemJob) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, unit := j.rows, 1
	if j.flat() {
		n, unit = j.rows*j.cols, 16
	}
	j.chunk = n
	if n > unit && j.rows*j.cols*j.weight() >= parallelElems {
		j.chunk = ceilDiv(ceilDiv(n, b.threads), unit) * unit
	}
	b.ew = j
	b.pool.run(ceilDiv(n, j.chunk), &b.ew)
	b.ew = elemJob{}
}

// rmsNorm normalises each len(w)-element group of x into dst as ggml's
// rms_norm followed by mul does: the sum of squares in float64, the scale
// 1/√(mean+eps) in float32, then x·scale·w.
func rmsNorm(dst, x, w []float32, eps float32) {
	g := len(w)
	o := 0
	// Four groups at a time: each sum still adds its group's squares in
	// order (the same bits), but four sums in flight hide the latency
	// that one running sum waits on — a speculative window's rows, or a
	// row's heads under a per-head norm.
	for ; o+4*g <= len(x); o += 4 * g {
		a := x[o : o+g]
		b, c, d := x[o+g:o+2*g], x[o+2*g:o+3*g], x[o+3*g:o+4*g]
		b, c, d = b[:len(a)], c[:len(a)], d[:len(a)]
		var sa, sb, sc, sd float64
		for i, v := range a {
			sa += float64(v * v)
			sb += float64(b[i] * b[i])
			sc += float64(c[i] * c[i])
			sd += float64(d[i] * d[i])
		}
		for k, sum := range [4]float64{sa, sb, sc, sd} {
			normGroup(dst[o+k*g:o+(k+1)*g], x[o+k*g:o+(k+1)*g], w, sum, eps)
		}
	}
	for ; o < len(x); o += g {
		xs := x[o : o+g]
		var sum float64
		for _, v := range xs {
			sum += float64(v * v)
		}
		normGroup(dst[o:o+g], xs, w, sum, eps)
	}
}

// normGroup sets ys to the group xs normalised, its sum of squares sum:
// the scale 1/√(mean+eps) in float32, then x·scale·w.
func normGroup(ys, xs, w []float32, sum float64, eps float32) {
	mean := float32(sum / float64(len(w)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	ys, w = ys[:len(xs)], w[:len(xs)]
	for i, v := range xs {
		ys[i] = float32(v*scale) * w[i]
	}
}

func sameShape(op string, ts ...backend.Tensor) {
	for _, t := range ts[1:] {
		if t.Rows != ts[0].Rows || t.Cols != ts[0].Cols {
			panic(fmt.Sprintf("cpu: %s of %d × %d and %d × %d", op, ts[0].Rows, ts[0].Cols, t.Rows, t.Cols))
		}
	}
}

// RMSNorm implements backend.Backend.
func (b *Backend) RMSNorm(dst, x backend.Tensor, w backend.Weight, eps float32) {
	sameShape("RMSNorm", dst, x)
	v := vector(w)
	if x.Cols%len(v) != 0 {
		panic(fmt.Sprintf("cpu: RMSNorm of %d columns in groups of %d", x.Cols, len(v)))
	}
	b.runElem(elemJob{op: opRMSNorm, dst: data(dst), a: data(x), w: v, rows: x.Rows, cols: x.Cols, s: eps})
}

// Add implements backend.Backend.
func (b *Backend) Add(dst, a backend.Tensor) {
	sameShape("Add", dst, a)
	b.runElem(elemJob{op: opAdd, dst: data(dst), a: data(a), rows: dst.Rows, cols: dst.Cols})
}

// AddBias implements backend.Backend.
func (b *Backend) AddBias(x backend.Tensor, bias backend.Weight) {
	v := vector(bias)
	if len(v) != x.Cols {
		panic(fmt.Sprintf("cpu: bias of %d for %d columns", len(v), x.Cols))
	}
	b.runElem(elemJob{op: opBias, dst: data(x), w: v, rows: x.Rows, cols: x.Cols})
}

// Scale implements backend.Backend.
func (b *Backend) Scale(x backend.Tensor, s float32) {
	b.runElem(elemJob{op: opScale, dst: data(x), rows: x.Rows, cols: x.Cols, s: s})
}

// Softcap implements backend.Backend.
func (b *Backend) Softcap(x backend.Tensor, c float32) {
	b.runElem(elemJob{op: opSoftcap, dst: data(x), rows: x.Rows, cols: x.Cols, s: c})
}

// GLU implements backend.Backend.
func (b *Backend) GLU(dst, gate, up backend.Tensor, f backend.GLU) {
	sameShape("GLU", dst, gate, up)
	if f != backend.SiLU && f != backend.GELUTanh && f != backend.SwiGLUOAI {
		panic(fmt.Sprintf("cpu: GLU %d", f))
	}
	b.runElem(elemJob{op: opGLU, dst: data(dst), a: data(gate), b: data(up), rows: dst.Rows, cols: dst.Cols, glu: f})
}

func glu(dst, gate, up []float32, f backend.GLU) {
	switch f {
	case backend.SiLU:
		siluGLU(dst, gate, up)
	case backend.GELUTanh:
		geluGLU(dst, gate, up)
	case backend.SwiGLUOAI:
		for i, g := range gate {
			dst[i] = swigluOAI(g, up[i])
		}
	}
}

// geluGLU is GELU's tanh approximation through ggml's table over halves,
// times up: each gate value rounded to a half (eight at a time on the
// vector unit, quant.Quantize's F16, FP32ToFP16's bits) indexes the
// table, below −10 it is 0 and from 10 the value itself, as
// ggml_vec_gelu_f32 has it.
func geluGLU(dst, gate, up []float32) {
	tab := geluTable()
	var halves [2 * 256]byte
	for lo := 0; lo < len(gate); lo += 256 {
		hi := min(lo+256, len(gate))
		quant.Quantize(quant.F16, gate[lo:hi], halves[:2*(hi-lo)]) // a whole row of halves: cannot fail
		for i, x := range gate[lo:hi] {
			switch {
			case x <= -10:
				dst[lo+i] = 0
			case x >= 10:
				dst[lo+i] = x * up[lo+i]
			default:
				dst[lo+i] = tab[uint16(halves[2*i])|uint16(halves[2*i+1])<<8] * up[lo+i]
			}
		}
	}
}

// swigluOAI is ggml_compute_forward_swiglu_oai_f32's element: the gate
// capped above, the up clamped both ways, each product rounded, and the
// C library's expf (not ggml's vectorised one).
func swigluOAI(g, u float32) float32 {
	const alpha, limit = 1.702, 7
	x := min(g, limit)
	y := max(min(u, limit), -limit)
	out := x / float32(1+libmExpf(float32(alpha*-x)))
	return float32(out * float32(y+1))
}

// silu is x·σ(x), as ggml_v_silu computes it.
func silu(x float32) float32 {
	return x / (1 + expf(-x))
}

// geluTanh is GELU's tanh approximation, as ggml_gelu_f32 writes it.
func geluTanh(x float32) float32 {
	const (
		coefA       = 0.044715
		sqrt2OverPi = 0.79788456080286535587989211986876
	)
	inner := float32(float32(sqrt2OverPi*x) * float32(1+float32(float32(coefA*x)*x)))
	return float32(float32(0.5*x) * float32(1+tanhf(inner)))
}

// geluTable is ggml's ggml_table_gelu_f16 widened: for every half h, the
// half nearest gelu(h), as float32. ggml evaluates GeGLU through it.
var geluTable = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = quant.FP16ToFP32(quant.FP32ToFP16(geluTanh(quant.FP16ToFP32(uint16(h)))))
	}
	return &t
})

// libmExpf is the C library's expf: glibc's is correctly rounded in all but
// rare cases, as the float64 exponential rounded to float32 is (detmath's:
// the same bits on every platform).
func libmExpf(x float32) float32 { return float32(detmath.Exp(float64(x))) }
