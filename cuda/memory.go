package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// devMem is one device allocation. The backend interface has no Free:
// like the CPU backend's slices, device memory goes when the Go value
// holding it becomes unreachable; its cleanup hands the pointer back, and
// the backend frees it at its next synchronisation, when no queued kernel
// can still use it.
type devMem struct {
	ptr  driver.DevicePtr
	size int
}

// alloc allocates size bytes of device memory; with the thread bound.
func (b *Backend) alloc(size int) (*devMem, error) {
	p, err := b.lib.MemAlloc(size)
	if err != nil {
		return nil, err
	}
	m := &devMem{ptr: p, size: size}
	b.live[p] = size
	runtime.AddCleanup(m, b.releaseLater, p)
	return m, nil
}

// releaseLater runs on the runtime's cleanup goroutine.
func (b *Backend) releaseLater(p driver.DevicePtr) {
	b.freeMu.Lock()
	b.freed = append(b.freed, p)
	b.freeMu.Unlock()
}

func (b *Backend) pendingFrees() bool {
	b.freeMu.Lock()
	defer b.freeMu.Unlock()
	return len(b.freed) > 0
}

// allocTop is alloc for the methods that allocate and hold no other
// device pointer (NewTensor, Weight, NewKVCache): when the device is out of
// memory and memory awaits freeing, it frees it and tries again.
func (b *Backend) allocTop(size int) (*devMem, error) {
	m, err := b.alloc(size)
	if errors.Is(err, driver.ErrOutOfMemory) && b.pendingFrees() {
		if err = b.sync(true); err == nil {
			m, err = b.alloc(size)
		}
	}
	return m, err
}

// freeReleased frees what cleanups released; after a stream sync, with
// the thread bound, and only where the caller holds no device pointer it
// took from a Go value that may have died meanwhile (its memory could be
// among those freed).
func (b *Backend) freeReleased() {
	b.freeMu.Lock()
	ps := b.freed
	b.freed = nil
	b.freeMu.Unlock()
	for _, p := range ps {
		if _, ok := b.live[p]; ok { // not freed by Close already
			delete(b.live, p)
			must(b.lib.MemFree(p))
		}
	}
}

// zeroed allocates size bytes (a multiple of 4) cleared to zero.
func (b *Backend) zeroed(size int) (*devMem, error) {
	m, err := b.allocTop(size)
	if err != nil {
		return nil, err
	}
	if err := b.lib.MemsetD32Async(m.ptr, 0, size/4, b.stream); err != nil {
		return nil, err
	}
	return m, nil
}

// buffer is the backend's activation memory: float32 elements.
type buffer struct {
	mem *devMem
	n   int
}

func (b *buffer) Len() int { return b.n }

// NewTensor implements backend.Backend. It panics when the device is out
// of memory (the interface has no error to return; size sessions with
// MemoryBytes so that it is not).
func (b *Backend) NewTensor(rows, cols int) backend.Tensor {
	if rows <= 0 || cols <= 0 {
		panic(fmt.Sprintf("cuda: tensor of %d × %d", rows, cols))
	}
	b.lock()
	defer b.unlock()
	b.bind()
	m, err := b.zeroed(rows * cols * 4)
	must(err)
	return backend.Tensor{Buf: &buffer{mem: m, n: rows * cols}, Rows: rows, Cols: cols}
}

func asBuffer(t backend.Tensor) *buffer {
	buf, ok := t.Buf.(*buffer)
	if !ok {
		panic(fmt.Sprintf("cuda: tensor of another backend (%T)", t.Buf))
	}
	if t.Off < 0 || t.Off+t.Rows*t.Cols > buf.n {
		panic("cuda: tensor outside its buffer")
	}
	return buf
}

// ptr is the device address of t's first element.
func ptr(t backend.Tensor) uint64 {
	return uint64(asBuffer(t).mem.ptr) + uint64(t.Off)*4
}

// weight is a matrix in device memory, or in host memory mapped for the
// device. Vectors (one row) are also kept dequantised to float32, for
// RMSNorm and biases.
type weight struct {
	typ        quant.Type
	rows, cols int
	rowSize    int
	ptr        uint64
	mem        *devMem // nil when host-mapped
	vec        *devMem // rows == 1 only
}

func (w *weight) Type() quant.Type { return w.typ }
func (w *weight) Rows() int        { return w.rows }
func (w *weight) Cols() int        { return w.cols }

func asWeight(w backend.Weight) *weight {
	cw, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("cuda: weight of another backend (%T)", w))
	}
	return cw
}

func vector(w backend.Weight) *weight {
	cw := asWeight(w)
	if cw.vec == nil {
		panic("cuda: a vector argument has more than one row")
	}
	return cw
}

// ErrType is returned by Weight for an element type without kernels.
var ErrType = errors.New("cuda: unsupported tensor type")

