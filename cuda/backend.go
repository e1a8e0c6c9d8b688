// Package cuda is the CUDA backend: the backend.Backend kernels on an
// NVIDIA GPU (discrete, or a Jetson's integrated one), through the driver
// API loaded at run time with purego (package driver), so the binary stays
// CGO_ENABLED=0 and runs, on the CPU, where there is no driver.
//
// The kernels (package kernels) reproduce the CPU backend's float32
// arithmetic operation for operation: activations are quantised to the
// same Q8 formats, dot products are summed in the CPU's order, expf, tanhf
// and RoPE's angles are the CPU's. So a model's logits on the GPU are the
// CPU's, up to the last bit of two float64 sums (RMSNorm's Σx² and the
// softmax's Σe) that the GPU adds as a tree.
//
// Execution: kernel calls are recorded, not launched, and a step's
// recording is launched when its results are needed (Read, ArgMax) on one
// stream. Per-step values (positions, token ids) go through a small
// page-locked argument area the step uploads first, so a decode step's
// launches are the same every token: when a step repeats the previous one
// exactly, the backend captures it as a CUDA graph and from then on
// launches the whole step as one graph.
package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/cuda/kernels"
	"github.com/meshnode/meshnode/gguf/backend"
)

// ErrNoDevice wraps every reason New finds no GPU to run on: no driver
// library, no device, a device too old for the kernels. The node then stays
// on the CPU.
var ErrNoDevice = errors.New("cuda: no usable CUDA device")

// Placement is where weights live.
type Placement int

const (
	// PlaceAuto maps the model file for the device on integrated GPUs
	// with compute capability 8.7 or later (Jetson Orin), where host and
	// device share memory and the mapping saves a copy, and copies to
	// device memory elsewhere.
	PlaceAuto Placement = iota
	// PlaceDevice copies every weight to device memory (cuMemAlloc).
	PlaceDevice
	// PlaceHostMapped reads weights from host memory registered with the
	// device (cuMemHostRegister), no copy, where MapHost was called.
	PlaceHostMapped
)

// Options configure a Backend.
type Options struct {
	// Library is the driver library; empty means libcuda.so.1.
	Library string
	// Device is the CUDA device ordinal.
	Device int
	// Weights is where weights go.
	Weights Placement
	// NoGraphs disables CUDA graph capture (every step is launched
	// kernel by kernel).
	NoGraphs bool
	// AttendSplitKeys: a decode step's attention over more keys than
	// this runs in three launches that spread the keys over blocks (see
	// attSplitKeys); 0 is the default, 256, and a negative value keeps it
	// in one kernel (make bench-cuda compares the two).
	AttendSplitKeys int
	// Log receives the backend's few messages; nil discards them.
	Log *slog.Logger
}

// Info describes the device a Backend runs on.
type Info struct {
	Name          string
	Major, Minor  int    // compute capability
	Arch          string // the PTX target loaded, e.g. "sm_80"
	SMs           int
	MemoryBytes   uint64
	Integrated    bool // shares memory with the CPU (Jetson)
	DriverVersion int  // 1000·major + 10·minor
	// PeakBandwidth is the memory's theoretical bandwidth in bytes/s
	// (2 × memory clock × bus width), 0 when the driver does not say.
	PeakBandwidth float64
	// HostMapped reports that weights are read from the mapped file.
	HostMapped bool
	Graphs     bool
	// JIT is how long the driver took to load the PTX (compiling it for
	// the device, or finding it in its cache).
	JIT time.Duration
}

// Stats count what the backend has done.
type Stats struct {
	Steps         int64 // recordings launched
	Launches      int64 // kernels launched one by one
	Graphs        int64 // steps launched as a graph
	Captures      int64 // graphs captured
	UploadedBytes int64 // weight bytes copied to the device
	ReadBytes     int64 // bytes copied back to the host (Read, ArgMax)
}

