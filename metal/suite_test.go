package metal_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/backend/backendtest"
	"github.com/meshnode/meshnode/metal"
	"github.com/meshnode/meshnode/metal/metalemu"
	"github.com/meshnode/meshnode/metal/mtl"
)

// The kernel suite runs twice: against the CPU stand-in for a Metal
// device (TestEmu*, everywhere a C++ compiler is), which executes the
// kernels' MSL as host C++, and against the real device (TestGPU*,
// skipped without one). Each kernel is compared with the CPU backend on
// random inputs. The kernels reproduce the CPU's float32 arithmetic, so
// most comparisons are exact; the tolerances below say where they are not
// and why.

// tolerance bounds |metal − cpu| / max(1, max |cpu|) per kernel.
var tolerance = backendtest.Tolerances{
	// Exact: the same float32 operations in the same order; the
	// prefill's simdgroup-matrix sums are of integers below 2^24.
	"matmul": 0, "embed": 0, "rope": 0, "argmax": 0,
	// expf's fma is rounded once here and twice (to float64, then
	// float32) on the CPU; and a GPU's division may be rounded otherwise
	// than IEEE's. Either moves a result by an ulp at most; on the
	// stand-in's test inputs none does.
	"elementwise": 1e-6,
	// RMSNorm's Σx² and the softmax's Σe are float64 sums on the CPU and
	// float-float sums here (about 48 bits, added as a tree): they round
	// to the same float32 except, rarely, by one ulp.
	"rmsnorm": 1e-6, "attend": 1e-6,
	// LFM2's gated convolution: products and fmas rounded once, as the
	// CPU's detmath.FMA32: the same bits.
	"gatedconv": 0,
}

// emuConfig is the stand-in device the tests open unless they say
// otherwise.
var emuConfig = metalemu.Config{}

// newEmuDevice opens the stand-in as a device.
func newEmuDevice(t testing.TB, cfg metalemu.Config) *metalemu.Device {
	t.Helper()
	if testing.Short() {
		t.Skip("the Metal stand-in runs kernels slowly: not in -short")
	}
	d, err := metalemu.Open(metalemu.Path(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newEmu opens a backend on the CPU stand-in.
func newEmu(t testing.TB, cfg metalemu.Config) (*metal.Backend, *metalemu.Device) {
	t.Helper()
	d := newEmuDevice(t, cfg)
	be, err := metal.New(metal.Options{Device: d})
	if err != nil {
		t.Fatal(err)
	}
	return be, d
}

// gpuDevice is the device of the GPU tests and the benchmark: the
// system's default Metal device, or the CPU stand-in where
// metalemu.StandIn says.
func gpuDevice(tb testing.TB) mtl.Device {
	if metalemu.StandIn() {
		return newEmuDevice(tb, emuConfig)
	}
	return nil
}

// newGPU opens a backend on gpuDevice, or skips where there is no device.
func newGPU(t testing.TB) *metal.Backend {
	t.Helper()
	be, err := metal.New(metal.Options{Device: gpuDevice(t)})
	if errors.Is(err, metal.ErrNoDevice) {
		t.Skipf("no Metal device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	info := be.Info()
	t.Logf("device: %s, MSL %s (compiled in %v), working set %d MiB, unified %v", info.Name, info.Language,
		info.Compile.Round(time.Millisecond), info.WorkingSet>>20, info.Unified)
	return be
}

// newPair pairs dev with the CPU backend under this backend's tolerances.
func newPair(t testing.TB, dev backend.Backend) *backendtest.Pair {
	return backendtest.NewPair(t, dev, tolerance)
}

// testKernels is the kernel suite (backendtest.Kernels).
func testKernels(t *testing.T, dev *metal.Backend) {
	backendtest.Kernels(t, dev, tolerance, backendtest.Features{GatedConv: true})
}

// settle runs the cleanups of unreachable device memory.
func settle() {
	for range 3 {
		runtime.GC()
	}
}
