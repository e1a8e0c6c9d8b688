package driver

import (
	"math"
	"unsafe"
)

// Init initialises the driver (cuInit(0)); calling it again is harmless.
func (l *Lib) Init() error { return l.check(fInit, l.call(fInit, 0)) }

// DriverVersion is the driver's CUDA version, 1000·major + 10·minor.
func (l *Lib) DriverVersion() (int, error) {
	var v int32
	err := l.check(fDriverGetVersion, l.call(fDriverGetVersion, uintptr(unsafe.Pointer(&v))))
	return int(v), err
}

// DeviceCount is the number of CUDA devices.
func (l *Lib) DeviceCount() (int, error) {
	var n int32
	err := l.check(fDeviceGetCount, l.call(fDeviceGetCount, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}

// Device returns the device of the given ordinal.
func (l *Lib) Device(ordinal int) (Device, error) {
	var d Device
	err := l.check(fDeviceGet, l.call(fDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal)))
	return d, err
}

// DeviceName is the device's marketing name.
func (l *Lib) DeviceName(d Device) (string, error) {
	buf := make([]byte, 256)
	if err := l.check(fDeviceGetName, l.call(fDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d))); err != nil {
		return "", err
	}
	return cString(&buf[0]), nil
}

// DeviceAttribute reads one attribute of d.
func (l *Lib) DeviceAttribute(a Attribute, d Device) (int, error) {
	var v int32
	err := l.check(fDeviceGetAttribute, l.call(fDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d)))
	return int(v), err
}

// DeviceTotalMem is d's memory in bytes.
func (l *Lib) DeviceTotalMem(d Device) (uint64, error) {
	var n uint64
	err := l.check(fDeviceTotalMem, l.call(fDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(d)))
	return n, err
}

// PrimaryCtxRetain retains d's primary context (shared by every user of
// the device in the process, reference counted).
func (l *Lib) PrimaryCtxRetain(d Device) (Context, error) {
	var c Context
	err := l.check(fPrimaryCtxRetain, l.call(fPrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(d)))
	return c, err
}

// PrimaryCtxRelease releases one retain of d's primary context.
func (l *Lib) PrimaryCtxRelease(d Device) error {
	return l.check(fPrimaryCtxRelease, l.call(fPrimaryCtxRelease, uintptr(d)))
}

// CtxSetCurrent makes c the calling OS thread's current context.
func (l *Lib) CtxSetCurrent(c Context) error {
	return l.check(fCtxSetCurrent, l.call(fCtxSetCurrent, uintptr(c)))
}

// CtxSynchronize waits for all of the current context's work.
func (l *Lib) CtxSynchronize() error { return l.check(fCtxSynchronize, l.call(fCtxSynchronize)) }

// ModuleLoadData loads a module from a PTX text (which the driver compiles
// for the device) or a cubin. A PTX image is NUL-terminated here.
func (l *Lib) ModuleLoadData(image []byte) (Module, error) {
	img := make([]byte, len(image)+1)
	copy(img, image)
	var m Module
	err := l.check(fModuleLoadData, l.call(fModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0]))))
	return m, err
}

// ModuleLoadDataLog is ModuleLoadData that also returns the JIT
// compiler's error log (ptxas's messages when a PTX module does not
// compile for the device). scratch is page-locked host memory of at least
// 4 KiB (MemAllocHost) for the log and the option arrays.
func (l *Lib) ModuleLoadDataLog(image []byte, scratch unsafe.Pointer) (Module, string, error) {
	img := make([]byte, len(image)+1)
	copy(img, image)
	const (
		jitErrorLogBuffer     = 5 // CU_JIT_ERROR_LOG_BUFFER
		jitErrorLogBufferSize = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
		logBytes              = 4096 - 32
	)
	opts := (*[2]int32)(scratch)
	vals := (*[2]uintptr)(unsafe.Add(scratch, 8))
	buf := unsafe.Add(scratch, 32)
	*(*byte)(buf) = 0
	opts[0], opts[1] = jitErrorLogBuffer, jitErrorLogBufferSize
	vals[0], vals[1] = uintptr(buf), logBytes
	var m Module
	err := l.check(fModuleLoadDataEx, l.call(fModuleLoadDataEx, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])),
		2, uintptr(scratch), uintptr(unsafe.Add(scratch, 8))))
	return m, cString((*byte)(buf)), err
}

