package metal

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/metal/kernels"
	"github.com/meshnode/meshnode/metal/mtl"
)

// devMem is one shared buffer the backend made. The backend interface has
// no Free: like the CPU backend's slices, a buffer goes when the Go value
// holding it becomes unreachable; its cleanup hands the buffer back, and
// the backend releases it at its next synchronisation. A recorded
// dispatch holds the devMem it binds, so nothing it uses is released
// before the dispatch has run.
type devMem struct {
	buf  mtl.Buffer
	size int
}

func (m *devMem) ptr() unsafe.Pointer { return m.buf.Contents() }

// alloc makes a zeroed shared buffer of size bytes.
func (b *Backend) alloc(size int) (*devMem, error) {
	buf, err := b.dev.NewBuffer(size)
	if err != nil {
		return nil, err
	}
	clear(unsafe.Slice((*byte)(buf.Contents()), size))
	m := &devMem{buf: buf, size: size}
	b.live[buf] = struct{}{}
	runtime.AddCleanup(m, b.releaseLater, buf)
	return m, nil
}

// releaseLater runs on the runtime's cleanup goroutine.
func (b *Backend) releaseLater(buf mtl.Buffer) {
	b.freeMu.Lock()
	b.freed = append(b.freed, buf)
	b.freeMu.Unlock()
}

// releaseFreed releases the buffers cleanups handed back; with b locked,
// after a sync.
func (b *Backend) releaseFreed() {
	b.freeMu.Lock()
	bufs := b.freed
	b.freed = nil
	b.freeMu.Unlock()
	for _, buf := range bufs {
		if _, ok := b.live[buf]; ok { // not released by Close already
			delete(b.live, buf)
			buf.Release()
		}
	}
}

// allocTop is alloc for the methods that hold no other buffer (NewTensor,
// Weight, NewKVCache): when the device refuses and buffers await release,
// it releases them and tries again.
func (b *Backend) allocTop(size int) (*devMem, error) {
	m, err := b.alloc(size)
	if err != nil {
		b.freeMu.Lock()
		pending := len(b.freed) > 0
		b.freeMu.Unlock()
		if pending {
			if err = b.sync(); err == nil {
				m, err = b.alloc(size)
			}
		}
	}
	return m, err
}

// bind is a buffer binding: a buffer and a byte offset into it. mem keeps
// a devMem alive while a recorded dispatch binds it (nil for a view of a
// mapped file, which the backend holds).
type bind struct {
	buf mtl.Buffer
	off int
	mem *devMem
}

func (m *devMem) at(off int) bind { return bind{buf: m.buf, off: off, mem: m} }

// overlaps reports whether [a, a+na) and [c, c+nc) share bytes of one
// buffer.
func overlaps(a bind, na int, c bind, nc int) bool {
	return a.buf == c.buf && a.off < c.off+nc && c.off < a.off+na
}

// buffer is the backend's activation memory: float32 elements.
type buffer struct {
	mem *devMem
	n   int
}

func (b *buffer) Len() int { return b.n }

// NewTensor implements backend.Backend. It panics when the device refuses
// the buffer (the interface has no error to return).
func (b *Backend) NewTensor(rows, cols int) backend.Tensor {
	if rows <= 0 || cols <= 0 {
		panic(fmt.Sprintf("metal: tensor of %d × %d", rows, cols))
	}
	b.lock()
	defer b.unlock()
	m, err := b.allocTop(rows * cols * 4)
	must(err)
	return backend.Tensor{Buf: &buffer{mem: m, n: rows * cols}, Rows: rows, Cols: cols}
}

func asBuffer(t backend.Tensor) *buffer {
	buf, ok := t.Buf.(*buffer)
	if !ok {
		panic(fmt.Sprintf("metal: tensor of another backend (%T)", t.Buf))
	}
	if t.Off < 0 || t.Off+t.Rows*t.Cols > buf.n {
		panic("metal: tensor outside its buffer")
	}
	return buf
}

