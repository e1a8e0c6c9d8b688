// Package metal is the Metal backend: the backend.Backend kernels on an
// Apple Silicon GPU, through Metal.framework loaded at run time with
// purego and purego/objc (package mtl), so the binary stays CGO_ENABLED=0
// and runs, on the CPU, where there is no Metal.
//
// The kernels (package kernels) are MSL, compiled when the backend starts.
// They reproduce the CPU backend's float32 arithmetic operation for
// operation, as the CUDA kernels do: activations are quantised to the same
// Q8 formats, dot products are summed in the CPU's order (the prefill
// products with simdgroup matrices over exact integer sums), expf, tanhf
// and RoPE's angles are the CPU's. Metal has no float64: RMSNorm's Σx² and
// the softmax's Σe are float-float sums here, which round to the CPU's
// float32 except within about 2^-47 of a rounding boundary.
//
// Execution: kernel calls are recorded, not encoded, and a step's
// recording — every layer of a forward step — becomes one command buffer
// when its results are needed (Read, ArgMax): one compute encoder,
// setBytes for each dispatch's small arguments (positions included), the
// greedy step's argmax on the device. Weights are read in place from the
// model file's mapping (MapFile: no-copy buffers over its pages); the KV
// cache and scratch are shared buffers (unified memory).
//
// Everything above package mtl is the same code on a Mac and in the tests,
// which run it on metal/metalemu, a CPU stand-in that executes the same
// MSL compiled as host C++.
package metal

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/metal/kernels"
	"github.com/meshnode/meshnode/metal/mtl"
)

// ErrNoDevice wraps every reason New finds no GPU to run on: another
// system, no Metal device, a framework that will not load. The node then
// stays on the CPU.
var ErrNoDevice = errors.New("metal: no usable Metal device")

// Options configure a Backend.
type Options struct {
	// Device is the Metal device to run on; nil opens the system's
	// default (mtl.SystemDefault). Tests pass the stand-in.
	Device mtl.Device
	// Log receives the backend's few messages; nil discards them.
	Log *slog.Logger
}

// Info describes the device a Backend runs on.
type Info struct {
	Name string
	// WorkingSet is recommendedMaxWorkingSetSize: the bytes of buffers
	// the GPU holds without paging.
	WorkingSet uint64
	// Unified reports memory shared with the CPU (every Apple Silicon
	// GPU).
	Unified bool
	// MaxBufferLength is the largest buffer; a model file larger than it
	// is mapped as overlapping views.
	MaxBufferLength int
	// Language is the MSL version the kernels were compiled as.
	Language string
	// Compile is how long compiling the kernels and building their
	// pipelines took.
	Compile time.Duration
	// MappedBytes is the bytes of model files read in place (MapFile).
	MappedBytes int64
	// Views is the no-copy buffers over those files.
	Views int
}

// Stats count what the backend has done.
type Stats struct {
	Steps         int64 // command buffers committed
	Dispatches    int64 // kernels dispatched
	CopiedBytes   int64 // weight bytes copied into buffers (outside MapFile)
	ReadBytes     int64 // bytes read back from buffers (Read, ArgMax)
	WrittenBytes  int64 // bytes written into buffers (Write)
	SetBytesBytes int64 // bytes of small arguments passed by setBytes
}

// Backend is the Metal implementation of backend.Backend. Its methods may
// be called from several goroutines; they take turns.
type Backend struct {
	dev   mtl.Device
	lib   mtl.Library
	pipes []mtl.Pipeline
	info  Info
	log   *slog.Logger

	mu     sync.Mutex
	closed bool

	live   map[mtl.Buffer]struct{} // buffers this backend made and has not released
	freeMu sync.Mutex
	freed  []mtl.Buffer // released by cleanups, released at the next sync

	views  []view
	ops    []op
	act    actScratch
	att    *devMem // attention scores
	argOut *devMem // ArgMax's result
	ropes  map[ropeKey]*ropeTable
	stats  Stats
	argBuf []byte // one dispatch's arguments, encoded
}

var _ backend.Backend = (*Backend)(nil)

// New opens the device, compiles the kernels and builds their pipelines.
// Errors that mean "no GPU here" wrap ErrNoDevice.
func New(opt Options) (*Backend, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dev := opt.Device
	if dev == nil {
		var err error
		if dev, err = mtl.SystemDefault(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
		}
	}
	di := dev.Info()
	b := &Backend{dev: dev, log: log, ropes: map[ropeKey]*ropeTable{}, live: map[mtl.Buffer]struct{}{},
		info: Info{Name: di.Name, WorkingSet: di.WorkingSet, Unified: di.Unified, MaxBufferLength: di.MaxBufferLength}}
	start := time.Now()
	lib, err := dev.NewLibrary(kernels.Source())
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("metal: %s: %w", di.Name, err)
	}
	b.lib = lib
	b.info.Language = lib.Language()
	b.pipes = make([]mtl.Pipeline, kernels.Count)
	for id := range kernels.Count {
		p, err := lib.Pipeline(id.Name())
		if err == nil && p.SIMDWidth() != 32 {
			err = fmt.Errorf("SIMD groups of %d threads (the kernels need 32)", p.SIMDWidth())
		}
		if err == nil && p.MaxThreads() < 256 {
			err = fmt.Errorf("at most %d threads per threadgroup (the kernels need 256)", p.MaxThreads())
		}
		if err != nil {
			b.release()
			return nil, fmt.Errorf("metal: %s: kernel %s: %w", di.Name, id.Name(), err)
		}
		b.pipes[id] = p
	}
	b.info.Compile = time.Since(start)
	log.Info("metal backend", "device", di.Name, "msl", b.info.Language, "compile", b.info.Compile.Round(time.Millisecond),
		"working_set_mib", di.WorkingSet>>20, "unified", di.Unified)
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "metal" }

// Threads implements backend.Backend: the GPU is one worker to the caller.
func (b *Backend) Threads() int { return 1 }

// Info describes the device.
func (b *Backend) Info() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.info
	i.Views = len(b.views)
	return i
}

// Stats returns the backend's counters.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

func (b *Backend) lock() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		panic("metal: backend used after Close")
	}
}

func (b *Backend) unlock() { b.mu.Unlock() }

// must panics on a device failure in a kernel call, which has no error to
// return (a bad shape panics before any device call).
func must(err error) {
	if err != nil {
		panic(fmt.Errorf("metal: %w", err))
	}
}

// Close implements backend.Backend: it finishes the pending work and
// releases the backend's buffers, pipelines, library and device. Weights,
// tensors and caches must not be used afterwards.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	err := b.sync()
	b.closed = true
	return errors.Join(err, b.release())
}

// release lets go of everything New, MapFile and the allocations made.
func (b *Backend) release() error {
	b.releaseFreed()
	for buf := range b.live {
		buf.Release()
	}
	clear(b.live)
	for _, v := range b.views {
		v.buf.Release()
	}
	b.views = nil
	for _, p := range b.pipes {
		if p != nil {
			p.Release()
		}
	}
	b.pipes = nil
	if b.lib != nil {
		b.lib.Release()
		b.lib = nil
	}
	b.act, b.att, b.argOut, b.ropes = actScratch{}, nil, nil, nil
	return b.dev.Close()
}
