package nvml_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/hw/nvml"
	"github.com/meshnode/meshnode/hw/nvml/nvmltest"
)

func TestStructLayout(t *testing.T) {
	// nvmlMemory_v2_t is 40 bytes and NVML checks the size in Version.
	if s := unsafe.Sizeof(nvml.MemoryV2{}); s != 40 || nvml.MemoryV2Version&0xffffff != 40 || nvml.MemoryV2Version>>24 != 2 {
		t.Fatalf("MemoryV2 is %d bytes, version %#x", s, nvml.MemoryV2Version)
	}
	if s := unsafe.Sizeof(nvml.Memory{}); s != 24 {
		t.Fatalf("Memory is %d bytes, want 24", s)
	}
}

func TestGPUs(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		f := &nvmltest.NVML{NoV2: !v2, GPUs: []*nvmltest.GPU{
			{Name: "NVIDIA H200", Arch: 9, Total: 150 << 30, Reserved: 1 << 29},
			{Name: "Tesla T4", Arch: 6, Total: 16 << 30, Reserved: 1 << 28},
		}}
		s, err := nvml.Start(f.Lib())
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
		if err := s.Close(); err != nil || f.Shutdowns != 1 {
			t.Fatalf("Close: %v, shutdowns %d", err, f.Shutdowns)
		}
		if err := s.Close(); err != nil || f.Shutdowns != 1 {
			t.Fatalf("second Close: %v, shutdowns %d", err, f.Shutdowns)
		}
	}
}

func TestStartErrors(t *testing.T) {
	f := &nvmltest.NVML{InitErr: nvml.ErrDriverNotLoaded}
	if _, err := nvml.Start(f.Lib()); !errors.Is(err, nvml.ErrDriverNotLoaded) || !strings.Contains(err.Error(), "nvmlInit_v2") {
		t.Fatalf("init failure: %v", err)
	}
	f = &nvmltest.NVML{}
	if _, err := nvml.Start(f.Lib()); !errors.Is(err, nvml.ErrNoDevices) || f.Shutdowns != 1 {
		t.Fatalf("no GPU: %v (shutdowns %d)", err, f.Shutdowns)
	}
}

func TestCounter(t *testing.T) {
	a := &nvmltest.GPU{Name: "A", EnergyMJ: 5_000}
	b := &nvmltest.GPU{Name: "B", EnergyMJ: 7_000}
	f := &nvmltest.NVML{GPUs: []*nvmltest.GPU{a, b}}
	s, err := nvml.Start(f.Lib())
	if err != nil {
		t.Fatal(err)
	}
	c := s.Counter()
	if c.Name() != "nvml" || c.Domains() != hw.DomainGPU || c.MinWindow() != nvml.MinWindow {
		t.Fatalf("counter %s %v %v", c.Name(), c.Domains(), c.MinWindow())
	}
	r0, err := c.Read()
	if err != nil || r0.UJ != 12_000_000 {
		t.Fatalf("first read %+v, %v; want 12000000 µJ", r0, err)
	}
	a.EnergyMJ += 250
	b.EnergyMJ += 750
	r1, _ := c.Read()
	if r1.UJ-r0.UJ != 1_000_000 || r1.Epoch != r0.Epoch || len(r1.Parts) != 2 ||
		r1.Parts[0] != (hw.PartReading{Name: "nvml:gpu0", Domains: hw.DomainGPU, Live: 5_250}) ||
		r1.Parts[1] != (hw.PartReading{Name: "nvml:gpu1", Domains: hw.DomainGPU, Live: 7_750}) {
		t.Fatalf("second read %+v after %+v, want +1000000 µJ in one epoch, each GPU its own part", r1, r0)
	}
	b.EnergyMJ = 10 // driver reloaded
	if r2, _ := c.Read(); r2.Epoch == r1.Epoch {
		t.Fatal("a counter reset kept the epoch")
	}
	s.Close()
	if _, err := c.Read(); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

// TestOneGPUFrozen: of two GPUs, one stops advancing. The sum still
// moves, but a span over the frozen GPU is not a hardware reading, and the
// probe names the GPU (issue #17 item 1).
func TestOneGPUFrozen(t *testing.T) {
	clk := hwtest.NewClock(time.Unix(1_800_000_000, 0))
	t0 := clk.Now()
	watts := func(w float64) func() uint64 {
		return func() uint64 { return uint64(w * clk.Now().Sub(t0).Seconds() * 1e3) }
	}
	f := &nvmltest.NVML{GPUs: []*nvmltest.GPU{{Name: "A", Energy: watts(300)}, {Name: "B", EnergyMJ: 9_000}}}
	s, err := nvml.Start(f.Lib())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Counter()
	l := hw.Probe(context.Background(), []hw.Counter{c}, hw.ProbeConfig{Clock: clk, Burn: func(context.Context) {}})[0]
	if l.Live || len(l.Parts) != 2 || !l.Parts[0].Live || l.Parts[1].Live ||
		!strings.Contains(l.Reason, "nvml:gpu1 frozen") || l.Parts[1].Name != "nvml:gpu1" || l.Parts[1].Domains != hw.DomainGPU {
		t.Fatalf("probe: %+v", l)
	}
	m := hw.NewCounterMeter(c, hw.PowerModel{Watts: 50}, clk, nil)
	sp, _ := m.OpenFor(hw.DomainCPU | hw.DomainGPU)
	clk.Advance(time.Second)
	if e, _ := sp.Close(); e.Provenance() != hw.Estimator {
		t.Fatalf("a span with GPU 1 frozen: %v, want Estimator", e)
	}
}

// TestJetsonEnergyUnsupported: NVML starts on a Jetson but energy queries
// fail, and the failure reaches the liveness probe as a read error.
func TestJetsonEnergyUnsupported(t *testing.T) {
	f := &nvmltest.NVML{GPUs: []*nvmltest.GPU{{Name: "Orin (nvgpu)", EnergyErr: nvml.ErrNotSupported}}}
	s, err := nvml.Start(f.Lib())
	if err != nil {
		t.Fatalf("NVML must start on a Jetson: %v", err)
	}
	_, err = s.Counter().Read()
	if !errors.Is(err, nvml.ErrNotSupported) || !strings.Contains(err.Error(), "nvmlDeviceGetTotalEnergyConsumption") {
		t.Fatalf("energy read on a Jetson: %v", err)
	}
}

func TestArchitectureAndReturnNames(t *testing.T) {
	if nvml.Architecture(5) != "Volta" || nvml.Architecture(10) != "Blackwell" || nvml.Architecture(0xffffffff) != "unknown(4294967295)" {
		t.Fatal("architecture names")
	}
	if nvml.ErrNotSupported.Error() != "nvml: Not Supported" || nvml.Return(77).Error() != "nvml: error 77" {
		t.Fatal("return names")
	}
}
