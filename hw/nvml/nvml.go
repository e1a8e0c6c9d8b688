// Package nvml reads NVIDIA GPUs through NVML (libnvidia-ml.so.1), opened
// at run time with purego so that no build needs cgo or the library.
//
// The library is reached only through [Lib], a table of functions: [Load]
// fills it from the shared library and tests fill it with Go fakes. A
// [Session] enumerates the devices; its [Counter] sums their total energy
// (nvmlDeviceGetTotalEnergyConsumption, Volta and later) for the meters.
// Where NVML initialises but cannot read energy, as on a Jetson, every
// energy read fails and the counter is never seen live.
package nvml

import (
	"fmt"
	"strings"
)

// Return is an nvmlReturn_t. The non-zero values are errors.
type Return int32

// The nvmlReturn_t values meshnode tells apart.
const (
	Success             Return = 0
	ErrUninitialized    Return = 1
	ErrInvalidArgument  Return = 2
	ErrNotSupported     Return = 3
	ErrNoPermission     Return = 4
	ErrNotFound         Return = 6
	ErrInsufficientSize Return = 7
	ErrDriverNotLoaded  Return = 9
	ErrTimeout          Return = 10
	ErrLibraryNotFound  Return = 12
	ErrFunctionNotFound Return = 13
	ErrGPUIsLost        Return = 15
	ErrUnknown          Return = 999
)

var returnNames = map[Return]string{
	Success:             "Success",
	ErrUninitialized:    "Uninitialized",
	ErrInvalidArgument:  "Invalid Argument",
	ErrNotSupported:     "Not Supported",
	ErrNoPermission:     "Insufficient Permissions",
	ErrNotFound:         "Not Found",
	ErrInsufficientSize: "Insufficient Size",
	ErrDriverNotLoaded:  "Driver Not Loaded",
	ErrTimeout:          "Timeout",
	ErrLibraryNotFound:  "Library Not Found",
	ErrFunctionNotFound: "Function Not Found",
	ErrGPUIsLost:        "GPU is lost",
	ErrUnknown:          "Unknown Error",
}

// Error names the code as nvmlErrorString does.
func (r Return) Error() string {
	if s, ok := returnNames[r]; ok {
		return "nvml: " + s
	}
	return fmt.Sprintf("nvml: error %d", int32(r))
}

// err turns a call's result into a Go error naming the call.
func (r Return) err(call string) error {
	if r == Success {
		return nil
	}
	return fmt.Errorf("%s: %w", call, r)
}

// Device is an nvmlDevice_t handle.
type Device uintptr

// Memory is nvmlMemory_t.
type Memory struct {
	Total, Free, Used uint64
}

// MemoryV2 is nvmlMemory_v2_t; Version must be [MemoryV2Version].
type MemoryV2 struct {
	Version  uint32
	_        uint32 // C padding before the first 8-byte member
	Total    uint64
	Reserved uint64
	Free     uint64
	Used     uint64
}

// MemoryV2Version is NVML_STRUCT_VERSION(Memory, 2): the struct's size
// with the version number in the top byte.
const MemoryV2Version = 40 | 2<<24

// NameBufferSize is NVML_DEVICE_NAME_V2_BUFFER_SIZE.
const NameBufferSize = 96

// Lib is the NVML function table. Required entries are non-nil; optional
// ones (newer or older than some drivers) may be nil.
type Lib struct {
	Init                   func() Return              // nvmlInit_v2
	Shutdown               func() Return              // nvmlShutdown
	DeviceGetCount         func(count *uint32) Return // nvmlDeviceGetCount_v2
	DeviceGetHandleByIndex func(index uint32, dev *Device) Return
	DeviceGetName          func(dev Device, name *byte, length uint32) Return
	DeviceGetMemoryInfo    func(dev Device, mem *Memory) Return
	// DeviceGetTotalEnergyConsumption reports millijoules since the
	// driver was loaded.
	DeviceGetTotalEnergyConsumption func(dev Device, mj *uint64) Return

	// Optional.
	DeviceGetMemoryInfoV2 func(dev Device, mem *MemoryV2) Return
	DeviceGetArchitecture func(dev Device, arch *uint32) Return
}

// Architecture names an nvmlDeviceArchitecture_t.
func Architecture(a uint32) string {
	names := []string{2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada", 9: "Hopper", 10: "Blackwell"}
	if int(a) < len(names) && names[a] != "" {
		return names[a]
	}
	return fmt.Sprintf("unknown(%d)", a)
}

// cString is the Go string of a NUL-terminated buffer.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}
