package cuda

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// attBudget bounds the attention scores scratch: a long prompt's queries
// are attended in launches of as many rows as fit.
const attBudget = 64 << 20

// attSplitKeys is the most keys a launch's rows attend to in one kernel
// (a block per row and head, walking every key) unless
// Options.AttendSplitKeys says otherwise; past it attention runs as three
// launches that spread the keys and the output elements over
// many blocks (attend_scores, attend_softmax, attend_values in ops.cuh),
// the same arithmetic in the same order. On an H200 the one kernel took
// 13.5 µs a layer at 73 keys, and a 1B model decoded at 0.999 ms a token
// after 64 positions but 1.76 after 512: the walk over the keys is the
// difference. Where the split starts to pay has not yet been measured on
// a device; two key chunks is the guess. Only a decode step's or a
// window's few rows are split (attSplitRows): a prompt's many rows keep
// the device busy a block each.
const attSplitKeys = 2 * kernels.AttendKeysChunk

// attSplitRows is the most rows a split attention launch takes: a
// speculative window's.
const attSplitRows = 16

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
			panic(fmt.Sprintf("cuda: %s of %d × %d and %d × %d", op, ts[0].Rows, ts[0].Cols, t.Rows, t.Cols))
		}
	}
}

// Read implements backend.Backend: it launches the recorded step and waits
// for it.
func (b *Backend) Read(dst []float32, t backend.Tensor) {
	n := t.Len()
	if len(dst) < n {
		panic(fmt.Sprintf("cuda: Read of %d elements into %d", n, len(dst)))
	}
	p := ptr(t)
	b.lock()
	defer b.unlock()
	b.bind()
	must(b.sync(false))
	if n > 0 {
		must(b.lib.MemcpyDtoH(unsafe.Pointer(&dst[0]), driver.DevicePtr(p), 4*n))
		b.stats.ReadBytes += int64(4 * n)
	}
	runtime.KeepAlive(t) // p's memory, until the copy is done
	b.freeReleased()
}

// Write implements backend.Backend. Small writes travel in the step's
// argument area; large ones are copied at once, after the recorded work.
func (b *Backend) Write(t backend.Tensor, src []float32) {
	n := t.Len()
	if len(src) < n {
		panic(fmt.Sprintf("cuda: Write of %d elements from %d", n, len(src)))
	}
	p := ptr(t)
	if n == 0 {
		return
	}
	b.lock()
	defer b.unlock()
	b.wrote(t)
	if 4*n <= b.rec.arena.size/4 {
		h, d := b.reserve(4 * n)
		copy(unsafe.Slice((*float32)(h), n), src[:n])
		o := op{kind: opCopy, n: 3}
		o.args[0], o.args[1], o.args[2] = p, d, uint64(4*n)
		b.record(o)
		return
	}
	b.bind()
	must(b.sync(false))
	must(b.lib.MemcpyHtoD(driver.DevicePtr(p), unsafe.Pointer(&src[0]), 4*n))
	runtime.KeepAlive(t)
}

// Embed implements backend.Backend.
func (b *Backend) Embed(dst backend.Tensor, table backend.Weight, ids []uint32) {
	w := asWeight(table)
	if dst.Rows != len(ids) || dst.Cols != w.cols {
		panic(fmt.Sprintf("cuda: Embed of %d ids into %d × %d from %d-wide table", len(ids), dst.Rows, dst.Cols, w.cols))
	}
	for _, id := range ids {
		if int(id) >= w.rows {
			panic(fmt.Sprintf("cuda: token %d outside a %d-row embedding table", id, w.rows))
		}
	}
	out := ptr(dst)
	b.lock()
	defer b.unlock()
	k, _ := kernels.WeightKernel(w.typ, kernels.Embed)
	b.launch(k, kernels.EmbedShape(w.cols, len(ids)), w.ptr, i32(w.rowSize), i32(w.cols), b.argIDs(ids), out)
	b.wrote(dst)
}

