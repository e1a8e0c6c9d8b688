//go:build linux

package nvml_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/hw/nvml"
)

// TestLoadRealLibrary builds testdata/fakenvml.c into a shared library and
// drives it through nvml.Load: the real dlopen/dlsym path and the C ABI of
// every bound call, without an NVIDIA driver. It skips without a C
// compiler. (The real libnvidia-ml.so.1 is exercised only on a GPU host.)
func TestLoadRealLibrary(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in NVML library")
	}
	so := filepath.Join(t.TempDir(), "libfakenvml.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, "testdata/fakenvml.c").CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	lib, err := nvml.Load(so)
	if err != nil {
		t.Fatal(err)
	}
	if lib.DeviceGetMemoryInfoV2 == nil || lib.DeviceGetArchitecture == nil {
		t.Fatal("optional entry points present in the library were not bound")
	}
	s, err := nvml.Start(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gpus, err := s.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 || gpus[0].Name != "Fake GPU Zero" || gpus[1].Name != "Fake GPU One" ||
		gpus[0].TotalBytes != 80<<30 || gpus[1].TotalBytes != 81<<30 || gpus[0].ReservedBytes != 512<<20 || gpus[0].Arch != "Hopper" {
		t.Fatalf("gpus through the C ABI: %+v", gpus)
	}
	c := s.Counter()
	r0, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	r1, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in advances 100 mJ + 300 mJ per read.
	if r1.UJ-r0.UJ != 400_000 {
		t.Fatalf("energy advanced %d µJ between reads, want 400000", r1.UJ-r0.UJ)
	}
}

func TestLoadMissingLibrary(t *testing.T) {
	_, err := nvml.Load("/nonexistent/libnvidia-ml.so.1")
	if err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Fatalf("Load of a missing library: %v", err)
	}
}
