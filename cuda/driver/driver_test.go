package driver_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/cudaemu"
	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/cuda/kernels"
)

func TestLoadMissingLibrary(t *testing.T) {
	_, err := driver.Load("/nonexistent/libcuda.so.1")
	if !errors.Is(err, driver.ErrNoLibrary) || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Fatalf("Load of a missing library: %v", err)
	}
}

// TestLoadIncompleteLibrary loads a library that has some of the driver's
// functions but not all the backend needs.
func TestLoadIncompleteLibrary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the driver exists on Linux only")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in")
	}
	dir := t.TempDir()
	src, so := filepath.Join(dir, "partial.c"), filepath.Join(dir, "libpartial.so")
	code := "int cuInit(unsigned f) { return 0; }\nint cuDriverGetVersion(int *v) { *v = 12000; return 0; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	_, err = driver.Load(so)
	if !errors.Is(err, driver.ErrNoLibrary) || !strings.Contains(err.Error(), "cuGetErrorName") {
		t.Fatalf("Load of a library without cuGetErrorName: %v", err)
	}
}

func TestErrors(t *testing.T) {
	e := &driver.Error{Func: "cuMemAlloc_v2", Code: driver.ErrOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	var err error = e
	if !errors.Is(err, driver.ErrOutOfMemory) || errors.Is(err, driver.ErrNoDevice) {
		t.Errorf("errors.Is on %v", err)
	}
	if got, want := err.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	bare := &driver.Error{Func: "cuInit", Code: 12345}
	if got := bare.Error(); got != "cuda: cuInit: CUresult 12345" {
		t.Errorf("Error() without the driver's names = %q", got)
	}
	if driver.ErrNoDevice.Error() != "CUDA_ERROR_NO_DEVICE" {
		t.Errorf("Result name %q", driver.ErrNoDevice.Error())
	}
}

// TestCallsThroughStandIn drives every binding through the C ABI against
// the CPU stand-in: arguments, out-parameters, strings, and the error path
// with the driver's own names for a code.
func TestCallsThroughStandIn(t *testing.T) {
	l, err := driver.Load(cudaemu.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	if !l.HasGraphs() || !l.HasHostRegister() {
		t.Fatal("optional functions the stand-in has were not bound")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Init())
	if v, err := l.DriverVersion(); err != nil || v != 12040 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	n, err := l.DeviceCount()
	must(err)
	if n != 1 {
		t.Fatalf("%d devices", n)
	}
	if _, err := l.Device(5); !errors.Is(err, driver.ErrInvalidDevice) {
		t.Errorf("Device(5): %v", err)
	}
	d, err := l.Device(0)
	must(err)
	name, err := l.DeviceName(d)
	must(err)
	if name != "MeshEmu CPU stand-in 0" {
		t.Errorf("DeviceName = %q", name)
	}
	if v, err := l.DeviceAttribute(driver.AttrComputeCapMajor, d); err != nil || v != 8 {
		t.Errorf("compute capability major = %d, %v", v, err)
	}
	if _, err := l.DeviceAttribute(12345, d); !errors.Is(err, driver.ErrInvalidValue) {
		t.Errorf("an unknown attribute: %v", err)
	}
	ctx, err := l.PrimaryCtxRetain(d)
	must(err)
	defer l.PrimaryCtxRelease(d)
	must(l.CtxSetCurrent(ctx))

	// Memory round trip, and the error path with the driver's names.
	p, err := l.MemAlloc(1024)
	must(err)
	src := []uint32{1, 2, 3, 0xdeadbeef}
	must(l.MemcpyHtoD(p, unsafe.Pointer(&src[0]), 16))
	must(l.MemsetD32(p+16, 7, 4))
	dst := make([]uint32, 8)
	must(l.MemcpyDtoH(unsafe.Pointer(&dst[0]), p, 32))
	if dst[3] != 0xdeadbeef || dst[4] != 7 || dst[7] != 7 {
		t.Errorf("round trip gave %v", dst)
	}
	err = l.MemcpyDtoH(unsafe.Pointer(&dst[0]), p+1000, 32) // past the allocation
	var de *driver.Error
	if !errors.As(err, &de) || de.Code != driver.ErrInvalidValue || de.Name != "CUDA_ERROR_INVALID_VALUE" || de.Desc != "invalid argument" || de.Func != "cuMemcpyDtoH_v2" {
		t.Errorf("a copy outside the allocation: %#v", err)
	}
	must(l.MemFree(p))
	if err := l.MemFree(p); !errors.Is(err, driver.ErrInvalidValue) {
		t.Errorf("double free: %v", err)
	}

	// Modules: the kernels load, a kernel is found by name, nonsense is not.
	if _, err := l.ModuleLoadData([]byte("not ptx")); !errors.Is(err, driver.ErrInvalidImage) {
		t.Errorf("loading nonsense: %v", err)
	}
	scratch, err := l.MemAllocHost(4096)
	must(err)
	defer l.MemFreeHost(scratch)
	if _, log, err := l.ModuleLoadDataLog([]byte("not ptx"), scratch); !errors.Is(err, driver.ErrInvalidImage) || !strings.Contains(log, "not PTX") {
		t.Errorf("loading nonsense with the JIT log: %v, log %q", err, log)
	}
	m, err := l.ModuleLoadData(kernels.Archs()[0].PTX)
	must(err)
	defer l.ModuleUnload(m)
	if _, err := l.ModuleGetFunction(m, "argmax"); err != nil {
		t.Error(err)
	}
	if _, err := l.ModuleGetFunction(m, "no_such_kernel"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("a missing kernel: %v", err)
	}

	// A stream, events and a captured graph of a copy.
	s, err := l.StreamCreate(0)
	must(err)
	defer l.StreamDestroy(s)
	e0, err := l.EventCreate(driver.EventDefault)
	must(err)
	e1, err := l.EventCreate(driver.EventDefault)
	must(err)
	must(l.EventRecord(e0, s))
	host, err := l.MemAllocHost(64)
	must(err)
	dev, err := l.MemAlloc(64)
	must(err)
	*(*uint32)(host) = 41
	must(l.StreamBeginCapture(s, driver.CaptureModeRelaxed))
	must(l.MemcpyHtoDAsync(dev, host, 4, s))
	g, err := l.StreamEndCapture(s)
	must(err)
	x, err := l.GraphInstantiate(g)
	must(err)
	*(*uint32)(host) = 42 // a graph reads the host memory when it runs
	must(l.GraphLaunch(x, s))
	must(l.StreamSynchronize(s))
	var got uint32
	must(l.MemcpyDtoH(unsafe.Pointer(&got), dev, 4))
	if got != 42 {
		t.Errorf("the graph's copy gave %d, want 42", got)
	}
	must(l.EventRecord(e1, s))
	must(l.EventSynchronize(e1))
	if ms, err := l.EventElapsedTime(e0, e1); err != nil || ms < 0 {
		t.Errorf("EventElapsedTime = %v, %v", ms, err)
	}
	must(l.GraphExecDestroy(x))
	must(l.GraphDestroy(g))
	must(l.EventDestroy(e0))
	must(l.EventDestroy(e1))
	must(l.MemFree(dev))
	must(l.MemFreeHost(host))
	if free, total, err := l.MemGetInfo(); err != nil || free > total || total == 0 {
		t.Errorf("MemGetInfo = %d, %d, %v", free, total, err)
	}
}