// MatMul implements backend.Backend. A product that follows one of the
// same weight type and width over the same input joins its launch (Q, K
// and V; gate and up), up to kernels.MaxMats matrices.
func (b *Backend) MatMul(dst backend.Tensor, wt backend.Weight, x backend.Tensor) {
	w := asWeight(wt)
	n := x.Rows
	if x.Cols != w.cols || dst.Cols != w.rows || dst.Rows != n {
		panic(fmt.Sprintf("cuda: MatMul %d × %d = (%d × %d) · (%d × %d)ᵀ", dst.Rows, dst.Cols, n, x.Cols, w.rows, w.cols))
	}
	xp, yp := ptr(x), ptr(dst)
	b.lock()
	defer b.unlock()
	var qs, d, ext uint64
	if act, _ := quant.VecDotType(w.typ); act == quant.Q8_0 || act == quant.Q8_1 || act == quant.Q8_K {
		qs, d, ext = b.quantized(x, act)
	}
	k, _ := kernels.WeightKernel(w.typ, kernels.MatVecKind(n))
	o := op{kind: opLaunch, id: k, n: uint8(len(k.Params()))}
	o.args = [maxParams]uint64{
		mvW0: w.ptr, mvRows0: i32(w.rows), mvRowBytes: i32(w.rowSize), mvCols: i32(w.cols),
		mvX: xp, mvQs: qs, mvD: d, mvExt: ext, mvY0: yp, mvNX: i32(n),
	}
	if !b.joinMatMul(o, uint64(4*n*w.rows)) {
		o.shape = kernels.MatVecShape([kernels.MaxMats]int{w.rows}, n)
		b.launch(o.id, o.shape, o.args[:o.n]...)
	}
	b.wrote(dst)
}

// The matrix kernels' parameters (kernels.matVecParams).
const (
	mvW0 = iota
	mvW1
	mvW2
	mvRows0
	mvRows1
	mvRows2
	mvRowBytes
	mvCols
	mvX
	mvQs
	mvD
	mvExt
	mvY0
	mvY1
	mvY2
	mvNX
)

// joinMatMul adds o's matrix to the previous recorded launch when that is
// a product of the same kernel over the same input, with a free slot, and
// o's output overlaps neither its input nor its outputs (they run at the
// same time).
func (b *Backend) joinMatMul(o op, outBytes uint64) bool {
	ops := b.rec.ops
	if len(ops) == 0 {
		return false
	}
	last := &ops[len(ops)-1]
	if last.kind != opLaunch || last.id != o.id {
		return false
	}
	for _, a := range []int{mvRowBytes, mvCols, mvX, mvQs, mvD, mvExt, mvNX} {
		if last.args[a] != o.args[a] {
			return false
		}
	}
	nx := uint64(int32(uint32(o.args[mvNX])))
	y := o.args[mvY0]
	slot := -1
	var rows [kernels.MaxMats]int
	for m := range kernels.MaxMats {
		r := int(int32(uint32(last.args[mvRows0+m])))
		rows[m] = r
		if r == 0 {
			if slot < 0 {
				slot = m
			}
			continue
		}
		if py := last.args[mvY0+m]; y < py+4*nx*uint64(r) && py < y+outBytes {
			return false
		}
	}
	if slot < 0 {
		return false
	}
	last.args[mvW0+slot] = o.args[mvW0]
	last.args[mvRows0+slot] = o.args[mvRows0]
	last.args[mvY0+slot] = y
	rows[slot] = int(int32(uint32(o.args[mvRows0])))
	last.shape = kernels.MatVecShape(rows, int(nx))
	return true
}

