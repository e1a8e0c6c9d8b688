// Package driver binds the part of the CUDA driver API (libcuda.so.1) that
// the CUDA backend uses, through purego: no cgo, no CUDA runtime, cuBLAS or
// NVRTC. Functions are resolved by their current ABI names (the _v2
// symbols where the driver has them); the optional ones (graphs, host
// registration) are nil when an older driver lacks them, and the caller
// checks.
//
// Every call returns a CUresult; a failure becomes an *Error carrying the
// function, the code and the driver's own name and description of it
// (cuGetErrorName/String). errors.Is(err, ErrOutOfMemory) and friends
// match on the code.
//
// The driver API is per-thread about its current context: a caller makes
// its context current (CtxSetCurrent) on a locked OS thread before calls
// that need one.
package driver

import (
	"errors"
	"fmt"
	"strconv"
)

// DefaultPath is the driver library the NVIDIA driver installs (also on
// Jetson, under /usr/lib/aarch64-linux-gnu/tegra, on the loader's path).
const DefaultPath = "libcuda.so.1"

// ErrNoLibrary wraps every failure to load the driver library: it is
// absent, or lacks a function the backend cannot do without.
var ErrNoLibrary = errors.New("cuda: driver library unavailable")

// Result is a CUresult. The non-zero ones are errors, so they can be
// errors.Is targets.
type Result int32

// The CUresults the backend tells apart.
const (
	Success              Result = 0
	ErrInvalidValue      Result = 1
	ErrOutOfMemory       Result = 2
	ErrNotInitialized    Result = 3
	ErrNoDevice          Result = 100
	ErrInvalidDevice     Result = 101
	ErrInvalidImage      Result = 200
	ErrInvalidContext    Result = 201
	ErrNoBinaryForGPU    Result = 209
	ErrInvalidPTX        Result = 218
	ErrUnsupportedPTX    Result = 222
	ErrInvalidHandle     Result = 400
	ErrNotFound          Result = 500
	ErrNotReady          Result = 600
	ErrIllegalAddress    Result = 700
	ErrLaunchResources   Result = 701
	ErrAlreadyRegistered Result = 712
	ErrLaunchFailed      Result = 719
	ErrNotSupported      Result = 801
	ErrCaptureUnsupport  Result = 900
	ErrUnknown           Result = 999
)

var resultNames = map[Result]string{
	Success: "CUDA_SUCCESS", ErrInvalidValue: "CUDA_ERROR_INVALID_VALUE", ErrOutOfMemory: "CUDA_ERROR_OUT_OF_MEMORY",
	ErrNotInitialized: "CUDA_ERROR_NOT_INITIALIZED", ErrNoDevice: "CUDA_ERROR_NO_DEVICE", ErrInvalidDevice: "CUDA_ERROR_INVALID_DEVICE",
	ErrInvalidImage: "CUDA_ERROR_INVALID_IMAGE", ErrInvalidContext: "CUDA_ERROR_INVALID_CONTEXT",
	ErrNoBinaryForGPU: "CUDA_ERROR_NO_BINARY_FOR_GPU", ErrInvalidPTX: "CUDA_ERROR_INVALID_PTX",
	ErrUnsupportedPTX: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", ErrInvalidHandle: "CUDA_ERROR_INVALID_HANDLE",
	ErrNotFound: "CUDA_ERROR_NOT_FOUND", ErrNotReady: "CUDA_ERROR_NOT_READY", ErrIllegalAddress: "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrLaunchResources: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", ErrAlreadyRegistered: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	ErrLaunchFailed: "CUDA_ERROR_LAUNCH_FAILED", ErrNotSupported: "CUDA_ERROR_NOT_SUPPORTED",
	ErrCaptureUnsupport: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", ErrUnknown: "CUDA_ERROR_UNKNOWN",
}

// Error implements error with the enum's name.
func (r Result) Error() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "CUresult " + strconv.Itoa(int(r))
}

// Error is a failed driver call.
type Error struct {
	Func string // the driver function, e.g. "cuMemAlloc_v2"
	Code Result
	Name string // the driver's name for Code (cuGetErrorName), when it gave one
	Desc string // the driver's description (cuGetErrorString)
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.Error()
	}
	if e.Desc != "" {
		return fmt.Sprintf("cuda: %s: %s (%s)", e.Func, name, e.Desc)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Func, name)
}

// Is matches a Result target by code.
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}

// Handles. Device pointers are device virtual addresses; the others are
// the driver's opaque pointers.
type (
	Device    int32
	Context   uintptr
	Module    uintptr
	Function  uintptr
	Stream    uintptr
	Event     uintptr
	Graph     uintptr
	GraphExec uintptr
	DevicePtr uint64
)

// Attribute is a CUdevice_attribute.
type Attribute int32

// The device attributes the backend reads.
const (
	AttrMaxThreadsPerBlock   Attribute = 1
	AttrClockRateKHz         Attribute = 13
	AttrMultiprocessorCount  Attribute = 16
	AttrIntegrated           Attribute = 18
	AttrCanMapHostMemory     Attribute = 19
	AttrMemoryClockRateKHz   Attribute = 36
	AttrGlobalMemoryBusWidth Attribute = 37
	AttrL2CacheSize          Attribute = 38
	AttrComputeCapMajor      Attribute = 75
	AttrComputeCapMinor      Attribute = 76
	AttrHostRegisterSupport  Attribute = 99
)

// Flags of the calls that take them.
const (
	StreamNonBlocking = 0x1 // CU_STREAM_NON_BLOCKING

	CaptureModeRelaxed = 2 // CU_STREAM_CAPTURE_MODE_RELAXED

	HostRegisterDeviceMap = 0x2 // CU_MEMHOSTREGISTER_DEVICEMAP
	HostRegisterReadOnly  = 0x8 // CU_MEMHOSTREGISTER_READ_ONLY (CUDA 11.1+)

	EventDefault = 0x0
)
