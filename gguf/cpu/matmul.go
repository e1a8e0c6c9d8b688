package cpu

import (
	"fmt"
	"math"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/internal/pages"
)

// tasksPerThread oversubscribes the workers so that the atomic hand-out
// evens out cores that run at different speeds.
const tasksPerThread = 4

// parallelProduct is the least product handed to the workers, in weight
// elements, each activation row past the first counting a quarter (the
// weights are loaded once for all of them): below it the calling
// goroutine does it alone. Handing out tasks costs a few µs of cache-line
// traffic between cores (a 2-thread product of 96×192 F16 took 2.8 µs,
// alone 0.9), more than a small model's products take
// (BenchmarkSmallMatMul: for one row alone was faster up to about
// 1024×192, for two to eight rows of 192×192 at every count, of 512×192
// up to two rows and even at three). Where the model runs inline for long
// stretches the helpers may park (spinFor), and the next parallel kernel
// pays their waking: attention, whose groups are as small, measured
// slower inline for that.
var parallelProduct = 1 << 17 // a variable so that BenchmarkSmallMatMul can compare

// matmulChunk is the weight rows of each of MatMul's tasks for n
// activation rows on threads workers: all of them (the calling goroutine
// alone) for a product below parallelProduct, else tasksPerThread tasks a
// worker, in whole tiles; float products are measured, and split, as
// below.
//
// Where the float row kernels run (quant.WideRowsFor: F16, BF16 and F32
// weights on AVX-512), each activation row past the first costs about half
// the first, not a quarter, and a small product splits best into one task
// a worker: the tasks' own costs (a call into the kernels each, and their
// outputs' cache lines) outweigh the evening out. Measured on 2 cores, the
// built-in model's F16 products alone against split in two tasks: 512×192
// at 1 to 5 rows 2.4, 3.6, 4.8, 6.1, 7.5 µs alone, 2.7, 3.0, 3.4, 4.4, 5.0
// split (in eight tasks, as before, 5.1 at 4 rows); 192×192 at 5 rows 2.8
// alone and 2.7 split, at 8 4.4 and 3.3; 96×192 alone at every count to
// 8. In the forward pass, where the outputs then cross to the other core,
// two rows of 512×192 gained nothing split, and the threshold sits above
// them (a quarter above parallelProduct): windows of 3 to 5 rows, which
// had taken their feed-forward products alone up to 4 rows, and in eight
// tasks at 5, step 4–6% faster.
func matmulChunk(typ quant.Type, rows, cols, n, threads int) int {
	work, least, per := rows*cols*(n+3)/4, parallelProduct, tasksPerThread
	if quant.WideRowsFor(typ) {
		work, least = rows*cols*(n+1)/2, parallelProduct*5/4
		if work < bigFloatProduct {
			per = 1
		}
	}
	if work < least {
		return rows // one task: the calling goroutine's
	}
	return ceilDiv(ceilDiv(rows, threads*per), tileRows) * tileRows
}

// bigFloatProduct is the float product (in matmulChunk's measure) from
// which MatMul oversubscribes the workers again: its tasks take tens of
// µs, and a core that runs slower then holds up more than a task's own
// cost.
const bigFloatProduct = 1 << 20

// tileRows is the granularity of MatMul's tasks: quant.MatMul multiplies
// a batch by weight rows sixteen at a time where the machine has its
// AVX-512 tiles (eight where only the others), so a task boundary
// elsewhere would leave rows to a slower path.
const tileRows = 16

// quantJob converts activation rows to the weight's activation format.
type quantJob struct {
	x     []float32
	cols  int
	batch *quant.Batch
	seed  uint64 // nonzero: Options.Perturb mixed with the call
}

func (j *quantJob) do(_, t int) {
	x := j.x[t*j.cols : (t+1)*j.cols]
	if j.seed != 0 {
		x = perturbRow(x, j.seed^uint64(t)*0x9e3779b97f4a7c15)
	}
	if err := j.batch.Quantize(t, x); err != nil {
		panic(err) // sizes are fixed by MatMul
	}
}