// Backend is the CUDA implementation of backend.Backend. Its methods may
// be called from several goroutines; they take turns.
type Backend struct {
	lib    *driver.Lib
	dev    driver.Device
	ctx    driver.Context
	mod    driver.Module
	fns    []driver.Function
	stream driver.Stream
	info   Info
	place  Placement
	log    *slog.Logger

	mu     sync.Mutex
	bound  bool // the calling OS thread is locked and has ctx current
	closed bool

	live    map[driver.DevicePtr]int // allocations → bytes
	freeMu  sync.Mutex
	freed   []driver.DevicePtr // released by cleanups, freed at the next sync
	hostMap []hostRegion

	params unsafe.Pointer // page-locked: kernel parameter values and pointers
	rec    recorder
	exec   executor
	act    actScratch
	att    *devMem // attention scores
	attMax *devMem // and their chunks' maxima, over a long context
	// attSplit is the most keys a step attends to in one kernel
	// (Options.AttendSplitKeys).
	attSplit int
	argOut   *devMem // ArgMax's, ArgMaxRows' and TopProbRows' results
	outBuf   []int32 // and their host copy (readOut)
	ropes    map[ropeKey]*ropeTable
	consts   map[string]*devMem // attention sinks, expert tables and scales by value (constPtr)
	stats    Stats
}

var _ backend.Backend = (*Backend)(nil)

// New opens the driver, picks the device and loads the kernels. Errors
// that mean "no GPU here" wrap ErrNoDevice.
func New(opt Options) (*Backend, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lib, err := driver.Load(opt.Library)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := lib.Init(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	if opt.Device < 0 || opt.Device >= n {
		return nil, fmt.Errorf("%w: device %d of %d", ErrNoDevice, opt.Device, n)
	}
	b := &Backend{lib: lib, place: opt.Weights, log: log, live: map[driver.DevicePtr]int{}, ropes: map[ropeKey]*ropeTable{}, consts: map[string]*devMem{}}
	if b.dev, err = lib.Device(opt.Device); err != nil {
		return nil, err
	}
	if err := b.readInfo(); err != nil {
		return nil, err
	}
	arch, err := kernels.ForDevice(b.info.Major, b.info.Minor)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoDevice, b.info.Name, err)
	}
	b.info.Arch = arch.Name
	if b.ctx, err = lib.PrimaryCtxRetain(b.dev); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			b.release()
		}
	}()
	if err := lib.CtxSetCurrent(b.ctx); err != nil {
		return nil, err
	}
	if b.params, err = lib.MemAllocHost(max(paramBytes, 4096)); err != nil {
		return nil, err
	}
	start := time.Now()
	var jitLog string
	if b.mod, jitLog, err = lib.ModuleLoadDataLog(arch.PTX, b.params); err != nil {
		if jitLog != "" {
			err = fmt.Errorf("%w\n%s", err, jitLog)
		}
		return nil, fmt.Errorf("cuda: loading the %s kernels on %s: %w", arch.Name, b.info.Name, err)
	}
	b.info.JIT = time.Since(start)
	b.fns = make([]driver.Function, kernels.Count)
	for id := range kernels.Count {
		if b.fns[id], err = lib.ModuleGetFunction(b.mod, id.Name()); err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", id.Name(), err)
		}
	}
	// A blocking stream: it orders with the legacy stream that the
	// synchronous copies (weight uploads, reads) use.
	if b.stream, err = lib.StreamCreate(0); err != nil {
		return nil, err
	}
	b.bound = true // for the allocations below, on this locked thread
	if err := b.rec.arena.init(b, arenaBytes); err != nil {
		return nil, err
	}
	b.bound = false
	b.info.Graphs = lib.HasGraphs() && !opt.NoGraphs
	switch {
	case opt.AttendSplitKeys == 0:
		b.attSplit = attSplitKeys
	case opt.AttendSplitKeys < 0:
		b.attSplit = math.MaxInt
	default:
		b.attSplit = opt.AttendSplitKeys
	}
	b.exec.graphs = b.info.Graphs
	if b.place == PlaceAuto && b.info.Integrated && b.info.Major*10+b.info.Minor >= 87 && lib.HasHostRegister() {
		b.place = PlaceHostMapped
	}
	log.Info("cuda backend", "device", b.info.Name, "cc", fmt.Sprintf("%d.%d", b.info.Major, b.info.Minor),
		"ptx", arch.Name, "jit", b.info.JIT.Round(time.Millisecond), "memory_mib", b.info.MemoryBytes>>20, "integrated", b.info.Integrated, "graphs", b.info.Graphs)
	ok = true
	return b, nil
}

