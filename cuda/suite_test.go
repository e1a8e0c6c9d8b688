package cuda_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/cuda/cudaemu"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/backend/backendtest"
)

// The kernel suite runs twice: against the CPU stand-in for libcuda
// (TestEmu*, everywhere a C++ compiler is), which executes the kernels'
// CUDA C as host code, and against the real driver (TestGPU*, skipped
// without a device). Each kernel is compared with the CPU backend on
// random inputs. The kernels reproduce the CPU's float32 arithmetic, so
// most comparisons are exact; the tolerances below say where they are not
// and why.

// tolerance bounds |cuda − cpu| / max(1, max |cpu|) per kernel.
var tolerance = backendtest.Tolerances{
	// Exact: the same float32 operations in the same order.
	"matmul": 0, "embed": 0, "elementwise": 0, "rope": 0, "argmax": 0,
	// RMSNorm's Σx² and the softmax's Σe are float64 sums, a tree on the
	// GPU, in order (Σx²) or in sixteen running sums (Σe) on the CPU: they
	// can differ in the last bit of the
	// float64, and rarely that moves a float32 result by one ulp.
	"rmsnorm": 1e-6, "attend": 1e-6,
	// The delta net takes e^x and ln in float64 as the CPU does, but with
	// its own series (no libdevice): within an ulp of float64, which moves
	// a float32 result by one ulp about once in 2²⁹, and the recurrence
	// carries that on. Its Σ of squares are in order, as the CPU's.
	"shortconv": 1e-6, "deltascan": 1e-5, "sigmoidmul": 1e-6,
	// LFM2's gated convolution is products and fused multiply-adds,
	// each rounded once as the CPU rounds it: the same bits.
	"gatedconv": 0,
}

// newEmu opens a backend on the CPU stand-in.
func newEmu(t testing.TB, opt cuda.Options) (*cuda.Backend, *cudaemu.Hooks) {
	t.Helper()
	if testing.Short() {
		t.Skip("the CUDA stand-in runs kernels slowly: not in -short")
	}
	opt.Library = cudaemu.Path(t)
	be, err := cuda.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	h, err := cudaemu.Open(opt.Library)
	if err != nil {
		t.Fatal(err)
	}
	return be, h
}

// newGPU opens a backend on cudaemu.Library, or skips where it finds no device.
func newGPU(t testing.TB, opt cuda.Options) *cuda.Backend {
	t.Helper()
	opt.Library = cudaemu.Library(t)
	be, err := cuda.New(opt)
	if errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	info := be.Info()
	t.Logf("device: %s, compute capability %d.%d, %s (loaded in %v), %d MiB, driver %d", info.Name, info.Major, info.Minor, info.Arch,
		info.JIT.Round(time.Millisecond), info.MemoryBytes>>20, info.DriverVersion)
	return be
}

// newPair pairs dev with the CPU backend under this backend's tolerances.
func newPair(t testing.TB, dev backend.Backend) *backendtest.Pair {
	return backendtest.NewPair(t, dev, tolerance)
}

// testKernels is the kernel suite (backendtest.Kernels).
func testKernels(t *testing.T, dev *cuda.Backend) {
	backendtest.Kernels(t, dev, tolerance, backendtest.Features{GptOss: true, DeltaNet: true, GatedConv: true})
}

// settle runs the cleanups of unreachable device memory.
func settle() {
	for range 3 {
		runtime.GC()
	}
}
