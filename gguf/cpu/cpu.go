// Package cpu is the CPU backend: the backend.Backend kernels in Go, run
// on a persistent pool of worker goroutines that split each kernel's rows
// between them. Weights stay in the model file's memory mapping; matrix
// products convert each activation row once to the weight's activation
// format and call the dot products of package quant (which carry the SIMD
// implementations where there are any), so the arithmetic of a weight row
// with an activation row is the same whatever the thread count or the
// batch a token was evaluated in.
//
// Floating-point evaluation is written with explicit float32 conversions
// wherever Go could otherwise fuse a multiply and an add, so results are
// the same on amd64 and arm64.
package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Options configure a Backend.
type Options struct {
	// Threads is the number of worker threads; 0 means one per CPU
	// (runtime.GOMAXPROCS).
	Threads int
	// CacheBytes is the size of the last-level cache, which decides
	// whether MatMul prefetches weight rows: not while all the weights
	// made so far fit in half of it (weightsCached), where they stay
	// cached from one token to the next and prefetching only costs;
	// there MatMul also packs a weight's rows for its kernels once
	// (weight.packed). 0 reads it from the system; negative or unknown:
	// always prefetch, never pack.
	CacheBytes int64
	// Perturb, when nonzero, moves every activation MatMul quantises by
	// one ulp up or down (a pattern drawn from Perturb and the call)
	// before quantising it: as valid a rounding of the sums before it as
	// ours or another engine's. A debugging knob, off in serving: the
	// held-out parity gate measures with it how far the engine's own
	// logits move under last-bit noise (gguf/model's TestParityHeldOut).
	Perturb uint64
	// OneRow chooses the kernels of one-row products (decoded tokens) by
	// weights read from memory where quant has two (onerow.go): timed on
	// each weight's first products (the default), or fixed.
	OneRow OneRow
	// RepackStreamed leaves weights read from memory as the file holds
	// them, repacked at every product. By default those whose rows quant
	// packs at their blocks' size (quant.PacksStreamed: Q8_0 with AVX-512
	// VNNI) are packed once, at their first product, and every product
	// reads the packed copy (weight.packed); benchmarks set it to compare.
	RepackStreamed bool
}

// Backend is the CPU implementation of backend.Backend. Its kernels may be
// called from several goroutines; they take turns, each kernel using every
// worker.
type Backend struct {
	threads int

	cacheBytes  int64        // Options.CacheBytes, resolved
	perturb     uint64       // Options.Perturb
	calls       uint64       // MatMul calls so far, for Perturb (guarded by mu)
	weightBytes atomic.Int64 // bytes of the weights made so far
	pack        bool         // packWeights when it was made
	oneRow      OneRow       // Options.OneRow
	packStream  bool         // !Options.RepackStreamed
	streamed    int          // weights packed for products from memory (guarded by mu)
	now         func() time.Time
	chosen      [kinds]int // weights whose one-row kernels are decided, by kind (guarded by mu)

	mu     sync.Mutex // serialises kernels: the pool and the scratch below
	pool   *pool
	closed bool

	// Scratch, reused across calls (guarded by mu).
	batch      quant.Batch // MatMul's activations
	ropeAngles ropeCache   // RoPE's angles of the last windows
	scratch    [][]float32 // per worker
	bytes      [][]byte    // per worker

	// Kernel jobs, held here so that dispatching one allocates nothing.
	mm     matmulJob
	quan   quantJob
	ew     elemJob
	rope   ropeJob
	att    attendJob
	groups []attGroup // attention's groups of queries
	am     argMaxJob
	fj     funcJob
	conv   convJob
	scan   scanJob
	gconv  gatedConvJob
}

var _ backend.Backend = (*Backend)(nil)

// New starts a CPU backend.
func New(opt Options) *Backend {
	n := opt.Threads
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	cache := opt.CacheBytes
	if cache == 0 {
		cache = systemCacheBytes()
	}
	return &Backend{threads: n, cacheBytes: cache, perturb: opt.Perturb, pack: packWeights, oneRow: opt.OneRow, packStream: !opt.RepackStreamed, now: time.Now,
		pool: newPool(n), scratch: make([][]float32, n), bytes: make([][]byte, n)}
}

// packWeights: backends made while it is set pack the rows of weights
// that stay in cache (weight.packed); benchmarks clear it to compare.
var packWeights = true