// tb is the binding of t's first element.
func tb(t backend.Tensor) bind { return asBuffer(t).mem.at(4 * t.Off) }

// weight is a matrix in a shared buffer of its own, or in a view of a
// mapped model file. Vectors (one row) are also kept dequantised to
// float32, for RMSNorm and biases.
type weight struct {
	typ        quant.Type
	rows, cols int
	rowSize    int
	at         bind
	vec        *devMem // rows == 1 only
}

func (w *weight) Type() quant.Type { return w.typ }
func (w *weight) Rows() int        { return w.rows }
func (w *weight) Cols() int        { return w.cols }

func asWeight(w backend.Weight) *weight {
	mw, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("metal: weight of another backend (%T)", w))
	}
	return mw
}

func vector(w backend.Weight) *weight {
	mw := asWeight(w)
	if mw.vec == nil {
		panic("metal: a vector argument has more than one row")
	}
	return mw
}

// ErrType is returned by Weight for an element type without kernels.
var ErrType = errors.New("metal: unsupported tensor type")

// Weight implements backend.Backend: read in place where MapFile mapped
// data, else copied into a buffer once.
func (b *Backend) Weight(typ quant.Type, rows, cols int, data []byte) (backend.Weight, error) {
	if _, ok := kernels.WeightKernel(typ, kernels.MatVec); !ok {
		return nil, fmt.Errorf("%w: %s", ErrType, typ)
	}
	act, _ := quant.VecDotType(typ)
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("metal: weight of %d × %d", rows, cols)
	}
	rs, err := typ.RowSize(cols)
	if err != nil {
		return nil, fmt.Errorf("metal: weight rows: %w", err)
	}
	if _, err := act.RowSize(cols); err != nil {
		return nil, fmt.Errorf("metal: %s rows of %d cannot be dotted: %w", typ, cols, err)
	}
	if len(data) != rows*rs {
		return nil, fmt.Errorf("metal: %d × %d %s weight is %d bytes, got %d", rows, cols, typ, rows*rs, len(data))
	}
	w := &weight{typ: typ, rows: rows, cols: cols, rowSize: rs}
	var vec []float32
	if rows == 1 {
		vec = make([]float32, cols)
		if err := quant.Dequantize(typ, data, vec); err != nil {
			return nil, fmt.Errorf("metal: %w", err)
		}
	}
	b.lock()
	defer b.unlock()
	if at, ok := b.mapped(data); ok {
		w.at = at
	} else {
		m, err := b.allocTop(len(data))
		if err != nil {
			return nil, fmt.Errorf("metal: %d × %d %s weight: %w", rows, cols, typ, err)
		}
		copy(unsafe.Slice((*byte)(m.ptr()), len(data)), data)
		w.at = m.at(0)
		b.stats.CopiedBytes += int64(len(data))
	}
	if vec != nil {
		if w.vec, err = b.allocTop(4 * cols); err != nil {
			return nil, err
		}
		copy(unsafe.Slice((*float32)(w.vec.ptr()), cols), vec)
	}
	return w, nil
}

// view is a no-copy buffer over [base, base+n) of a mapped file.
type view struct {
	buf  mtl.Buffer
	base uintptr
	n    int
}

