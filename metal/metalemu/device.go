package metalemu

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/meshnode/meshnode/metal/kernels"
	"github.com/meshnode/meshnode/metal/msl"
	"github.com/meshnode/meshnode/metal/mtl"
)

// Config is what the stand-in device reports itself to be.
type Config struct {
	// Name is the device's name; empty means "MeshEmu Metal stand-in".
	Name string
	// WorkingSet is recommendedMaxWorkingSetSize; 0 means 16 GiB.
	WorkingSet uint64
	// MaxBufferLength bounds one buffer; 0 means 8 GiB.
	MaxBufferLength int
	// Memory bounds the buffers made with NewBuffer in all; 0 means 16 GiB.
	Memory uint64
}

// lib is the loaded stand-in library: one per process, as its runtime is.
type lib struct {
	kernel     func(name string) int32
	refSize    func(k, index int32) int64
	alloc      func(n uintptr) unsafe.Pointer
	free       func(p unsafe.Pointer) int32
	live       func() int64
	setMemory  func(n uintptr)
	dispatches func() int64
	dispatch   func(k int32, bufs *unsafe.Pointer, tglen *int64, ntg int32, groups, threads *uint32, err *byte, errlen int32) int32
}

var (
	libMu   sync.Mutex
	libs    = map[string]*lib{}
	pageLen = os.Getpagesize()
)

func load(path string) (*lib, error) {
	libMu.Lock()
	defer libMu.Unlock()
	if l := libs[path]; l != nil {
		return l, nil
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", mtl.ErrUnavailable, err)
	}
	l := &lib{}
	purego.RegisterLibFunc(&l.kernel, h, "mtlemu_kernel")
	purego.RegisterLibFunc(&l.refSize, h, "mtlemu_ref_size")
	purego.RegisterLibFunc(&l.alloc, h, "mtlemu_alloc")
	purego.RegisterLibFunc(&l.free, h, "mtlemu_free")
	purego.RegisterLibFunc(&l.live, h, "mtlemu_live")
	purego.RegisterLibFunc(&l.setMemory, h, "mtlemu_set_memory")
	purego.RegisterLibFunc(&l.dispatches, h, "mtlemu_dispatches")
	purego.RegisterLibFunc(&l.dispatch, h, "mtlemu_dispatch")
	libs[path] = l
	return l, nil
}

// Device is a stand-in Metal device: an mtl.Device, plus hooks for tests.
type Device struct {
	l      *lib
	info   mtl.Info
	source string       // the program the library runs
	ks     []msl.Kernel // its kernels
}

var _ mtl.Device = (*Device)(nil)

// Open loads the stand-in library at path (from Build or Path) as a
// device running metal/kernels' program.
func Open(path string, cfg Config) (*Device, error) { return OpenProgram(path, kernels.Files(), cfg) }

// OpenProgram loads the stand-in library at path, built by BuildProgram
// from files, as a device.
func OpenProgram(path string, files []msl.File, cfg Config) (*Device, error) {
	ks, err := msl.Parse(files)
	if err != nil {
		return nil, err
	}
	l, err := load(path)
	if err != nil {
		return nil, err
	}
	d := &Device{l: l, source: msl.Concat(files), ks: ks, info: mtl.Info{
		Name: cfg.Name, WorkingSet: cfg.WorkingSet, Unified: true, MaxBufferLength: cfg.MaxBufferLength,
		PageSize: pageLen, MaxThreadgroupMemory: 32 << 10,
	}}
	if d.info.Name == "" {
		d.info.Name = "MeshEmu Metal stand-in"
	}
	if d.info.WorkingSet == 0 {
		d.info.WorkingSet = 16 << 30
	}
	if d.info.MaxBufferLength == 0 {
		d.info.MaxBufferLength = 8 << 30
	}
	mem := cfg.Memory
	if mem == 0 {
		mem = 16 << 30
	}
	l.setMemory(uintptr(mem))
	return d, nil
}

// Info implements mtl.Device.
func (d *Device) Info() mtl.Info { return d.info }

// Live is the number of buffers made by NewBuffer and not yet released.
func (d *Device) Live() int64 { return d.l.live() }

// SetMemory bounds the bytes NewBuffer gives out in all (for every
// stand-in device of the process: the runtime is one); 0 restores the
// default, 16 GiB.
func (d *Device) SetMemory(n uint64) {
	if n == 0 {
		n = 16 << 30
	}
	d.l.setMemory(uintptr(n))
}

// Dispatches is the number of dispatches run so far.
func (d *Device) Dispatches() int64 { return d.l.dispatches() }

// Step implements mtl.Device: the stand-in has no autorelease pool.
func (d *Device) Step(f func() error) error { return f() }

// Close implements mtl.Device.
func (d *Device) Close() error { return nil }

// ---- Library and pipelines ----

type library struct {
	d  *Device
	ks map[string]*msl.Kernel
}