// quantized records x's quantisation to act in the scratch, unless the
// scratch holds it already, and returns the quants', scales' and extra
// field's addresses.
func (b *Backend) quantized(x backend.Tensor, act quant.Type) (qs, d, ext uint64) {
	a := &b.act
	buf := asBuffer(x)
	if a.valid && a.typ == act && a.buf == buf && a.off == x.Off && a.n == x.Rows && a.k == x.Cols {
		return a.qs, a.d, a.ext
	}
	elems := x.Rows * x.Cols
	blk := act.BlockSize()
	nb := elems / blk
	round := func(n int) int { return (n + 255) &^ 255 }
	qBytes, dBytes, extBytes := round(elems), round(4*nb), 0
	switch act {
	case quant.Q8_1:
		extBytes = round(4 * nb)
	case quant.Q8_K:
		extBytes = round(4 * elems / 16)
	}
	need := qBytes + dBytes + extBytes
	if a.mem == nil || a.mem.size < need {
		// The old scratch stays until the recorded work that reads it
		// has run (it is freed at a sync).
		b.bind()
		m, err := b.alloc(max(need, 2*sizeOf(a.mem)))
		must(err)
		a.mem = m
	}
	base := uint64(a.mem.ptr)
	*a = actScratch{mem: a.mem, valid: true, typ: act, buf: buf, off: x.Off, n: x.Rows, k: x.Cols,
		qs: base, d: base + uint64(qBytes), ext: base + uint64(qBytes+dBytes)}
	xp := ptr(x)
	if b.fuseQuantize(x, xp, act, a) {
		return a.qs, a.d, a.ext
	}
	switch act {
	case quant.Q8_0:
		b.launch(kernels.QuantizeQ8_0, kernels.Quantize(kernels.QuantizeQ8_0, nb), xp, a.qs, a.d, i32(nb))
	case quant.Q8_1:
		b.launch(kernels.QuantizeQ8_1, kernels.Quantize(kernels.QuantizeQ8_1, nb), xp, a.qs, a.d, a.ext, i32(nb))
	default:
		b.launch(kernels.QuantizeQ8_K, kernels.Quantize(kernels.QuantizeQ8_K, nb), xp, a.qs, a.d, a.ext, i32(nb))
	}
	return a.qs, a.d, a.ext
}

// fuseQuantize turns the norm or GLU just recorded, whose output is all
// of x, into its twin that also quantises that output to act in a's
// scratch, and reports whether it did: the kernel and the quantisation
// the next product wants were two launches, and a launch in a graph costs
// about what either kernel does (49 pairs a step of a 1B model).
func (b *Backend) fuseQuantize(x backend.Tensor, xp uint64, act quant.Type, a *actScratch) bool {
	ops := b.rec.ops
	if len(ops) == 0 || x.Cols%act.BlockSize() != 0 {
		return false
	}
	last := &ops[len(ops)-1]
	if last.kind != opLaunch {
		return false
	}
	rows := last.shape.Grid.Y == uint32(x.Rows) // a norm's block rows
	var k kernels.ID                            // the type's offset among the fused kernels (kernels.RMSNormQ8_0 …)
	switch act {
	case quant.Q8_1:
		k = 1
	case quant.Q8_K:
		k = 2
	}
	cols := i32(x.Cols)
	switch {
	case last.id == kernels.AddRMSNorm && rows && last.args[2] == xp && last.args[4] == cols:
		last.id, last.n = kernels.AddRMSNormQ8_0+k, 9
		last.args[6], last.args[7], last.args[8] = a.qs, a.d, a.ext
	case last.id == kernels.RMSNorm && rows && last.args[1] == xp && last.args[3] == cols && last.args[4] == cols:
		last.id, last.n = kernels.RMSNormQ8_0+k, 8
		last.args = [maxParams]uint64{last.args[0], xp, last.args[2], cols, last.args[5], a.qs, a.d, a.ext}
	case last.id == kernels.GLU && last.args[0] == xp && last.args[3] == i32(x.Len()):
		last.id, last.n = kernels.GLUQ8_0+k, 8
		last.args[5], last.args[6], last.args[7] = a.qs, a.d, a.ext
	default:
		return false
	}
	return true
}

