package metal

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal/kernels"
	"github.com/meshnode/meshnode/metal/mtl"
)

// attBudget bounds the attention scores scratch: a long prompt's queries
// are attended in dispatches of as many rows as fit.
const attBudget = 64 << 20

// wrote notes that t's buffer changed, which invalidates a quantised copy
// of it.
func (b *Backend) wrote(t backend.Tensor) {
	if b.act.valid && b.act.buf == asBuffer(t) {
		b.act.valid = false
	}
}

func sameShape(op string, ts ...backend.Tensor) {
	for _, t := range ts[1:] {
		if t.Rows != ts[0].Rows || t.Cols != ts[0].Cols {
			panic(fmt.Sprintf("metal: %s of %d × %d and %d × %d", op, ts[0].Rows, ts[0].Cols, t.Rows, t.Cols))
		}
	}
}

// Read implements backend.Backend: it commits the recorded step, waits,
// and copies from the shared buffer.
func (b *Backend) Read(dst []float32, t backend.Tensor) {
	n := t.Len()
	if len(dst) < n {
		panic(fmt.Sprintf("metal: Read of %d elements into %d", n, len(dst)))
	}
	at := tb(t)
	b.lock()
	defer b.unlock()
	must(b.sync())
	copy(dst[:n], unsafe.Slice((*float32)(unsafe.Add(at.buf.Contents(), at.off)), n))
	b.stats.ReadBytes += int64(4 * n)
	runtime.KeepAlive(t)
}

// Write implements backend.Backend: after the recorded work (which may
// read t), it copies into the shared buffer.
func (b *Backend) Write(t backend.Tensor, src []float32) {
	n := t.Len()
	if len(src) < n {
		panic(fmt.Sprintf("metal: Write of %d elements from %d", n, len(src)))
	}
	at := tb(t)
	b.lock()
	defer b.unlock()
	if len(b.ops) > 0 {
		must(b.sync())
	}
	b.wrote(t)
	copy(unsafe.Slice((*float32)(unsafe.Add(at.buf.Contents(), at.off)), n), src[:n])
	b.stats.WrittenBytes += int64(4 * n)
	runtime.KeepAlive(t)
}

// Embed implements backend.Backend. Token ids travel by setBytes when
// they fit, else in a buffer.
func (b *Backend) Embed(dst backend.Tensor, table backend.Weight, ids []uint32) {
	w := asWeight(table)
	if dst.Rows != len(ids) || dst.Cols != w.cols {
		panic(fmt.Sprintf("metal: Embed of %d ids into %d × %d from %d-wide table", len(ids), dst.Rows, dst.Cols, w.cols))
	}
	for _, id := range ids {
		if int(id) >= w.rows {
			panic(fmt.Sprintf("metal: token %d outside a %d-row embedding table", id, w.rows))
		}
	}
	b.lock()
	defer b.unlock()
	k, _ := kernels.WeightKernel(w.typ, kernels.Embed)
	const per = mtl.MaxBytes / 4
	for r0 := 0; r0 < len(ids); r0 += per {
		part := ids[r0:min(len(ids), r0+per)]
		o := b.op(k, kernels.EmbedShape(w.cols, len(part)), []bind{w.at, tb(dst.Slice(r0, r0+len(part)))}, i32(w.rowSize), i32(w.cols))
		o.data = make([]byte, 4*len(part))
		for i, id := range part {
			binary.LittleEndian.PutUint32(o.data[4*i:], id)
		}
		b.record(o)
	}
	b.wrote(dst)
}

// The matrix kernels' bindings (matvec.metal): weights 0-2, outputs 3-5,
// the arguments 6, the activation from 7; and their arguments.
const (
	mvW0 = 0
	mvY0 = 3
	mvX  = 7

	mvRows0    = 0
	mvRowBytes = 3
	mvCols     = 4
	mvNX       = 5
)

// MatMul implements backend.Backend. A product that follows one of the
// same weight type and width over the same input joins its dispatch (Q, K
// and V; gate and up), up to kernels.MaxMats matrices.
func (b *Backend) MatMul(dst backend.Tensor, wt backend.Weight, x backend.Tensor) {
	w := asWeight(wt)
	n := x.Rows
	if x.Cols != w.cols || dst.Cols != w.rows || dst.Rows != n {
		panic(fmt.Sprintf("metal: MatMul %d × %d = (%d × %d) · (%d × %d)ᵀ", dst.Rows, dst.Cols, n, x.Cols, w.rows, w.cols))
	}
	xb, yb := tb(x), tb(dst)
	b.lock()
	defer b.unlock()
	act, _ := quant.VecDotType(w.typ)
	acts := []bind{xb}
	switch act {
	case quant.Q8_0:
		a := b.quantized(x, act)
		acts = []bind{a.qs, a.d}
	case quant.Q8_1, quant.Q8_K:
		a := b.quantized(x, act)
		acts = []bind{a.qs, a.d, a.ext}
	}
	k, _ := kernels.WeightKernel(w.typ, kernels.MatKind(n))
	binds := append([]bind{w.at, w.at, w.at, yb, yb, yb}, acts...)
	o := b.op(k, kernels.MatShape(w.typ, [kernels.MaxMats]int{w.rows}, n), binds, i32(w.rows), 0, 0, i32(w.rowSize), i32(w.cols), i32(n))
	if !b.joinMatMul(o, w.typ, 4*n*w.rows) {
		b.record(o)
	}
	b.wrote(dst)
}