// NewLibrary implements mtl.Device: the stand-in runs the program it was
// built from, so the source must be that program.
func (d *Device) NewLibrary(source string) (mtl.Library, error) {
	if source != d.source {
		return nil, fmt.Errorf("metalemu: the stand-in runs the program it was built from; this source differs from it")
	}
	l := &library{d: d, ks: map[string]*msl.Kernel{}}
	for i := range d.ks {
		l.ks[d.ks[i].Name] = &d.ks[i]
	}
	return l, nil
}

func (l *library) Language() string { return "host C++17 (stand-in)" }
func (l *library) Release()         {}

// MaxThreads is the stand-in pipelines' maxTotalThreadsPerThreadgroup.
const MaxThreads = 1024

type pipeline struct {
	name  string
	index int32
	k     *msl.Kernel
	refs  map[int]int64 // buffer index → bytes a reference parameter reads
}

func (l *library) Pipeline(name string) (mtl.Pipeline, error) {
	k, ok := l.ks[name]
	if !ok {
		return nil, fmt.Errorf("metalemu: no kernel %s in the library", name)
	}
	idx := l.d.l.kernel(name)
	if idx < 0 {
		return nil, fmt.Errorf("metalemu: kernel %s is not in the built library", name)
	}
	p := &pipeline{name: name, index: idx, k: k, refs: map[int]int64{}}
	for _, pa := range k.Params {
		if pa.Kind == msl.Buffer && pa.Ref {
			p.refs[pa.Index] = l.d.l.refSize(idx, int32(pa.Index))
		}
	}
	return p, nil
}

func (p *pipeline) Name() string    { return p.name }
func (p *pipeline) MaxThreads() int { return MaxThreads }
func (p *pipeline) SIMDWidth() int  { return 32 }
func (p *pipeline) Release()        {}

// RefSize is the bytes kernel name's reference parameter at index reads:
// sizeof of its structure as the stand-in compiled it.
func (d *Device) RefSize(name string, index int) (int64, error) {
	k := d.l.kernel(name)
	if k < 0 {
		return 0, fmt.Errorf("metalemu: no kernel %s", name)
	}
	return d.l.refSize(k, int32(index)), nil
}

// ---- Buffers ----

type buffer struct {
	d     *Device
	p     unsafe.Pointer
	n     int
	owned bool
	freed bool
}

func (b *buffer) Contents() unsafe.Pointer { return b.p }
func (b *buffer) Len() int                 { return b.n }

func (b *buffer) Release() {
	if b.owned && !b.freed {
		b.d.l.free(b.p)
		b.freed = true
	}
}

// NewBuffer implements mtl.Device.
func (d *Device) NewBuffer(n int) (mtl.Buffer, error) {
	if n <= 0 || n > d.info.MaxBufferLength {
		return nil, fmt.Errorf("metalemu: a buffer of %d bytes (the device makes at most %d)", n, d.info.MaxBufferLength)
	}
	p := d.l.alloc(uintptr(n))
	if p == nil {
		return nil, fmt.Errorf("metalemu: newBufferWithLength %d failed: out of memory", n)
	}
	return &buffer{d: d, p: p, n: n, owned: true}, nil
}

// NewBufferNoCopy implements mtl.Device.
func (d *Device) NewBufferNoCopy(p unsafe.Pointer, n int) (mtl.Buffer, error) {
	pg := uintptr(d.info.PageSize)
	if uintptr(p)%pg != 0 || uintptr(n)%pg != 0 || n <= 0 || n > d.info.MaxBufferLength {
		return nil, fmt.Errorf("metalemu: a no-copy buffer of %d bytes at %p (want whole %d-byte pages, at most %d)", n, p, pg, d.info.MaxBufferLength)
	}
	return &buffer{d: d, p: p, n: n}, nil
}

// ---- Command buffers ----

type binding struct {
	buf   *buffer
	off   int
	bytes []byte // setBytes
}

type command struct {
	p        *pipeline
	bufs     [mtl.MaxBufferIndex]unsafe.Pointer
	keep     [][]byte
	tg       []int64
	groups   [3]uint32
	threads  [3]uint32
	encError error
}

type commandBuffer struct {
	d       *Device
	enc     *encoder
	cmds    []command
	done    bool
	err     error
	retains []*buffer
}

// NewCommandBuffer implements mtl.Device.
func (d *Device) NewCommandBuffer() (mtl.CommandBuffer, error) {
	return &commandBuffer{d: d}, nil
}

func (c *commandBuffer) Encoder() mtl.Encoder {
	if c.enc == nil {
		c.enc = &encoder{c: c}
	}
	return c.enc
}