func sizeOf(m *devMem) int {
	if m == nil {
		return 0
	}
	return m.size
}

// elementwise records kernel id over t's n elements.
func (b *Backend) elementwise(id kernels.ID, t backend.Tensor, args ...uint64) {
	b.lock()
	defer b.unlock()
	b.launch(id, kernels.Elementwise(t.Len()), args...)
	b.wrote(t)
}

// AddBias implements backend.Backend.
func (b *Backend) AddBias(x backend.Tensor, bias backend.Weight) {
	v := vector(bias)
	if v.cols != x.Cols {
		panic(fmt.Sprintf("cuda: bias of %d for %d columns", v.cols, x.Cols))
	}
	b.elementwise(kernels.AddBias, x, ptr(x), uint64(v.vec.ptr), i32(x.Cols), i32(x.Len()))
}

// RMSNorm implements backend.Backend.
func (b *Backend) RMSNorm(dst, x backend.Tensor, w backend.Weight, eps float32) {
	sameShape("RMSNorm", dst, x)
	v := vector(w)
	if x.Cols%v.cols != 0 {
		panic(fmt.Sprintf("cuda: RMSNorm of %d columns in groups of %d", x.Cols, v.cols))
	}
	xp, yp := ptr(x), ptr(dst)
	b.lock()
	defer b.unlock()
	defer b.wrote(dst)
	// The residual add just before, of x: one launch (add_rms_norm).
	if ops := b.rec.ops; len(ops) > 0 && v.cols == x.Cols {
		last := &ops[len(ops)-1]
		n := uint64(4 * x.Len())
		if a := last.args[1]; last.kind == opLaunch && last.id == kernels.Add && last.args[0] == xp && last.args[2] == i32(x.Len()) &&
			(yp == a || yp+n <= a || a+n <= yp) {
			last.id, last.n = kernels.AddRMSNorm, 6
			last.shape = kernels.RMSNormShape(x.Rows, x.Cols, x.Cols)
			last.args = [maxParams]uint64{xp, a, yp, uint64(v.vec.ptr), i32(x.Cols), f32(eps)}
			return
		}
	}
	b.launch(kernels.RMSNorm, kernels.RMSNormShape(x.Rows, x.Cols, v.cols), xp, yp, uint64(v.vec.ptr), i32(x.Cols), i32(v.cols), f32(eps))
}

// Add implements backend.Backend.
func (b *Backend) Add(dst, a backend.Tensor) {
	sameShape("Add", dst, a)
	b.elementwise(kernels.Add, dst, ptr(dst), ptr(a), i32(dst.Len()))
}

// Scale implements backend.Backend.
func (b *Backend) Scale(x backend.Tensor, s float32) {
	b.elementwise(kernels.Scale, x, ptr(x), f32(s), i32(x.Len()))
}

// Softcap implements backend.Backend.
func (b *Backend) Softcap(x backend.Tensor, c float32) {
	b.elementwise(kernels.Softcap, x, ptr(x), f32(c), i32(x.Len()))
}

// GLU implements backend.Backend.
func (b *Backend) GLU(dst, gate, up backend.Tensor, f backend.GLU) {
	sameShape("GLU", dst, gate, up)
	var kind int
	switch f {
	case backend.SiLU:
	case backend.GELUTanh:
		kind = 1
	case backend.SwiGLUOAI:
		b.gluOAI(dst, gate, up)
		return
	default:
		panic(fmt.Sprintf("cuda: GLU %d", f))
	}
	b.elementwise(kernels.GLU, dst, ptr(dst), ptr(gate), ptr(up), i32(dst.Len()), i32(kind))
}