// MapFile makes data — a model file's memory mapping, page-aligned — a set
// of no-copy buffers, so that Weight reads the weights inside it in place
// (newBufferWithBytesNoCopy). A file larger than the device's
// maxBufferLength becomes overlapping views, each overlap at least largest
// bytes (the largest tensor) so that every tensor lies whole in one view.
// data must stay mapped and unchanged until Close.
func (b *Backend) MapFile(data []byte, largest int) error {
	if len(data) == 0 {
		return nil
	}
	info := b.dev.Info()
	pg := uintptr(info.PageSize)
	start := uintptr(unsafe.Pointer(&data[0]))
	lo := start &^ (pg - 1)
	hi := (start + uintptr(len(data)) + pg - 1) &^ (pg - 1)
	total := int(hi - lo)
	maxLen := info.MaxBufferLength &^ int(pg-1)
	step := total
	if total > maxLen {
		overlap := (largest + 2*int(pg) - 1) &^ int(pg-1)
		step = maxLen - overlap
		if step <= 0 {
			return fmt.Errorf("metal: a tensor of %d bytes does not fit the device's %d-byte buffers", largest, info.MaxBufferLength)
		}
	}
	base := unsafe.Add(unsafe.Pointer(&data[0]), -int(start-lo))
	b.lock()
	defer b.unlock()
	var made []view
	for off := 0; off < total; off += step {
		n := min(total-off, maxLen)
		buf, err := b.dev.NewBufferNoCopy(unsafe.Add(base, off), n)
		if err != nil {
			for _, v := range made {
				v.buf.Release()
			}
			return err
		}
		made = append(made, view{buf: buf, base: lo + uintptr(off), n: n})
		if off+n >= total {
			break
		}
	}
	b.views = append(b.views, made...)
	b.info.MappedBytes += int64(len(data))
	return nil
}

// mapped is data's binding in a view, when one holds it whole.
func (b *Backend) mapped(data []byte) (bind, bool) {
	if len(data) == 0 {
		return bind{}, false
	}
	p := uintptr(unsafe.Pointer(&data[0]))
	for _, v := range b.views {
		if p >= v.base && p+uintptr(len(data)) <= v.base+uintptr(v.n) {
			return bind{buf: v.buf, off: int(p - v.base)}, true
		}
	}
	return bind{}, false
}

// kvCache stores each layer's keys by head then position and values
// transposed, as the CPU backend does (see ops.metal).
type kvCache struct {
	typ      quant.Type
	es       int
	capacity int
	shapes   []backend.KVShape
	k, v     []*devMem
}

func (c *kvCache) Type() quant.Type { return c.typ }
func (c *kvCache) Capacity() int    { return c.capacity }

func asCache(c backend.KVCache) *kvCache {
	kc, ok := c.(*kvCache)
	if !ok {
		panic(fmt.Sprintf("metal: KV cache of another backend (%T)", c))
	}
	return kc
}

// NewKVCache implements backend.Backend.
func (b *Backend) NewKVCache(typ quant.Type, capacity int, layers []backend.KVShape) (backend.KVCache, error) {
	if typ != quant.F16 && typ != quant.F32 {
		return nil, fmt.Errorf("metal: KV cache type %s (want F16 or F32)", typ)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("metal: KV cache of %d positions", capacity)
	}
	c := &kvCache{typ: typ, es: typ.TypeSize(), capacity: capacity, shapes: layers}
	for l, s := range layers {
		if s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV <= 0 {
			return nil, fmt.Errorf("metal: KV cache layer %d of %+v", l, s)
		}
		if s.HeadDimK > kernels.MaxHeadDim {
			return nil, fmt.Errorf("metal: KV cache layer %d: heads of %d exceed the kernels' %d", l, s.HeadDimK, kernels.MaxHeadDim)
		}
	}
	b.lock()
	defer b.unlock()
	for _, s := range layers {
		k, err := b.allocTop(capacity * s.KVHeads * s.HeadDimK * c.es)
		if err != nil {
			return nil, fmt.Errorf("metal: KV cache of %d positions: %w", capacity, err)
		}
		v, err := b.allocTop(capacity * s.KVHeads * s.HeadDimV * c.es)
		if err != nil {
			return nil, fmt.Errorf("metal: KV cache of %d positions: %w", capacity, err)
		}
		c.k, c.v = append(c.k, k), append(c.v, v)
	}
	return c, nil
}

// actScratch holds an activation quantised for a matrix product, and what
// it holds, so that the products sharing an input (Q, K and V; gate and
// up) quantise it once.
type actScratch struct {
	mem        *devMem
	valid      bool
	typ        quant.Type
	buf        *buffer
	off, n, k  int
	qs, d, ext bind
}