// joinMatMul adds o's matrix to the previous recorded dispatch when that
// is a product of the same kernel over the same input, with a free slot,
// and o's output overlaps neither its input nor its outputs (they are
// computed at once).
func (b *Backend) joinMatMul(o op, t quant.Type, outBytes int) bool {
	if len(b.ops) == 0 {
		return false
	}
	last := &b.ops[len(b.ops)-1]
	if last.id != o.id || last.args[mvRowBytes] != o.args[mvRowBytes] || last.args[mvCols] != o.args[mvCols] || last.args[mvNX] != o.args[mvNX] {
		return false
	}
	for i := mvX; i < maxBinds; i++ {
		if last.binds[i].buf != o.binds[i].buf || last.binds[i].off != o.binds[i].off {
			return false
		}
	}
	nx := int(int32(o.args[mvNX]))
	y := o.binds[mvY0]
	slot := -1
	var rows [kernels.MaxMats]int
	for m := range kernels.MaxMats {
		r := int(int32(last.args[mvRows0+m]))
		rows[m] = r
		if r == 0 {
			if slot < 0 {
				slot = m
			}
			continue
		}
		if overlaps(y, outBytes, last.binds[mvY0+m], 4*nx*r) {
			return false
		}
	}
	if slot < 0 || overlaps(y, outBytes, last.binds[mvX], 4) {
		return false
	}
	last.binds[mvW0+slot] = o.binds[mvW0]
	last.binds[mvY0+slot] = y
	last.args[mvRows0+slot] = o.args[mvRows0]
	rows[slot] = int(int32(o.args[mvRows0]))
	last.shape = kernels.MatShape(t, rows, nx)
	return true
}

// quantized records x's quantisation to act in the scratch, unless the
// scratch holds it already, and returns the scratch.
func (b *Backend) quantized(x backend.Tensor, act quant.Type) *actScratch {
	a := &b.act
	buf := asBuffer(x)
	if a.valid && a.typ == act && a.buf == buf && a.off == x.Off && a.n == x.Rows && a.k == x.Cols {
		return a
	}
	elems := x.Rows * x.Cols
	nb := elems / act.BlockSize()
	round := func(n int) int { return (n + 255) &^ 255 }
	qBytes, dBytes, extBytes := round(elems), round(4*nb), 0
	switch act {
	case quant.Q8_1:
		extBytes = round(4 * nb)
	case quant.Q8_K:
		extBytes = round(4 * elems / 16)
	}
	need := qBytes + dBytes + max(extBytes, 256)
	if a.mem == nil || a.mem.size < need {
		// The old scratch stays alive while the recorded dispatches that
		// bind it do.
		m, err := b.alloc(max(need, 2*sizeOf(a.mem)))
		must(err)
		a.mem = m
	}
	*a = actScratch{mem: a.mem, valid: true, typ: act, buf: buf, off: x.Off, n: x.Rows, k: x.Cols,
		qs: a.mem.at(0), d: a.mem.at(qBytes), ext: a.mem.at(qBytes + dBytes)}
	xb := tb(x)
	switch act {
	case quant.Q8_0:
		b.dispatch(kernels.QuantizeQ8_0, kernels.Quantize(kernels.QuantizeQ8_0, nb), []bind{xb, a.qs, a.d}, i32(nb))
	case quant.Q8_1:
		b.dispatch(kernels.QuantizeQ8_1, kernels.Quantize(kernels.QuantizeQ8_1, nb), []bind{xb, a.qs, a.d, a.ext}, i32(nb))
	default:
		b.dispatch(kernels.QuantizeQ8_K, kernels.Quantize(kernels.QuantizeQ8_K, nb), []bind{xb, a.qs, a.d, a.ext}, i32(nb))
	}
	return a
}

func sizeOf(m *devMem) int {
	if m == nil {
		return 0
	}
	return m.size
}