// RoPE implements backend.Backend.
func (b *Backend) RoPE(x backend.Tensor, headDim, pos int, r *backend.RoPE) {
	if headDim <= 0 || x.Cols%headDim != 0 || r.Dims > headDim || r.Dims%2 != 0 || (r.Factors != nil && len(r.Factors) < r.Dims/2) {
		panic(fmt.Sprintf("cuda: RoPE of %d columns, head %d, dims %d, %d factors", x.Cols, headDim, r.Dims, len(r.Factors)))
	}
	if pos < 0 {
		panic(fmt.Sprintf("cuda: RoPE at position %d", pos))
	}
	xp := ptr(x)
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
	pairs := x.Cols / headDim * r.Dims / 2
	o := op{kind: opLaunch, id: kernels.RoPE, n: 9, shape: kernels.RoPEShape(x.Rows, 1, pairs)}
	o.args = [maxParams]uint64{xp, 0, uint64(table.ptr), b.argPos(pos), i32(x.Cols), 0, i32(headDim), i32(r.Dims), i32(neox)}
	// Q then K, the same rotation: one launch.
	if ops := b.rec.ops; len(ops) > 0 {
		last := &ops[len(ops)-1]
		if last.kind == opLaunch && last.id == kernels.RoPE && last.shape.Grid.X == o.shape.Grid.X && last.shape.Grid.Z == 1 && last.args[2] == o.args[2] &&
			last.args[3] == o.args[3] && last.args[6] == o.args[6] && last.args[7] == o.args[7] && last.args[8] == o.args[8] &&
			(xp+uint64(4*x.Len()) <= last.args[0] || last.args[0]+4*uint64(x.Rows)*last.args[4] <= xp) {
			last.args[1], last.args[5] = xp, o.args[4]
			lastPairs := int(last.args[4]/last.args[6]) * r.Dims / 2
			last.shape = kernels.RoPEShape(x.Rows, 2, max(pairs, lastPairs))
			b.wrote(x)
			return
		}
	}
	b.launch(o.id, o.shape, o.args[:o.n]...)
	b.wrote(x)
}

// StoreKV implements backend.Backend.
func (b *Backend) StoreKV(cache backend.KVCache, layer, pos int, k, v backend.Tensor) {
	c := asCache(cache)
	s := c.shapes[layer]
	kd, vd := s.KVHeads*s.HeadDimK, s.KVHeads*s.HeadDimV
	if k.Cols != kd || v.Cols != vd || k.Rows != v.Rows || pos < 0 || pos+k.Rows > c.capacity {
		panic(fmt.Sprintf("cuda: StoreKV of %d rows at %d (k %d, v %d wide) into a %d-position cache (%d, %d)", k.Rows, pos, k.Cols, v.Cols, c.capacity, kd, vd))
	}
	kp, vp := ptr(k), ptr(v)
	b.lock()
	defer b.unlock()
	id := kernels.StoreKVF16
	if c.typ == quant.F32 {
		id = kernels.StoreKVF32
	}
	b.launch(id, kernels.StoreKVShape(k.Rows, kd, vd), kp, vp, uint64(c.k[layer].ptr), uint64(c.v[layer].ptr), b.argPos(pos),
		i32(s.KVHeads), i32(s.HeadDimK), i32(s.HeadDimV), i32(c.capacity))
}