// perturbRow returns a copy of x with each nonzero element one ulp up or
// down, by the bits of a splitmix64 stream from seed (Options.Perturb).
// It allocates; it runs only when debugging.
func perturbRow(x []float32, seed uint64) []float32 {
	y := make([]float32, len(x))
	var bits uint64
	for i, v := range x {
		if i%64 == 0 {
			seed += 0x9e3779b97f4a7c15
			z := seed
			z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			bits = z ^ z>>31
		}
		dir := float32(math.Inf(1))
		if bits&1 == 0 {
			dir = float32(math.Inf(-1))
		}
		bits >>= 1
		if v != 0 && !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v)) {
			v = math.Nextafter32(v, dir)
		}
		y[i] = v
	}
	return y
}

// matmulJob multiplies x, quantised in batch, by the weights of its
// parts, all of one type (one for MatMul, more for a joint product): task
// t is a span of the rows of the last part whose first task is at most t.
type matmulJob struct {
	parts []matmulPart
	batch *quant.Batch
}

// matmulPart is one weight of a matmulJob.
type matmulPart struct {
	w      *weight
	packed *quant.Packed // w's rows packed for this batch's kernels, or nil
	dst    []float32
	chunk  int // rows a task
	first  int // the part's first task
}

func (j *matmulJob) do(_, t int) {
	p := &j.parts[0]
	for i := len(j.parts) - 1; i > 0; i-- {
		if j.parts[i].first <= t {
			p = &j.parts[i]
			break
		}
	}
	w := p.w
	r0, r1 := split(t-p.first, p.chunk, w.rows)
	view := p.packed.Rows(r0, r1)
	quant.MatMulPacked(w.typ, w.data[r0*w.rowSize:r1*w.rowSize], &view, j.batch, p.dst[r0:], w.rows)
}

// MatMul implements backend.Backend.
func (b *Backend) MatMul(dst backend.Tensor, wt backend.Weight, x backend.Tensor) {
	w := asWeight(wt)
	checkMatMul(dst, w, x)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.matMul(dst, w, x)
}

func checkMatMul(dst backend.Tensor, w *weight, x backend.Tensor) {
	if x.Cols != w.cols || dst.Cols != w.rows || dst.Rows != x.Rows {
		panic(fmt.Sprintf("cpu: MatMul %d × %d = (%d × %d) · (%d × %d)ᵀ", dst.Rows, dst.Cols, x.Rows, x.Cols, w.rows, w.cols))
	}
}

// matMul is MatMul with b.mu held.
func (b *Backend) matMul(dst backend.Tensor, w *weight, x backend.Tensor) {
	b.products(append(b.mm.parts[:0], matmulPart{w: w, dst: data(dst)}), x)
}