// Name implements backend.Backend.
func (b *Backend) Name() string { return "cpu" }

// Supports implements backend.Featured: the CPU has every feature.
func (b *Backend) Supports(f backend.Feature) bool {
	return f == backend.AttentionSinks || f == backend.GLUSwiOAI
}

// Threads implements backend.Backend.
func (b *Backend) Threads() int { return b.threads }

// Close stops the workers. Kernels must not be called afterwards.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.pool.close()
	}
	return nil
}

// buffer is the CPU's activation memory.
type buffer struct{ f []float32 }

func (b *buffer) Len() int { return len(b.f) }

// NewTensor implements backend.Backend.
func (b *Backend) NewTensor(rows, cols int) backend.Tensor {
	return backend.Tensor{Buf: &buffer{f: make([]float32, rows*cols)}, Rows: rows, Cols: cols}
}

// data returns t's elements.
func data(t backend.Tensor) []float32 {
	buf, ok := t.Buf.(*buffer)
	if !ok {
		panic(fmt.Sprintf("cpu: tensor of another backend (%T)", t.Buf))
	}
	return buf.f[t.Off : t.Off+t.Rows*t.Cols : t.Off+t.Rows*t.Cols]
}

// Read implements backend.Backend.
func (b *Backend) Read(dst []float32, t backend.Tensor) { copy(dst[:t.Len()], data(t)) }

// ArgMax implements model.ArgMaxer: the largest element's index, the
// lowest on a tie, 0 when none exceeds -Inf (NaN never wins), found in
// place. Greedy decoding and every verified row of a speculative window
// would otherwise copy the vocabulary's logits out to scan them.
func (b *Backend) ArgMax(t backend.Tensor) int { return argMax(data(t)) }

// Workers implements model.Hosted: the threads Parallel runs on.
func (b *Backend) Workers() int { return b.pool.threads }

// Parallel implements model.Hosted: f(t) for every t < n, on the
// workers, between kernels like them.
func (b *Backend) Parallel(n int, f func(t int)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.runFunc(n, f)
}

// runFunc runs f(t) for every t < n on the workers; b.mu is held.
func (b *Backend) runFunc(n int, f func(t int)) {
	b.fj = funcJob{f}
	b.pool.run(n, &b.fj)
	b.fj = funcJob{}
}

// funcJob runs a caller's function per task (Parallel).
type funcJob struct{ f func(t int) }

func (j *funcJob) do(_, t int) { j.f(t) }

