// Package cudaemu builds the CPU stand-in for libcuda.so.1 (csrc/emu.cc) that the
// CUDA backend's tests run against when there is no GPU: the driver API
// over host memory, and the kernels of cuda/kernels compiled as host C++
// and run with each block's threads as fibers. Tests load it with
// driver.Load(path) exactly as the real library is loaded.
//
// The build needs a C++17 compiler (c++, g++ or clang++); without one,
// Path skips the test. The library is cached under the OS temp directory,
// keyed by a hash of its sources and the compiler, so the packages' tests
// build it once.
package cudaemu

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
)

// sources are emu.cc and the kernel sources it includes, relative to this
// package.
func sources() ([]string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("emu: cannot locate the package's sources")
	}
	dir := filepath.Dir(self)
	kernels, err := filepath.Glob(filepath.Join(dir, "..", "kernels", "*.cu*"))
	if err != nil {
		return nil, err
	}
	if len(kernels) == 0 {
		return nil, fmt.Errorf("emu: no kernel sources beside %s", dir)
	}
	sort.Strings(kernels)
	return append([]string{filepath.Join(dir, "csrc", "emu.cc")}, kernels...), nil
}

// compiler finds a C++ compiler.
func compiler() (string, error) {
	for _, c := range []string{os.Getenv("CXX"), "c++", "g++", "clang++"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("emu: no C++ compiler (c++, g++ or clang++) on PATH")
}

// Build compiles the stand-in library (or finds it cached) and returns its
// path.
func Build() (string, error) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		return "", fmt.Errorf("emu: the stand-in runs on linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	cxx, err := compiler()
	if err != nil {
		return "", err
	}
	srcs, err := sources()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%v\n", cxx, flags)
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(s), len(b))
		h.Write(b)
	}
	dir := filepath.Join(os.TempDir(), "meshnode-cudaemu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	so := filepath.Join(dir, "libcuda-"+hex.EncodeToString(h.Sum(nil))[:16]+".so")
	if _, err := os.Stat(so); err == nil {
		return so, nil
	}
	tmp, err := os.CreateTemp(dir, "build-*.so")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := append(append([]string{}, flags...), "-o", tmp.Name(), srcs[0])
	if out, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("emu: %s %v: %v\n%s", cxx, args, err, out)
	}
	// Rename is atomic: concurrent test binaries find a whole library or
	// none.
	if err := os.Rename(tmp.Name(), so); err != nil {
		return "", err
	}
	return so, nil
}

// flags build a shared library with the kernels' floating-point rules
// (no contraction, no errno from sqrt).
var flags = []string{"-std=c++17", "-O2", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared",
	"-fvisibility=hidden", "-Wl,-z,defs", "-Wall", "-Wno-unused-function"}

var built = sync.OnceValues(Build)

// Path returns the stand-in library for a test, building it once per
// process; it skips the test when it cannot be built here.
func Path(tb testing.TB) string {
	tb.Helper()
	p, err := built()
	if err != nil {
		tb.Skipf("CUDA stand-in unavailable: %v", err)
	}
	return p
}

// Library is the driver library a GPU test or benchmark opens: the one
// MESHNODE_CUDA_LIBRARY names ("": libcuda.so.1), where "stand-in" is
// this stand-in (Path; scripts/gpu-check.sh --stand-in rehearses the GPU
// checks with it on a machine without a GPU).
func Library(tb testing.TB) string {
	tb.Helper()
	lib := os.Getenv("MESHNODE_CUDA_LIBRARY")
	if lib == "stand-in" {
		return Path(tb)
	}
	return lib
}

// Hooks are the stand-in's test entry points beyond the driver API.
type Hooks struct {
	live      func() int64
	counts    func(launches, graphs *int64)
	setMemory func(n uint64)
	configure func(devices, major, minor, integrated, graphs int32)
}

// Open binds the hooks of the library at path (loaded already by
// driver.Load, so this finds the same instance).
func Open(path string) (*Hooks, error) {
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	var h Hooks
	purego.RegisterLibFunc(&h.live, lib, "emu_live")
	purego.RegisterLibFunc(&h.counts, lib, "emu_counts")
	purego.RegisterLibFunc(&h.setMemory, lib, "emu_set_memory")
	purego.RegisterLibFunc(&h.configure, lib, "emu_configure")
	return &h, nil
}

// Live is the number of device and page-locked host allocations not yet
// freed.
func (h *Hooks) Live() int64 { return h.live() }

// Counts are the kernels run and the graphs launched so far.
func (h *Hooks) Counts() (launches, graphs int64) {
	h.counts(&launches, &graphs)
	return launches, graphs
}

// SetMemory sets the device memory the stand-in gives out in all.
func (h *Hooks) SetMemory(n uint64) { h.setMemory(n) }

// Device is what the stand-in reports itself to be.
type Device struct {
	Count        int  // devices
	Major, Minor int  // compute capability
	Integrated   bool // shares memory with the host
	NoGraphs     bool // stream capture fails
}

// DefaultDevice is the stand-in's device until Configure changes it.
var DefaultDevice = Device{Count: 1, Major: 8}

// Configure sets the device the stand-in reports from now on.
func (h *Hooks) Configure(d Device) {
	b := func(v bool) int32 {
		if v {
			return 1
		}
		return 0
	}
	h.configure(int32(d.Count), int32(d.Major), int32(d.Minor), b(d.Integrated), b(!d.NoGraphs))
}