// Commit runs the dispatches in order; the first that fails ends the
// command buffer with its error, as a faulting kernel does on a GPU.
func (c *commandBuffer) Commit() {
	if c.done {
		panic("metalemu: command buffer committed twice")
	}
	c.done = true
	errBuf := make([]byte, 1024)
	for i := range c.cmds {
		cmd := &c.cmds[i]
		if cmd.encError != nil {
			c.err = cmd.encError
			return
		}
		var tg *int64
		if len(cmd.tg) > 0 {
			tg = &cmd.tg[0]
		}
		if c.d.l.dispatch(cmd.p.index, &cmd.bufs[0], tg, int32(len(cmd.tg)), &cmd.groups[0], &cmd.threads[0], &errBuf[0], int32(len(errBuf))) != 0 {
			n := 0
			for n < len(errBuf) && errBuf[n] != 0 {
				n++
			}
			c.err = fmt.Errorf("metalemu: %s", errBuf[:n])
			return
		}
	}
	c.cmds = nil
}

// ErrNotCommitted is Wait's error on a command buffer never committed.
var ErrNotCommitted = errors.New("metalemu: Wait before Commit")

func (c *commandBuffer) Wait() error {
	if !c.done {
		return ErrNotCommitted
	}
	return c.err
}

type encoder struct {
	c        *commandBuffer
	p        *pipeline
	bindings [mtl.MaxBufferIndex]binding
	tg       [8]int
}

func (e *encoder) SetPipeline(p mtl.Pipeline) { e.p = p.(*pipeline) }

func (e *encoder) SetBuffer(index int, b mtl.Buffer, off int) {
	e.bindings[index] = binding{buf: b.(*buffer), off: off}
}

func (e *encoder) SetBytes(index int, p []byte) {
	if len(p) == 0 || len(p) > mtl.MaxBytes {
		panic(fmt.Sprintf("metalemu: setBytes of %d bytes", len(p)))
	}
	e.bindings[index] = binding{bytes: append([]byte(nil), p...)}
}

func (e *encoder) SetThreadgroupMemory(index, n int) { e.tg[index] = n }

// Dispatch records the dispatch with the current bindings, checking them
// against the kernel's parameters as the GPU would need them: every
// buffer bound, every structure's bytes complete, inside its buffer,
// threadgroup memory set in multiples of 16 and within the device's.
func (e *encoder) Dispatch(groups, threads mtl.Size) {
	cmd := command{p: e.p}
	cmd.encError = e.check(&cmd, groups, threads)
	e.c.cmds = append(e.c.cmds, cmd)
}

func (e *encoder) check(cmd *command, groups, threads mtl.Size) error {
	p := e.p
	if p == nil {
		return fmt.Errorf("metalemu: dispatch without a pipeline")
	}
	if threads.Threads() > MaxThreads || threads.Threads() <= 0 || groups.Threads() <= 0 {
		return fmt.Errorf("metalemu: %s: %v threadgroups of %v threads", p.name, groups, threads)
	}
	cmd.groups = [3]uint32{uint32(groups.W), uint32(groups.H), uint32(groups.D)}
	cmd.threads = [3]uint32{uint32(threads.W), uint32(threads.H), uint32(threads.D)}
	for _, pa := range p.k.Params {
		switch pa.Kind {
		case msl.Buffer:
			b := e.bindings[pa.Index]
			need := int64(4)
			if pa.Ref {
				need = p.refs[pa.Index]
			}
			switch {
			case b.bytes != nil:
				if int64(len(b.bytes)) < need {
					return fmt.Errorf("metalemu: %s: buffer(%d) %s: %d bytes set, the structure reads %d", p.name, pa.Index, pa.Name, len(b.bytes), need)
				}
				cmd.keep = append(cmd.keep, b.bytes)
				cmd.bufs[pa.Index] = unsafe.Pointer(&b.bytes[0])
			case b.buf != nil:
				if b.buf.freed {
					return fmt.Errorf("metalemu: %s: buffer(%d) %s was released", p.name, pa.Index, pa.Name)
				}
				if b.off < 0 || int64(b.off)+need > int64(b.buf.n) {
					return fmt.Errorf("metalemu: %s: buffer(%d) %s bound at offset %d of a %d-byte buffer", p.name, pa.Index, pa.Name, b.off, b.buf.n)
				}
				cmd.bufs[pa.Index] = unsafe.Add(b.buf.p, b.off)
				e.c.retains = append(e.c.retains, b.buf)
			default:
				return fmt.Errorf("metalemu: %s: nothing bound at buffer(%d) (%s)", p.name, pa.Index, pa.Name)
			}
		case msl.Threadgroup:
			n := e.tg[pa.Index]
			if n <= 0 || n%16 != 0 {
				return fmt.Errorf("metalemu: %s: threadgroup(%d) %s has length %d (want a positive multiple of 16)", p.name, pa.Index, pa.Name, n)
			}
			for len(cmd.tg) <= pa.Index {
				cmd.tg = append(cmd.tg, 0)
			}
			cmd.tg[pa.Index] = int64(n)
		}
	}
	total := int64(0)
	for _, n := range cmd.tg {
		total += n
	}
	if total > int64(e.c.d.info.MaxThreadgroupMemory) {
		return fmt.Errorf("metalemu: %s: %d bytes of threadgroup memory exceed the device's %d", p.name, total, e.c.d.info.MaxThreadgroupMemory)
	}
	return nil
}