// ArgMaxRows implements model.RowArgMaxer: ArgMax of every row of t,
// the rows shared among the workers (a speculative window's rows, a
// batch's sequences). Only called between kernels, like the others.
func (b *Backend) ArgMaxRows(t backend.Tensor, dst []int) {
	if len(dst) < t.Rows {
		panic(fmt.Sprintf("cpu: ArgMaxRows of %d rows into %d", t.Rows, len(dst)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.am = argMaxJob{x: data(t), cols: t.Cols, dst: dst}
	b.pool.run(t.Rows, &b.am)
	b.am = argMaxJob{}
}

// argMaxJob finds one row's argmax per task.
type argMaxJob struct {
	x    []float32
	cols int
	dst  []int
}

func (j *argMaxJob) do(_, t int) { j.dst[t] = argMax(j.x[t*j.cols : (t+1)*j.cols]) }

// Write implements backend.Backend.
func (b *Backend) Write(t backend.Tensor, src []float32) { copy(data(t), src[:t.Len()]) }

// weight is a matrix read in place from the caller's bytes. Vectors (one
// row) are also kept dequantised, for the elementwise kernels.
type weight struct {
	typ        quant.Type
	act        quant.Type // the activation format rows are dotted with
	rows, cols int
	rowSize    int
	data       []byte
	vec        []float32 // rows == 1 only
	// packed holds the rows packed for the tile kernels (quant.Pack) of
	// one-row products (packed[0]: decoded tokens) and of more rows
	// (packed[1]: windows, prompts; the same copy where both take the
	// same kernels), each made at the first such product while the
	// weights are expected to stay in cache
	// (Backend.WeightsCached): there a product is bound by its arithmetic
	// and its reads from the last-level cache, which repacking the rows at
	// every call added to (a small draft model's one-token step 27%
	// faster packed). Weights read from memory are packed where their
	// packed rows are their blocks' size (quant.PacksStreamed), at their
	// first product, one copy for both (packed[0] == packed[1]): every
	// product then streams the packed tiles, with nothing repacked: a
	// window's step on a 1B Q8_0 model 1.03–1.23× as fast, a decoded
	// token's 0.98–1.12× (BenchmarkStreamedPacked in gguf/model). Their
	// one-row products are not timed (onerow.go): the band kernels read
	// the copy, and the file's pages are given back (pages.Release) and
	// not read again. Other types read from memory are not packed: their copy
	// would be up to 2.3 times their blocks.
	packed   [2]*quant.Packed
	packDone [2]bool
	// tune is the choice of kernels for its one-row products where it is
	// read from memory (onerow.go).
	tune oneRowTune
}

func (w *weight) Type() quant.Type { return w.typ }
func (w *weight) Rows() int        { return w.rows }
func (w *weight) Cols() int        { return w.cols }

func (w *weight) row(r int) []byte { return w.data[r*w.rowSize : (r+1)*w.rowSize] }

// ErrType is returned by Weight for an element type the kernels lack.
var ErrType = errors.New("cpu: unsupported tensor type")

// Weight implements backend.Backend. data is used in place, not copied.
func (b *Backend) Weight(typ quant.Type, rows, cols int, data []byte) (backend.Weight, error) {
	act, ok := quant.VecDotType(typ)
	if !ok || !typ.Supported() {
		return nil, fmt.Errorf("%w: %s", ErrType, typ)
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("cpu: weight of %d × %d", rows, cols)
	}
	rs, err := typ.RowSize(cols)
	if err != nil {
		return nil, fmt.Errorf("cpu: weight rows: %w", err)
	}
	if _, err := act.RowSize(cols); err != nil {
		return nil, fmt.Errorf("cpu: %s rows of %d cannot be dotted: %w", typ, cols, err)
	}
	if len(data) != rows*rs {
		return nil, fmt.Errorf("cpu: %d × %d %s weight is %d bytes, got %d", rows, cols, typ, rows*rs, len(data))
	}
	w := &weight{typ: typ, act: act, rows: rows, cols: cols, rowSize: rs, data: data}
	b.weightBytes.Add(int64(len(data)))
	if rows == 1 {
		w.vec = make([]float32, cols)
		if err := quant.Dequantize(typ, data, w.vec); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
	}
	return w, nil
}

func asWeight(w backend.Weight) *weight {
	cw, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("cpu: weight of another backend (%T)", w))
	}
	return cw
}

func vector(w backend.Weight) []float32 {
	cw := asWeight(w)
	if cw.vec == nil {
		panic("cpu: a vector argument has more than one row")
	}
	return cw.vec
}

// growScratch makes every worker's scratch at least n floats, growing it
// geometrically (attention asks for a little more each token). Only
// called with b.mu held, before a job starts (so workers never grow it).
func (b *Backend) growScratch(n int) {
	for w := range b.scratch {
		if len(b.scratch[w]) < n {
			b.scratch[w] = make([]float32, max(n, 2*len(b.scratch[w]), 256))
		}
	}
}

// growBytes is growScratch for the byte scratch.
func (b *Backend) growBytes(n int) {
	for w := range b.bytes {
		if len(b.bytes[w]) < n {
			b.bytes[w] = make([]byte, max(n, 2*len(b.bytes[w]), 1024))
		}
	}
}

// Embed implements backend.Backend.
func (b *Backend) Embed(dst backend.Tensor, table backend.Weight, ids []uint32) {
	w := asWeight(table)
	if dst.Rows != len(ids) || dst.Cols != w.cols {
		panic(fmt.Sprintf("cpu: Embed of %d ids into %d × %d from %d-wide table", len(ids), dst.Rows, dst.Cols, w.cols))
	}
	out := data(dst)
	for i, id := range ids {
		if int(id) >= w.rows {
			panic(fmt.Sprintf("cpu: token %d outside a %d-row embedding table", id, w.rows))
		}
		if err := quant.Dequantize(w.typ, w.row(int(id)), out[i*w.cols:(i+1)*w.cols]); err != nil {
			panic(err) // the weight's geometry was checked at load
		}
	}
}