// products multiplies x by the weights of parts, all of one type: x is
// quantised once, and their rows go to the workers in one hand-out, where
// their work together is enough (matmulChunk), each weight in the tasks
// it would have alone, or, too small alone to split, in chunks of the
// whole's. A lone weight's one-row product may time its kernels
// (onerow.go).
func (b *Backend) products(parts []matmulPart, x backend.Tensor) {
	n := x.Rows
	w0 := parts[0].w
	cached := b.quantize(w0, x)
	kind := min(n, 2) - 1 // packed[0] for one row, packed[1] for more
	rows := 0
	for i := range parts {
		b.packFor(parts[i].w, kind, cached)
		parts[i].packed = parts[i].w.packed[kind]
		rows += parts[i].w.rows
	}
	chunk := matmulChunk(w0.typ, rows, w0.cols, n, b.threads)
	tasks := 0
	for i := range parts {
		r := parts[i].w.rows
		if parts[i].chunk = matmulChunk(w0.typ, r, w0.cols, n, b.threads); parts[i].chunk >= r {
			parts[i].chunk = min(chunk, r)
		}
		parts[i].first = tasks
		tasks += ceilDiv(r, parts[i].chunk)
	}
	b.mm = matmulJob{parts: parts, batch: &b.batch}
	tuning := len(parts) == 1 && b.tuning(w0, n, cached)
	rowKind, timed := kindBand, false
	if tuning {
		rowKind, timed = w0.tune.next(b.oneRow)
	}
	b.batch.SetStreamedRows(rowKind != kindBand)
	b.batch.SetRowsAhead(rowKind == kindAhead)
	var start time.Time
	if timed {
		start = b.now()
	}
	if chunk >= rows {
		for t := range tasks { // below the threshold: this goroutine's
			b.mm.do(0, t)
		}
	} else {
		b.pool.run(tasks, &b.mm)
	}
	if tuning && b.oneRow == OneRowTuned && !w0.tune.done {
		var d time.Duration
		if timed {
			d = b.now().Sub(start)
		}
		if w0.tune.record(rowKind, timed, d) {
			b.chosen[w0.tune.kind]++
		}
	}
	clear(parts) // the weights and outputs are not held past the call
	b.mm, b.quan = matmulJob{parts: parts[:0]}, quantJob{}
}

// tuning reports whether w's product of n rows times its one-row kernels
// (onerow.go): one row, read from memory, not packed.
func (b *Backend) tuning(w *weight, n int, cached bool) bool {
	return n == 1 && !cached && w.packed[0] == nil && w.tune.choices(w) != nil
}

// quantize fills b.batch with x's rows in w's activation format, and
// reports whether the weights are taken as cached.
func (b *Backend) quantize(w *weight, x backend.Tensor) (cached bool) {
	n := x.Rows
	if err := b.batch.Reset(w.typ, w.cols, n); err != nil {
		panic(err) // checked when the weight was made
	}
	cached = b.WeightsCached()
	b.batch.SetCached(cached)
	b.quan = quantJob{x: data(x), cols: w.cols, batch: &b.batch}
	if b.perturb != 0 {
		b.calls++
		b.quan.seed = b.perturb ^ b.calls<<32 ^ b.calls
	}
	if n*w.cols < parallelElems {
		// A few short rows: waking the workers costs more than the work.
		for t := range n {
			b.quan.do(0, t)
		}
	} else {
		b.pool.run(n, &b.quan)
	}
	return cached
}

// packFor packs w's rows for the products of kind (0: one row, 1: more)
// the first time it is asked, where that pays (weight.packed).
func (b *Backend) packFor(w *weight, kind int, cached bool) {
	switch {
	case w.packDone[kind] || !b.pack:
	case cached:
		if other := w.packed[1-kind]; other.Serves(w.typ, w.cols, kind+1) {
			w.packed[kind] = other // one copy where both take the same kernels
		} else {
			w.packed[kind] = quant.Pack(w.typ, w.data, w.cols, kind+1)
		}
		w.packDone[kind] = true
	case b.packStream:
		// Decided once: weights made later only add to what must stay
		// in cache, so a weight read from memory stays so.
		w.packDone = [2]bool{true, true}
		if !quant.PacksStreamed(w.typ, w.cols) {
			break
		}
		// One copy in the band kernels' layout, for every product,
		// packed on the workers (a 1B model's 1.2 GB at its first
		// prompt).
		if p := quant.PackOn(w.typ, w.data, w.cols, 2, b.runFunc); p != nil {
			w.packed = [2]*quant.Packed{p, p}
			b.streamed++
			// Its file's pages are not read again (but for a tied
			// embedding's rows and the rows past the last whole tile).
			_ = pages.Release(w.data) // advice: refused, the pages stay
		}
	}
}

// WeightsCached says whether the weights made so far are expected to
// stay in the last-level cache between tokens (Options.CacheBytes), so
// that MatMul does not prefetch them.
func (b *Backend) WeightsCached() bool {
	return weightsCached(b.weightBytes.Load(), b.cacheBytes)
}