// Attend implements backend.Backend.
func (b *Backend) Attend(dst, q backend.Tensor, cache backend.KVCache, layer, pos int, a *backend.Attention) {
	c := asCache(cache)
	s := c.shapes[layer]
	if a.Heads <= 0 || a.KVHeads != s.KVHeads || a.Heads%a.KVHeads != 0 || a.HeadDimK != s.HeadDimK || a.HeadDimV != s.HeadDimV ||
		q.Cols != a.Heads*a.HeadDimK || dst.Cols != a.Heads*a.HeadDimV || dst.Rows != q.Rows ||
		pos < 0 || pos+q.Rows > c.capacity {
		panic(fmt.Sprintf("cuda: Attend %d × %d queries at %d over layer %d (%+v) of a %d-position cache, %+v", q.Rows, q.Cols, pos, layer, s, c.capacity, *a))
	}
	qp, op := ptr(q), ptr(dst)
	b.lock()
	defer b.unlock()
	chunk := kernels.AttendChunk(q.Rows, a.Heads, c.capacity, attBudget)
	if need := chunk * a.Heads * c.capacity * 4; sizeOf(b.att) < need {
		b.bind()
		m, err := b.alloc(need)
		must(err)
		b.att = m
	}
	id := kernels.AttendF16
	if c.typ == quant.F32 {
		id = kernels.AttendF32
	}
	var sinks uint64
	if a.Sinks != nil {
		id, sinks = b.sinkKernel(c.typ, a)
	}
	posp := b.argPos(pos)
	for r0 := 0; r0 < q.Rows; r0 += chunk {
		rows := min(chunk, q.Rows-r0)
		// The most keys a row of this launch attends to: its last row's.
		keys := pos + r0 + rows
		if a.Window > 0 {
			keys = min(keys, a.Window)
		}
		if keys > b.attSplit && rows <= attSplitRows {
			b.attendSplit(c, layer, a, qp, op, posp, sinks, r0, rows, keys)
			continue
		}
		args := []uint64{qp, op, uint64(c.k[layer].ptr), uint64(c.v[layer].ptr), uint64(b.att.ptr), posp,
			i32(a.Heads), i32(a.KVHeads), i32(a.HeadDimK), i32(a.HeadDimV), i32(c.capacity), i32(a.Window), f32(a.Scale), f32(a.Softcap), i32(r0)}
		if a.Sinks != nil {
			args = append(args, sinks)
		}
		b.launch(id, kernels.AttendShape(a.Heads, rows), args...)
	}
	b.wrote(dst)
}

// attendSplit records attention of rows query rows from r0 over up to
// keys keys as three launches (attSplitKeys): the keys scored a chunk a
// block, the softmax a block per row and head, the values eight output
// elements a block. The chunk count is part of the launch's shape, so a
// step's graph is captured anew each AttendKeysChunk positions. With b
// locked.
func (b *Backend) attendSplit(c *kvCache, layer int, a *backend.Attention, qp, op, posp, sinks uint64, r0, rows, keys int) {
	chunks := (keys + kernels.AttendKeysChunk - 1) / kernels.AttendKeysChunk
	// Sized for the cache's whole capacity at once, not regrown as the
	// positions go by.
	most := (c.capacity + kernels.AttendKeysChunk - 1) / kernels.AttendKeysChunk
	if need := rows * a.Heads * most * 4; sizeOf(b.attMax) < need {
		b.bind()
		m, err := b.alloc(attSplitRows * a.Heads * most * 4)
		must(err)
		b.attMax = m
	}
	scores, cmax := uint64(b.att.ptr), uint64(b.attMax.ptr)
	f16 := c.typ == quant.F16
	pick := func(f16ID, f32ID kernels.ID) kernels.ID {
		if f16 {
			return f16ID
		}
		return f32ID
	}
	b.launch(pick(kernels.AttendScoresF16, kernels.AttendScoresF32), kernels.AttendScoresShape(a.Heads, rows, chunks),
		qp, uint64(c.k[layer].ptr), scores, posp, i32(a.Heads), i32(a.KVHeads), i32(a.HeadDimK), i32(c.capacity), i32(a.Window),
		f32(a.Scale), f32(a.Softcap), i32(r0), cmax)
	b.launch(pick(kernels.AttendSoftmaxF16, kernels.AttendSoftmaxF32), kernels.AttendShape(a.Heads, rows),
		scores, posp, i32(a.Heads), i32(a.KVHeads), i32(c.capacity), i32(a.Window), i32(r0), cmax, i32(chunks), sinks)
	b.launch(pick(kernels.AttendValuesF16, kernels.AttendValuesF32), kernels.AttendValuesShape(a.Heads, rows, a.HeadDimV),
		op, uint64(c.v[layer].ptr), scores, posp, i32(a.Heads), i32(a.KVHeads), i32(a.HeadDimV), i32(c.capacity), i32(a.Window), i32(r0))
}

