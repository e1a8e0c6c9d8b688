// Package mtl is the narrow interface through which the Metal backend
// reaches a GPU: a device, its buffers, compiled compute pipelines, and
// command buffers with one compute encoder each. Everything the backend
// does above the Objective-C calls is written against these interfaces.
//
// There are two implementations. On darwin/arm64, SystemDefault opens
// Metal.framework through purego and purego/objc (objc_darwin.go); on
// every other system it reports ErrUnavailable. Package metal/metalemu is
// the other implementation: a CPU stand-in that runs the same MSL sources
// compiled as host C++, which the tests use where there is no Mac.
//
// The semantics the backend relies on are Metal's, and the stand-in keeps
// them: buffers are shared memory the CPU reads and writes through
// Contents; an encoder's dispatches run in order, each seeing the writes
// of the ones before (a serial compute encoder); a command buffer's Wait
// returns once it has run, and a kernel that faulted shows in Wait's error
// (Metal's status and error), not as a failed wait.
package mtl

import (
	"errors"
	"unsafe"
)

// ErrUnavailable wraps every reason there is no Metal device to run on:
// another system, no device, a framework that will not load.
//
//lint:ignore ST1005 the sentence starts with the framework's name
var ErrUnavailable = errors.New("Metal unavailable")

// Size is a grid or threadgroup size (MTLSize).
type Size struct{ W, H, D int }

// Threads is the number of threads (or threadgroups) in s.
func (s Size) Threads() int { return s.W * s.H * s.D }

// Info describes a device.
type Info struct {
	// Name is the device's name ("Apple M2 Pro").
	Name string
	// WorkingSet is recommendedMaxWorkingSetSize: how many bytes of
	// buffers the device can use without hurting performance.
	WorkingSet uint64
	// Unified reports hasUnifiedMemory.
	Unified bool
	// MaxBufferLength is the largest buffer the device makes.
	MaxBufferLength int
	// PageSize is the granularity of no-copy buffers: their address and
	// length must be multiples of it (16 KiB on Apple Silicon).
	PageSize int
	// MaxThreadgroupMemory is the threadgroup memory a dispatch may use.
	MaxThreadgroupMemory int
}

// Device is one GPU.
type Device interface {
	Info() Info
	// NewLibrary compiles MSL source. It fails with the compiler's
	// message; a library that compiled is what Language reports.
	NewLibrary(source string) (Library, error)
	// NewBuffer makes a zeroed shared buffer of n bytes.
	NewBuffer(n int) (Buffer, error)
	// NewBufferNoCopy wraps n bytes at p, which must be page-aligned and
	// a whole number of pages, as a buffer without copying them. The
	// memory must outlive the buffer.
	NewBufferNoCopy(p unsafe.Pointer, n int) (Buffer, error)
	// NewCommandBuffer starts a command buffer on the device's queue.
	NewCommandBuffer() (CommandBuffer, error)
	// Step runs f inside an autorelease pool on a locked OS thread, as
	// every call that makes autoreleased objects must run.
	Step(f func() error) error
	// Close releases the queue and the device.
	Close() error
}

// Library is compiled MSL.
type Library interface {
	// Language is the MSL version the library was compiled as ("3.1").
	Language() string
	// Pipeline builds the compute pipeline of the named kernel.
	Pipeline(name string) (Pipeline, error)
	Release()
}

// Pipeline is a compiled compute kernel.
type Pipeline interface {
	Name() string
	// MaxThreads is maxTotalThreadsPerThreadgroup.
	MaxThreads() int
	// SIMDWidth is threadExecutionWidth (32 on Apple GPUs).
	SIMDWidth() int
	Release()
}

// Buffer is device memory the CPU shares.
type Buffer interface {
	// Contents is the buffer's address in this process.
	Contents() unsafe.Pointer
	// Len is the buffer's length in bytes.
	Len() int
	Release()
}

// CommandBuffer is a unit of work: one compute encoder's dispatches.
type CommandBuffer interface {
	// Encoder is the command buffer's compute encoder (made on the first
	// call; serial dispatch).
	Encoder() Encoder
	// Commit ends the encoder and queues the command buffer.
	Commit()
	// Wait waits until the command buffer has run and returns its error:
	// a kernel that faulted, a device that was lost.
	Wait() error
}

// Encoder encodes compute dispatches. Bindings persist from one dispatch
// to the next, as Metal's do.
type Encoder interface {
	SetPipeline(p Pipeline)
	// SetBuffer binds b at offset off to [[buffer(index)]].
	SetBuffer(index int, b Buffer, off int)
	// SetBytes copies p (at most 4 KiB) into the command buffer and binds
	// it to [[buffer(index)]].
	SetBytes(index int, p []byte)
	// SetThreadgroupMemory sets the length (a multiple of 16) of
	// [[threadgroup(index)]].
	SetThreadgroupMemory(index, n int)
	// Dispatch runs groups threadgroups of threads threads each.
	Dispatch(groups, threads Size)
}

// MaxBytes is the most SetBytes takes.
const MaxBytes = 4096

// MaxBufferIndex bounds [[buffer(n)]]: indices 0 … 30.
const MaxBufferIndex = 31