// elementwise records kernel id over t's elements: ElemArgs {n, s, cols,
// kind}.
func (b *Backend) elementwise(id kernels.ID, t backend.Tensor, binds []bind, s float32, cols, kind int) {
	b.lock()
	defer b.unlock()
	n := t.Len()
	b.dispatch(id, kernels.Elementwise(n), binds, i32(n), f32(s), i32(cols), i32(kind))
	b.wrote(t)
}

// AddBias implements backend.Backend.
func (b *Backend) AddBias(x backend.Tensor, bias backend.Weight) {
	v := vector(bias)
	if v.cols != x.Cols {
		panic(fmt.Sprintf("metal: bias of %d for %d columns", v.cols, x.Cols))
	}
	b.elementwise(kernels.AddBias, x, []bind{tb(x), v.vec.at(0)}, 0, x.Cols, 0)
}

// RMSNorm implements backend.Backend.
func (b *Backend) RMSNorm(dst, x backend.Tensor, w backend.Weight, eps float32) {
	sameShape("RMSNorm", dst, x)
	v := vector(w)
	if x.Cols%v.cols != 0 {
		panic(fmt.Sprintf("metal: RMSNorm of %d columns in groups of %d", x.Cols, v.cols))
	}
	xb, yb := tb(x), tb(dst)
	b.lock()
	defer b.unlock()
	defer b.wrote(dst)
	// The residual add just before, of x: one dispatch (add_rms_norm).
	if len(b.ops) > 0 && v.cols == x.Cols {
		last := &b.ops[len(b.ops)-1]
		n := 4 * x.Len()
		if r := last.binds[1]; last.id == kernels.Add && last.binds[0] == xb && int(last.args[0]) == x.Len() &&
			(yb == r || !overlaps(yb, n, r, n)) {
			*last = b.op(kernels.AddRMSNorm, kernels.RMSNormShape(x.Rows, x.Cols, x.Cols), []bind{xb, r, yb, v.vec.at(0)}, i32(x.Cols), f32(eps))
			return
		}
	}
	b.dispatch(kernels.RMSNorm, kernels.RMSNormShape(x.Rows, x.Cols, v.cols), []bind{xb, yb, v.vec.at(0)}, i32(x.Cols), i32(v.cols), f32(eps))
}

// Add implements backend.Backend.
func (b *Backend) Add(dst, a backend.Tensor) {
	sameShape("Add", dst, a)
	b.elementwise(kernels.Add, dst, []bind{tb(dst), tb(a)}, 0, 0, 0)
}

// Scale implements backend.Backend.
func (b *Backend) Scale(x backend.Tensor, s float32) {
	b.elementwise(kernels.Scale, x, []bind{tb(x)}, s, 0, 0)
}

// Softcap implements backend.Backend.
func (b *Backend) Softcap(x backend.Tensor, c float32) {
	b.elementwise(kernels.Softcap, x, []bind{tb(x)}, c, 0, 0)
}

// GLU implements backend.Backend.
func (b *Backend) GLU(dst, gate, up backend.Tensor, f backend.GLU) {
	sameShape("GLU", dst, gate, up)
	var kind int
	switch f {
	case backend.SiLU:
	case backend.GELUTanh:
		kind = 1
	default:
		panic(fmt.Sprintf("metal: GLU %d", f))
	}
	b.elementwise(kernels.GLU, dst, []bind{tb(dst), tb(gate), tb(up)}, 0, 0, kind)
}

// The rope kernel's arguments (RoPEArgs).
const (
	ropeCols = iota
	ropeCols2
	ropeHead
	ropeDims
	ropeNeoX
	ropePos
)

// RoPE implements backend.Backend.
func (b *Backend) RoPE(x backend.Tensor, headDim, pos int, r *backend.RoPE) {
	if headDim <= 0 || x.Cols%headDim != 0 || r.Dims > headDim || r.Dims%2 != 0 || (r.Factors != nil && len(r.Factors) < r.Dims/2) {
		panic(fmt.Sprintf("metal: RoPE of %d columns, head %d, dims %d, %d factors", x.Cols, headDim, r.Dims, len(r.Factors)))
	}
	if pos < 0 {
		panic(fmt.Sprintf("metal: RoPE at position %d", pos))
	}
	xb := tb(x)
	b.lock()
	defer b.unlock()
	if r.Dims == 0 || x.Rows == 0 {
		return
	}
	table := b.ropeTable(r, pos+x.Rows)
	neox := 0
	if r.NeoX {
		neox = 1
	}
	o := b.op(kernels.RoPE, kernels.RoPEShape(x.Rows, 1), []bind{xb, xb, table.mem.at(0)}, i32(x.Cols), i32(x.Cols), i32(headDim), i32(r.Dims), i32(neox), i32(pos))
	// Q then K, the same rotation: one dispatch.
	if len(b.ops) > 0 {
		last := &b.ops[len(b.ops)-1]
		lx := last.binds[0]
		if last.id == kernels.RoPE && last.shape == o.shape && last.binds[1] == lx && last.binds[2] == o.binds[2] &&
			last.args[ropeHead] == o.args[ropeHead] && last.args[ropeDims] == o.args[ropeDims] && last.args[ropeNeoX] == o.args[ropeNeoX] &&
			last.args[ropePos] == o.args[ropePos] && !overlaps(xb, 4*x.Len(), lx, 4*x.Rows*int(last.args[ropeCols])) {
			last.binds[1] = xb
			last.args[ropeCols2] = o.args[ropeCols]
			last.shape = kernels.RoPEShape(x.Rows, 2)
			b.wrote(x)
			return
		}
	}
	b.record(o)
	b.wrote(x)
}