// ModuleUnload unloads m.
func (l *Lib) ModuleUnload(m Module) error {
	return l.check(fModuleUnload, l.call(fModuleUnload, uintptr(m)))
}

// ModuleGetFunction finds the kernel named name in m.
func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	var f Function
	n := cStr(name)
	err := l.check(fModuleGetFunction, l.call(fModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&n[0]))))
	return f, err
}

// MemGetInfo is the current context's device's free and total memory.
func (l *Lib) MemGetInfo() (free, total uint64, err error) {
	err = l.check(fMemGetInfo, l.call(fMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	return free, total, err
}

// MemAlloc allocates n bytes of device memory (256-byte aligned).
func (l *Lib) MemAlloc(n int) (DevicePtr, error) {
	var p DevicePtr
	err := l.check(fMemAlloc, l.call(fMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// MemFree frees device memory.
func (l *Lib) MemFree(p DevicePtr) error { return l.check(fMemFree, l.call(fMemFree, uintptr(p))) }

// MemAllocHost allocates n bytes of page-locked host memory, which the
// device reads and writes directly and async copies need.
func (l *Lib) MemAllocHost(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := l.check(fMemAllocHost, l.call(fMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	return p, err
}

// MemFreeHost frees memory from MemAllocHost.
func (l *Lib) MemFreeHost(p unsafe.Pointer) error {
	return l.check(fMemFreeHost, l.call(fMemFreeHost, uintptr(p)))
}

// MemcpyHtoD copies n bytes from host src to device dst and returns when
// the copy is done.
func (l *Lib) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n int) error {
	return l.check(fMemcpyHtoD, l.call(fMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(n)))
}

// MemcpyDtoH copies n bytes from device src to host dst and returns when
// the copy is done (after the work before it on the legacy stream).
func (l *Lib) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n int) error {
	return l.check(fMemcpyDtoH, l.call(fMemcpyDtoH, uintptr(dst), uintptr(src), uintptr(n)))
}

// MemcpyHtoDAsync queues a copy from page-locked host memory on s.
func (l *Lib) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int, s Stream) error {
	return l.check(fMemcpyHtoDAsync, l.call(fMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// MemcpyDtoHAsync queues a copy to page-locked host memory on s.
func (l *Lib) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int, s Stream) error {
	return l.check(fMemcpyDtoHAsync, l.call(fMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// MemcpyDtoDAsync queues a device-to-device copy on s.
func (l *Lib) MemcpyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	return l.check(fMemcpyDtoDAsync, l.call(fMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

// MemsetD32 sets n 32-bit words at dst to v.
func (l *Lib) MemsetD32(dst DevicePtr, v uint32, n int) error {
	return l.check(fMemsetD32, l.call(fMemsetD32, uintptr(dst), uintptr(v), uintptr(n)))
}

// MemsetD32Async queues MemsetD32 on s.
func (l *Lib) MemsetD32Async(dst DevicePtr, v uint32, n int, s Stream) error {
	return l.check(fMemsetD32Async, l.call(fMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s)))
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// LaunchKernel queues f on s over grid × block threads. params points to
// an array of pointers, one per kernel parameter, each to the parameter's
// value; the driver copies the values before it returns.
func (l *Lib) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params unsafe.Pointer) error {
	return l.check(fLaunchKernel, l.call(fLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z), uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), uintptr(params), 0))
}

// StreamCreate creates a stream.
func (l *Lib) StreamCreate(flags uint32) (Stream, error) {
	var s Stream
	err := l.check(fStreamCreate, l.call(fStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags)))
	return s, err
}

// StreamDestroy destroys s once its work is done.
func (l *Lib) StreamDestroy(s Stream) error {
	return l.check(fStreamDestroy, l.call(fStreamDestroy, uintptr(s)))
}

// StreamSynchronize waits for s's work.
func (l *Lib) StreamSynchronize(s Stream) error {
	return l.check(fStreamSynchronize, l.call(fStreamSynchronize, uintptr(s)))
}

// EventCreate creates an event (for timing with EventDefault).
func (l *Lib) EventCreate(flags uint32) (Event, error) {
	var e Event
	err := l.check(fEventCreate, l.call(fEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags)))
	return e, err
}

// EventRecord records e on s.
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.check(fEventRecord, l.call(fEventRecord, uintptr(e), uintptr(s)))
}

// EventSynchronize waits for e.
func (l *Lib) EventSynchronize(e Event) error {
	return l.check(fEventSynchronize, l.call(fEventSynchronize, uintptr(e)))
}

// EventElapsedTime is the milliseconds between two recorded events.
func (l *Lib) EventElapsedTime(start, end Event) (float32, error) {
	var ms uint32 // a float32's bits: the driver writes a float
	err := l.check(fEventElapsedTime, l.call(fEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)))
	return math.Float32frombits(ms), err
}

// EventDestroy destroys e.
func (l *Lib) EventDestroy(e Event) error {
	return l.check(fEventDestroy, l.call(fEventDestroy, uintptr(e)))
}

// StreamBeginCapture starts capturing s's work into a graph instead of
// running it.
func (l *Lib) StreamBeginCapture(s Stream, mode int) error {
	return l.check(fStreamBeginCapture, l.call(fStreamBeginCapture, uintptr(s), uintptr(mode)))
}

// StreamEndCapture ends the capture and returns the graph.
func (l *Lib) StreamEndCapture(s Stream) (Graph, error) {
	var g Graph
	err := l.check(fStreamEndCapture, l.call(fStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g))))
	return g, err
}

// GraphInstantiate makes an executable graph.
func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	var e GraphExec
	err := l.check(fGraphInstantiate, l.call(fGraphInstantiate, uintptr(unsafe.Pointer(&e)), uintptr(g), 0))
	return e, err
}

// GraphLaunch queues e on s.
func (l *Lib) GraphLaunch(e GraphExec, s Stream) error {
	return l.check(fGraphLaunch, l.call(fGraphLaunch, uintptr(e), uintptr(s)))
}

// GraphExecDestroy destroys an executable graph.
func (l *Lib) GraphExecDestroy(e GraphExec) error {
	return l.check(fGraphExecDestroy, l.call(fGraphExecDestroy, uintptr(e)))
}

// GraphDestroy destroys a graph.
func (l *Lib) GraphDestroy(g Graph) error {
	return l.check(fGraphDestroy, l.call(fGraphDestroy, uintptr(g)))
}

// MemHostRegister page-locks n bytes of host memory at p and maps them
// for the device.
func (l *Lib) MemHostRegister(p unsafe.Pointer, n int, flags uint32) error {
	return l.check(fMemHostRegister, l.call(fMemHostRegister, uintptr(p), uintptr(n), uintptr(flags)))
}

// MemHostUnregister undoes MemHostRegister.
func (l *Lib) MemHostUnregister(p unsafe.Pointer) error {
	return l.check(fMemHostUnregister, l.call(fMemHostUnregister, uintptr(p)))
}

// MemHostGetDevicePointer is the device address of registered host memory.
func (l *Lib) MemHostGetDevicePointer(p unsafe.Pointer) (DevicePtr, error) {
	var d DevicePtr
	err := l.check(fMemHostGetDevicePointer, l.call(fMemHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(p), 0))
	return d, err
}
