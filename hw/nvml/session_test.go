package nvml

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshnode/meshnode/hw"
)

func TestStructLayout(t *testing.T) {
	// nvmlMemory_v2_t is 40 bytes and NVML checks the size in Version.
	if s := unsafe.Sizeof(MemoryV2{}); s != 40 || MemoryV2Version&0xffffff != 40 || MemoryV2Version>>24 != 2 {
		t.Fatalf("MemoryV2 is %d bytes, version %#x", s, MemoryV2Version)
	}
	if s := unsafe.Sizeof(Memory{}); s != 24 {
		t.Fatalf("Memory is %d bytes, want 24", s)
	}
}

func TestGPUs(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		f := &fake{noV2: !v2, gpus: []*fakeGPU{
			{name: "NVIDIA H200", arch: 9, total: 150 << 30, reserved: 1 << 29},
			{name: "Tesla T4", arch: 6, total: 16 << 30, reserved: 1 << 28},
		}}
		s, err := Start(f.lib())
		if err != nil {
			t.Fatal(err)
		}
		gpus, err := s.GPUs()
		if err != nil {
			t.Fatal(err)
		}
		wantReserved := uint64(0)
		if v2 {
			wantReserved = 1 << 29
		}
		if len(gpus) != 2 || gpus[0].Name != "NVIDIA H200" || gpus[0].Arch != "Hopper" || gpus[0].TotalBytes != 150<<30 ||
			gpus[0].ReservedBytes != wantReserved || gpus[1].Name != "Tesla T4" || gpus[1].Arch != "Turing" {
			t.Fatalf("v2=%v: gpus %+v", v2, gpus)
		}
		if err := s.Close(); err != nil || f.shutdown != 1 {
			t.Fatalf("Close: %v, shutdowns %d", err, f.shutdown)
		}
		if err := s.Close(); err != nil || f.shutdown != 1 {
			t.Fatalf("second Close: %v, shutdowns %d", err, f.shutdown)
		}
	}
}

func TestStartErrors(t *testing.T) {
	f := &fake{initErr: ErrDriverNotLoaded}
	if _, err := Start(f.lib()); !errors.Is(err, ErrDriverNotLoaded) || !strings.Contains(err.Error(), "nvmlInit_v2") {
		t.Fatalf("init failure: %v", err)
	}
	f = &fake{}
	if _, err := Start(f.lib()); !errors.Is(err, ErrNoDevices) || f.shutdown != 1 {
		t.Fatalf("no GPU: %v (shutdowns %d)", err, f.shutdown)
	}
}

func TestCounter(t *testing.T) {
	a := &fakeGPU{name: "A", energyMJ: 5_000}
	b := &fakeGPU{name: "B", energyMJ: 7_000}
	f := &fake{gpus: []*fakeGPU{a, b}}
	s, err := Start(f.lib())
	if err != nil {
		t.Fatal(err)
	}
	c := s.Counter()
	if c.Name() != "nvml" || c.Domains() != hw.DomainGPU || c.MinWindow() != MinWindow {
		t.Fatalf("counter %s %v %v", c.Name(), c.Domains(), c.MinWindow())
	}
	r0, err := c.Read()
	if err != nil || r0.UJ != 12_000_000 {
		t.Fatalf("first read %+v, %v; want 12000000 µJ", r0, err)
	}
	a.energyMJ += 250
	b.energyMJ += 750
	r1, _ := c.Read()
	if r1.UJ-r0.UJ != 1_000_000 || r1.Epoch != r0.Epoch || r1.Live != r1.UJ {
		t.Fatalf("second read %+v after %+v, want +1000000 µJ in one epoch", r1, r0)
	}
	b.energyMJ = 10 // driver reloaded
	if r2, _ := c.Read(); r2.Epoch == r1.Epoch {
		t.Fatal("a counter reset kept the epoch")
	}
	s.Close()
	if _, err := c.Read(); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

// TestJetsonEnergyUnsupported: NVML starts on a Jetson but energy queries
// fail, and the failure reaches the liveness probe as a read error.
func TestJetsonEnergyUnsupported(t *testing.T) {
	f := &fake{gpus: []*fakeGPU{{name: "Orin (nvgpu)", energy: ErrNotSupported}}}
	s, err := Start(f.lib())
	if err != nil {
		t.Fatalf("NVML must start on a Jetson: %v", err)
	}
	_, err = s.Counter().Read()
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "nvmlDeviceGetTotalEnergyConsumption") {
		t.Fatalf("energy read on a Jetson: %v", err)
	}
}

func TestArchitectureAndReturnNames(t *testing.T) {
	if Architecture(5) != "Volta" || Architecture(10) != "Blackwell" || Architecture(0xffffffff) != "unknown(4294967295)" {
		t.Fatal("architecture names")
	}
	if ErrNotSupported.Error() != "nvml: Not Supported" || Return(77).Error() != "nvml: error 77" {
		t.Fatal("return names")
	}
}