// StoreKV implements backend.Backend.
func (b *Backend) StoreKV(cache backend.KVCache, layer, pos int, k, v backend.Tensor) {
	c := asCache(cache)
	s := c.shapes[layer]
	kd, vd := s.KVHeads*s.HeadDimK, s.KVHeads*s.HeadDimV
	if k.Cols != kd || v.Cols != vd || k.Rows != v.Rows || pos < 0 || pos+k.Rows > c.capacity {
		panic(fmt.Sprintf("metal: StoreKV of %d rows at %d (k %d, v %d wide) into a %d-position cache (%d, %d)", k.Rows, pos, k.Cols, v.Cols, c.capacity, kd, vd))
	}
	kb, vb := tb(k), tb(v)
	b.lock()
	defer b.unlock()
	id := kernels.StoreKVF16
	if c.typ == quant.F32 {
		id = kernels.StoreKVF32
	}
	b.dispatch(id, kernels.StoreKVShape(k.Rows, kd, vd), []bind{kb, vb, c.k[layer].at(0), c.v[layer].at(0)},
		i32(s.KVHeads), i32(s.HeadDimK), i32(s.HeadDimV), i32(c.capacity), i32(pos))
}

// Attend implements backend.Backend.
func (b *Backend) Attend(dst, q backend.Tensor, cache backend.KVCache, layer, pos int, a *backend.Attention) {
	c := asCache(cache)
	s := c.shapes[layer]
	if a.Heads <= 0 || a.KVHeads != s.KVHeads || a.Heads%a.KVHeads != 0 || a.HeadDimK != s.HeadDimK || a.HeadDimV != s.HeadDimV ||
		q.Cols != a.Heads*a.HeadDimK || dst.Cols != a.Heads*a.HeadDimV || dst.Rows != q.Rows ||
		pos < 0 || pos+q.Rows > c.capacity {
		panic(fmt.Sprintf("metal: Attend %d × %d queries at %d over layer %d (%+v) of a %d-position cache, %+v", q.Rows, q.Cols, pos, layer, s, c.capacity, *a))
	}
	qb, ob := tb(q), tb(dst)
	b.lock()
	defer b.unlock()
	chunk := kernels.AttendChunk(q.Rows, a.Heads, c.capacity, attBudget)
	if need := chunk * a.Heads * c.capacity * 4; sizeOf(b.att) < need {
		m, err := b.alloc(need)
		must(err)
		b.att = m
	}
	id := kernels.AttendF16
	if c.typ == quant.F32 {
		id = kernels.AttendF32
	}
	for r0 := 0; r0 < q.Rows; r0 += chunk {
		rows := min(chunk, q.Rows-r0)
		b.dispatch(id, kernels.AttendShape(a.Heads, rows), []bind{qb, ob, c.k[layer].at(0), c.v[layer].at(0), b.att.at(0)},
			i32(a.Heads), i32(a.KVHeads), i32(a.HeadDimK), i32(a.HeadDimV), i32(c.capacity), i32(a.Window), f32(a.Scale), f32(a.Softcap), i32(r0), i32(pos))
	}
	b.wrote(dst)
}

// ArgMax returns the index of t's largest element, the lowest on a tie
// and 0 when none exceeds -Inf (the sampler's greedy choice), computed on
// the device in the same command buffer as the step: a decode step that
// only needs its argmax reads back 4 bytes, not the logits
// (model.ArgMaxer).
func (b *Backend) ArgMax(t backend.Tensor) int {
	at := tb(t)
	b.lock()
	defer b.unlock()
	if b.argOut == nil {
		m, err := b.alloc(16)
		must(err)
		b.argOut = m
	}
	b.dispatch(kernels.ArgMax, kernels.ArgMaxShape(b.pipes[kernels.ArgMax].MaxThreads()), []bind{at, b.argOut.at(0)}, i32(t.Len()))
	must(b.sync())
	v := *(*int32)(b.argOut.ptr())
	b.stats.ReadBytes += 4
	runtime.KeepAlive(t)
	return int(v)
}
