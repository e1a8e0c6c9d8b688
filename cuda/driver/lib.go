package driver

import (
	"fmt"
	"unsafe"
)

// Lib is a loaded driver library: the addresses of its functions. Its
// methods are safe for concurrent use as far as the driver's functions are.
type Lib struct {
	path  string
	fn    [numFuncs]uintptr
	names [numFuncs]string // the symbol each function was bound to
}

// funcID indexes Lib.fn.
type funcID int

const (
	fInit funcID = iota
	fDriverGetVersion
	fGetErrorName
	fGetErrorString
	fDeviceGetCount
	fDeviceGet
	fDeviceGetName
	fDeviceGetAttribute
	fDeviceTotalMem
	fPrimaryCtxRetain
	fPrimaryCtxRelease
	fCtxSetCurrent
	fCtxSynchronize
	fModuleLoadData
	fModuleLoadDataEx
	fModuleUnload
	fModuleGetFunction
	fMemGetInfo
	fMemAlloc
	fMemFree
	fMemAllocHost
	fMemFreeHost
	fMemcpyHtoD
	fMemcpyDtoH
	fMemcpyHtoDAsync
	fMemcpyDtoHAsync
	fMemcpyDtoDAsync
	fMemsetD32
	fMemsetD32Async
	fLaunchKernel
	fStreamCreate
	fStreamDestroy
	fStreamSynchronize
	fEventCreate
	fEventRecord
	fEventSynchronize
	fEventElapsedTime
	fEventDestroy
	// Optional from here on.
	fStreamBeginCapture
	fStreamEndCapture
	fGraphInstantiate
	fGraphLaunch
	fGraphExecDestroy
	fGraphDestroy
	fMemHostRegister
	fMemHostUnregister
	fMemHostGetDevicePointer
	numFuncs
)

// firstOptional is the first function a driver may lack.
const firstOptional = fStreamBeginCapture

var funcNames = [numFuncs]string{
	fInit:                    "cuInit",
	fDriverGetVersion:        "cuDriverGetVersion",
	fGetErrorName:            "cuGetErrorName",
	fGetErrorString:          "cuGetErrorString",
	fDeviceGetCount:          "cuDeviceGetCount",
	fDeviceGet:               "cuDeviceGet",
	fDeviceGetName:           "cuDeviceGetName",
	fDeviceGetAttribute:      "cuDeviceGetAttribute",
	fDeviceTotalMem:          "cuDeviceTotalMem_v2",
	fPrimaryCtxRetain:        "cuDevicePrimaryCtxRetain",
	fPrimaryCtxRelease:       "cuDevicePrimaryCtxRelease_v2",
	fCtxSetCurrent:           "cuCtxSetCurrent",
	fCtxSynchronize:          "cuCtxSynchronize",
	fModuleLoadData:          "cuModuleLoadData",
	fModuleLoadDataEx:        "cuModuleLoadDataEx",
	fModuleUnload:            "cuModuleUnload",
	fModuleGetFunction:       "cuModuleGetFunction",
	fMemGetInfo:              "cuMemGetInfo_v2",
	fMemAlloc:                "cuMemAlloc_v2",
	fMemFree:                 "cuMemFree_v2",
	fMemAllocHost:            "cuMemAllocHost_v2",
	fMemFreeHost:             "cuMemFreeHost",
	fMemcpyHtoD:              "cuMemcpyHtoD_v2",
	fMemcpyDtoH:              "cuMemcpyDtoH_v2",
	fMemcpyHtoDAsync:         "cuMemcpyHtoDAsync_v2",
	fMemcpyDtoHAsync:         "cuMemcpyDtoHAsync_v2",
	fMemcpyDtoDAsync:         "cuMemcpyDtoDAsync_v2",
	fMemsetD32:               "cuMemsetD32_v2",
	fMemsetD32Async:          "cuMemsetD32Async",
	fLaunchKernel:            "cuLaunchKernel",
	fStreamCreate:            "cuStreamCreate",
	fStreamDestroy:           "cuStreamDestroy_v2",
	fStreamSynchronize:       "cuStreamSynchronize",
	fEventCreate:             "cuEventCreate",
	fEventRecord:             "cuEventRecord",
	fEventSynchronize:        "cuEventSynchronize",
	fEventElapsedTime:        "cuEventElapsedTime",
	fEventDestroy:            "cuEventDestroy_v2",
	fStreamBeginCapture:      "cuStreamBeginCapture_v2",
	fStreamEndCapture:        "cuStreamEndCapture",
	fGraphInstantiate:        "cuGraphInstantiateWithFlags",
	fGraphLaunch:             "cuGraphLaunch",
	fGraphExecDestroy:        "cuGraphExecDestroy",
	fGraphDestroy:            "cuGraphDestroy",
	fMemHostRegister:         "cuMemHostRegister_v2",
	fMemHostUnregister:       "cuMemHostUnregister",
	fMemHostGetDevicePointer: "cuMemHostGetDevicePointer_v2",
}

// legacyNames are the older names of required functions that drivers
// before the current name lack, where both take the same arguments:
// cuDevicePrimaryCtxRelease_v2 came with CUDA 11.0, and JetPack 4's driver
// (CUDA 10.2, Xavier) has only the original.
var legacyNames = map[funcID]string{
	fPrimaryCtxRelease: "cuDevicePrimaryCtxRelease",
}

// Path is the library the functions came from.
func (l *Lib) Path() string { return l.path }

// HasGraphs reports whether the driver can capture and replay graphs.
func (l *Lib) HasGraphs() bool {
	for _, f := range []funcID{fStreamBeginCapture, fStreamEndCapture, fGraphInstantiate, fGraphLaunch, fGraphExecDestroy, fGraphDestroy} {
		if l.fn[f] == 0 {
			return false
		}
	}
	return true
}

// HasHostRegister reports whether the driver can map host memory for the
// device.
func (l *Lib) HasHostRegister() bool {
	return l.fn[fMemHostRegister] != 0 && l.fn[fMemHostUnregister] != 0 && l.fn[fMemHostGetDevicePointer] != 0
}

// check turns a CUresult into an error.
func (l *Lib) check(f funcID, r uintptr) error {
	res := Result(int32(uint32(r)))
	if res == Success {
		return nil
	}
	name := l.names[f]
	if name == "" { // an optional function this driver lacks
		name = funcNames[f]
	}
	e := &Error{Func: name, Code: res}
	var s *byte
	if l.call(fGetErrorName, uintptr(res), uintptr(unsafe.Pointer(&s))) == 0 && s != nil {
		e.Name = cString(s)
	}
	s = nil
	if l.call(fGetErrorString, uintptr(res), uintptr(unsafe.Pointer(&s))) == 0 && s != nil {
		e.Desc = cString(s)
	}
	return e
}

// cString copies a NUL-terminated C string the driver owns.
func cString(p *byte) string {
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 && n < 4096 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cStr is s NUL-terminated for the driver.
func cStr(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

func (l *Lib) missing(f funcID) error {
	return fmt.Errorf("%w: %s lacks %s", ErrNoLibrary, l.path, funcNames[f])
}