// Weight implements backend.Backend: the bytes are copied to device memory
// once, or, where MapHost mapped them, read in place.
func (b *Backend) Weight(typ quant.Type, rows, cols int, data []byte) (backend.Weight, error) {
	if _, ok := kernels.WeightKernel(typ, kernels.MatVec); !ok {
		return nil, fmt.Errorf("%w: %s", ErrType, typ)
	}
	act, _ := quant.VecDotType(typ)
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("cuda: weight of %d × %d", rows, cols)
	}
	rs, err := typ.RowSize(cols)
	if err != nil {
		return nil, fmt.Errorf("cuda: weight rows: %w", err)
	}
	if _, err := act.RowSize(cols); err != nil {
		return nil, fmt.Errorf("cuda: %s rows of %d cannot be dotted: %w", typ, cols, err)
	}
	if len(data) != rows*rs {
		return nil, fmt.Errorf("cuda: %d × %d %s weight is %d bytes, got %d", rows, cols, typ, rows*rs, len(data))
	}
	w := &weight{typ: typ, rows: rows, cols: cols, rowSize: rs}
	var vec []float32
	if rows == 1 {
		vec = make([]float32, cols)
		if err := quant.Dequantize(typ, data, vec); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
	}

	b.lock()
	defer b.unlock()
	b.bind()
	if p, ok := b.mapped(data); ok {
		w.ptr = p
	} else {
		if w.mem, err = b.allocTop(len(data)); err != nil {
			return nil, fmt.Errorf("cuda: %d × %d %s weight: %w", rows, cols, typ, err)
		}
		if err := b.lib.MemcpyHtoD(w.mem.ptr, unsafe.Pointer(&data[0]), len(data)); err != nil {
			return nil, err
		}
		w.ptr = uint64(w.mem.ptr)
		b.stats.UploadedBytes += int64(len(data))
	}
	if vec != nil {
		if w.vec, err = b.allocTop(4 * cols); err != nil {
			return nil, err
		}
		if err := b.lib.MemcpyHtoD(w.vec.ptr, unsafe.Pointer(&vec[0]), 4*cols); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// hostRegion is host memory registered with the device.
type hostRegion struct {
	host unsafe.Pointer
	n    int
	dev  driver.DevicePtr
}

// MapHost registers data (a model file's memory mapping) with the device
// so that Weight reads the weights inside it in place, without a copy:
// worth it where host and device share memory (Jetson), and only with
// PlaceHostMapped (PlaceAuto picks it on Orin). It returns false with the
// reason when the driver refuses (the weights are then copied), and does
// nothing under PlaceDevice. data must stay mapped until Close.
func (b *Backend) MapHost(data []byte) (bool, error) {
	if b.place != PlaceHostMapped || len(data) == 0 {
		return false, nil
	}
	if !b.lib.HasHostRegister() {
		return false, fmt.Errorf("cuda: the driver cannot map host memory")
	}
	// Registration is by whole pages.
	pg := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&data[0]))
	lo := start &^ (pg - 1)
	n := int((start+uintptr(len(data))+pg-1)&^(pg-1) - lo)
	base := unsafe.Add(unsafe.Pointer(&data[0]), -int(start-lo))
	b.lock()
	defer b.unlock()
	b.bind()
	err := b.lib.MemHostRegister(base, n, driver.HostRegisterDeviceMap|driver.HostRegisterReadOnly)
	if err != nil {
		// Drivers before 11.1 lack the read-only flag.
		err = b.lib.MemHostRegister(base, n, driver.HostRegisterDeviceMap)
	}
	if err != nil {
		return false, err
	}
	dev, err := b.lib.MemHostGetDevicePointer(base)
	if err != nil {
		b.lib.MemHostUnregister(base)
		return false, err
	}
	b.hostMap = append(b.hostMap, hostRegion{host: base, n: n, dev: dev})
	return true, nil
}

// mapped is data's device address when it lies in a registered region and
// is aligned as the kernels load it.
func (b *Backend) mapped(data []byte) (uint64, bool) {
	if len(data) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(&data[0]))
	for _, r := range b.hostMap {
		h := uintptr(r.host)
		if p >= h && p+uintptr(len(data)) <= h+uintptr(r.n) && p%4 == 0 {
			return uint64(r.dev) + uint64(p-h), true
		}
	}
	return 0, false
}

// kvCache stores each layer's keys by head then position and values
// transposed, as the CPU backend does (see ops.cuh).
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
		panic(fmt.Sprintf("cuda: KV cache of another backend (%T)", c))
	}
	return kc
}

// NewKVCache implements backend.Backend.
func (b *Backend) NewKVCache(typ quant.Type, capacity int, layers []backend.KVShape) (backend.KVCache, error) {
	if typ != quant.F16 && typ != quant.F32 {
		return nil, fmt.Errorf("cuda: KV cache type %s (want F16 or F32)", typ)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("cuda: KV cache of %d positions", capacity)
	}
	c := &kvCache{typ: typ, es: typ.TypeSize(), capacity: capacity, shapes: layers}
	for l, s := range layers {
		if s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV <= 0 {
			return nil, fmt.Errorf("cuda: KV cache layer %d of %+v", l, s)
		}
		if s.HeadDimK > kernels.MaxHeadDim {
			return nil, fmt.Errorf("cuda: KV cache layer %d: heads of %d exceed the kernels' %d", l, s.HeadDimK, kernels.MaxHeadDim)
		}
	}
	b.lock()
	defer b.unlock()
	b.bind()
	for _, s := range layers {
		// Sizes rounded up to whole float32 words for the memset.
		k, err := b.zeroed((capacity*s.KVHeads*s.HeadDimK*c.es + 3) &^ 3)
		if err != nil {
			return nil, fmt.Errorf("cuda: KV cache of %d positions: %w", capacity, err)
		}
		v, err := b.zeroed((capacity*s.KVHeads*s.HeadDimV*c.es + 3) &^ 3)
		if err != nil {
			return nil, fmt.Errorf("cuda: KV cache of %d positions: %w", capacity, err)
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
	qs, d, ext uint64
}