// ArgMax returns the index of t's largest element, the lowest on a tie
// and 0 when none exceeds -Inf (the sampler's greedy choice), computed on
// the device: a decode step that only needs its argmax copies back one
// int, not the logits (model.ArgMaxer; the model's greedy decode uses
// it). It launches the recorded step.
func (b *Backend) ArgMax(t backend.Tensor) int {
	p := ptr(t)
	b.lock()
	defer b.unlock()
	b.launch(kernels.ArgMax, kernels.ArgMaxShape(1), p, i32(t.Len()), b.rowsOut(1, 1))
	return int(b.readOut(t, 1)[0])
}

// ArgMaxRows sets dst[r] to the index of row r's largest element of t, as
// ArgMax finds it, for every row, with one launch (a block per row) in the
// recorded step and one copy back (model.RowArgMaxer): a batched decode step's
// greedy tokens come back together, and the step, its argmaxes included,
// is the same recording every step, which the executor replays as a graph.
func (b *Backend) ArgMaxRows(t backend.Tensor, dst []int) {
	if len(dst) < t.Rows {
		panic(fmt.Sprintf("cuda: ArgMaxRows of %d rows into %d", t.Rows, len(dst)))
	}
	if t.Rows == 0 {
		return
	}
	b.lock()
	defer b.unlock()
	out := b.rowsOut(t.Rows, 1)
	b.launch(kernels.ArgMax, kernels.ArgMaxShape(t.Rows), ptr(t), i32(t.Cols), out)
	v := b.readOut(t, t.Rows)
	for r, x := range v {
		dst[r] = int(x)
	}
}

// TopProbRows sets ids[r] to ArgMaxRows' pick of row r of t and probs[r]
// to its softmax probability (the top's term 1 and the others' e^(x−top),
// those more than 16 below it left out, summed in float64), with one
// launch and 8 bytes back a row (model.TopProber): a greedy draft's
// token and confidence without the logits.
func (b *Backend) TopProbRows(t backend.Tensor, ids []int, probs []float64) {
	if len(ids) < t.Rows || len(probs) < t.Rows {
		panic(fmt.Sprintf("cuda: TopProbRows of %d rows into %d and %d", t.Rows, len(ids), len(probs)))
	}
	if t.Rows == 0 {
		return
	}
	b.lock()
	defer b.unlock()
	out := b.rowsOut(t.Rows, 2)
	b.launch(kernels.TopProb, kernels.ArgMaxShape(t.Rows), ptr(t), i32(t.Cols), out, out+uint64(4*t.Rows))
	v := b.readOut(t, 2*t.Rows)
	for r := range t.Rows {
		ids[r], probs[r] = int(v[r]), float64(math.Float32frombits(uint32(v[t.Rows+r])))
	}
}

// rowsOut makes the device area for n words of each of rows rows, and
// returns it; the caller holds the lock.
func (b *Backend) rowsOut(rows, n int) uint64 {
	b.bind()
	if b.argOut == nil || b.argOut.size < 4*n*rows {
		m, err := b.alloc(max(4*n*rows, 64))
		must(err)
		b.argOut = m
	}
	return uint64(b.argOut.ptr)
}

// readOut launches the recording, which reads t, and copies back the
// first n words of rowsOut's area into a buffer the next call reuses (a
// greedy decode reads its token this way every step); the caller holds
// the lock.
func (b *Backend) readOut(t backend.Tensor, n int) []int32 {
	must(b.sync(false))
	b.outBuf = slices.Grow(b.outBuf[:0], n)[:n]
	v := b.outBuf
	must(b.lib.MemcpyDtoH(unsafe.Pointer(&v[0]), b.argOut.ptr, 4*len(v)))
	b.stats.ReadBytes += int64(4 * len(v))
	runtime.KeepAlive(t)
	b.freeReleased()
	return v
}