func (b *Backend) readInfo() error {
	l, d := b.lib, b.dev
	var err error
	if b.info.Name, err = l.DeviceName(d); err != nil {
		return err
	}
	attr := func(a driver.Attribute) int {
		v, e := l.DeviceAttribute(a, d)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	b.info.Major = attr(driver.AttrComputeCapMajor)
	b.info.Minor = attr(driver.AttrComputeCapMinor)
	b.info.SMs = attr(driver.AttrMultiprocessorCount)
	b.info.Integrated = attr(driver.AttrIntegrated) != 0
	if err != nil {
		return err
	}
	// Optional facts: a driver that does not know them leaves them 0.
	clock, _ := l.DeviceAttribute(driver.AttrMemoryClockRateKHz, d)
	bus, _ := l.DeviceAttribute(driver.AttrGlobalMemoryBusWidth, d)
	b.info.PeakBandwidth = 2 * float64(clock) * 1e3 * float64(bus) / 8
	b.info.DriverVersion, _ = l.DriverVersion()
	b.info.MemoryBytes, err = l.DeviceTotalMem(d)
	return err
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "cuda" }

// Threads implements backend.Backend: the GPU is one worker to the caller.
func (b *Backend) Threads() int { return 1 }

// Info describes the device.
func (b *Backend) Info() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.info
	i.HostMapped = len(b.hostMap) > 0
	return i
}

// Stats returns the backend's counters.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// lock takes the backend; unlock releases it and the OS thread, if a
// driver call bound one.
func (b *Backend) lock() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		panic("cuda: backend used after Close")
	}
}

func (b *Backend) unlock() {
	if b.bound {
		b.bound = false
		runtime.UnlockOSThread()
	}
	b.mu.Unlock()
}

// bind makes the context current on the calling OS thread, locked to it
// until unlock: driver calls need the context current.
func (b *Backend) bind() {
	if b.bound {
		return
	}
	runtime.LockOSThread()
	b.bound = true
	if err := b.lib.CtxSetCurrent(b.ctx); err != nil {
		panic(fmt.Errorf("cuda: %w", err))
	}
}

// must panics on a driver failure in a kernel call, which has no error
// to return: the device or the driver has failed (a bad shape panics
// before any driver call).
func must(err error) {
	if err != nil {
		panic(fmt.Errorf("cuda: %w", err))
	}
}

// Close implements backend.Backend: it finishes the pending work and
// frees the backend's device memory, graphs, stream and module. Weights,
// tensors and caches must not be used afterwards.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.bound = true
	var errs []error
	if err := b.lib.CtxSetCurrent(b.ctx); err != nil {
		errs = append(errs, err)
	}
	if err := b.sync(false); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, b.release())
	b.bound = false
	b.closed = true
	return errors.Join(errs...)
}

// release frees everything New made; with the context current.
func (b *Backend) release() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	b.exec.destroy(b)
	for p := range b.live {
		keep(b.lib.MemFree(p))
	}
	clear(b.live)
	for _, r := range b.hostMap {
		keep(b.lib.MemHostUnregister(unsafe.Pointer(r.host)))
	}
	b.hostMap = nil
	if b.rec.arena.host != nil {
		keep(b.lib.MemFreeHost(b.rec.arena.host))
		b.rec.arena.host = nil
	}
	if b.params != nil {
		keep(b.lib.MemFreeHost(b.params))
		b.params = nil
	}
	if b.stream != 0 {
		keep(b.lib.StreamDestroy(b.stream))
		b.stream = 0
	}
	if b.mod != 0 {
		keep(b.lib.ModuleUnload(b.mod))
		b.mod = 0
	}
	if b.ctx != 0 {
		keep(b.lib.PrimaryCtxRelease(b.dev))
		b.ctx = 0
	}
	return errors.Join(errs...)
}
