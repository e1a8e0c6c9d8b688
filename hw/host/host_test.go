package host

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/nvml"
	"github.com/meshnode/meshnode/hw/nvml/nvmltest"
	"github.com/meshnode/meshnode/metal/mtl"
)

const meminfo = `MemTotal:       65536000 kB
MemFree:         1024000 kB
MemAvailable:   32768000 kB
Buffers:          102400 kB
HugePages_Total:       0
`

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestParseMeminfo(t *testing.T) {
	m, err := ParseMeminfo([]byte(meminfo))
	if err != nil || m.TotalBytes != 65536000*1024 || m.AvailableBytes != 32768000*1024 {
		t.Fatalf("ParseMeminfo = %+v, %v", m, err)
	}
	// An old kernel without MemAvailable still gives the total.
	if m, err := ParseMeminfo([]byte("MemTotal: 1024 kB\n")); err != nil || m.TotalBytes != 1<<20 || m.AvailableBytes != 0 {
		t.Fatalf("no MemAvailable: %+v, %v", m, err)
	}
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemTotal: lots kB\n", "MemTotal: 12 MB\n", "MemTotal: 99999999999999999999 kB\n", "MemTotal:\n"} {
		if _, err := ParseMeminfo([]byte(bad)); err == nil {
			t.Errorf("ParseMeminfo(%q) succeeded", bad)
		}
	}
}

// FuzzParseMeminfo: whatever procfs hands over, the parser returns an
// error or a total that is exactly a kB figure written in the input (no
// overflow, nothing invented).
func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(meminfo))
	f.Add([]byte("MemTotal: 1 kB\nMemAvailable: 2 kB\n"))
	f.Add([]byte("MemTotal: 18014398509481984 kB\n"))
	f.Add([]byte("MemTotal: 18014398509481983 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeminfo(b)
		if err != nil {
			return
		}
		kb := strconv.FormatUint(m.TotalBytes/1024, 10)
		if m.TotalBytes%1024 != 0 || !strings.Contains(string(b), "MemTotal") || !strings.Contains(string(b), kb) {
			t.Fatalf("ParseMeminfo(%q) = %+v, not a MemTotal figure from the input", b, m)
		}
	})
}

func TestLinuxJetson(t *testing.T) {
	root := fstest.MapFS{
		"proc/meminfo":                file(meminfo),
		"proc/device-tree/model":      file("NVIDIA Jetson AGX Orin Developer Kit\x00"),
		"proc/device-tree/compatible": file("nvidia,p3737-0000+p3701-0005\x00nvidia,p3701-0005\x00nvidia,tegra234\x00"),
		"proc/cpuinfo":                file("processor\t: 0\nBogoMIPS\t: 62.50\n"),
	}
	var f hw.Facts
	if err := linuxFacts(&f, Options{Root: root, NVML: (&nvmltest.NVML{}).Lib()}); err != nil {
		t.Fatal(err)
	}
	if !f.IsSoC || f.Model != "NVIDIA Jetson AGX Orin Developer Kit" || f.Memory.TotalBytes != 65536000*1024 || len(f.GPUs) != 1 {
		t.Fatalf("facts %+v", f)
	}
	g := f.GPUs[0]
	if g.Name != "Jetson AGX Orin GPU" || !g.Unified || g.VRAMBytes != f.Memory.TotalBytes || g.MemBandwidthGBps != 204.8 || g.TFLOPSFP32 != 5.3 {
		t.Fatalf("gpu %+v", g)
	}
	if f.CPU != f.Model {
		t.Fatalf("an ARM board without a model name takes the board's: %q", f.CPU)
	}
	// The firmware path works where /proc/device-tree is absent.
	root2 := fstest.MapFS{
		"sys/firmware/devicetree/base/model":      file("NVIDIA Jetson Orin Nano Developer Kit\x00"),
		"sys/firmware/devicetree/base/compatible": file("nvidia,tegra234\x00"),
	}
	if model, ok := Jetson(root2); !ok || model != "NVIDIA Jetson Orin Nano Developer Kit" {
		t.Fatalf("Jetson via /sys/firmware: %q %v", model, ok)
	}
	// A Raspberry Pi has a device tree but is no Tegra.
	if _, ok := Jetson(fstest.MapFS{"proc/device-tree/compatible": file("raspberrypi,4-model-b\x00brcm,bcm2711\x00")}); ok {
		t.Fatal("a Raspberry Pi taken for a Jetson")
	}
}

func TestLinuxDiscreteGPUs(t *testing.T) {
	root := fstest.MapFS{
		"proc/meminfo": file(meminfo),
		"proc/cpuinfo": file("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"),
	}
	fake := &nvmltest.NVML{GPUs: []*nvmltest.GPU{
		{Name: "NVIDIA H200", Arch: 9, Total: 143771 << 20, Reserved: 512 << 20},
		{Name: "NVIDIA A10G", Arch: 7, Total: 23028 << 20},
	}}
	var f hw.Facts
	if err := linuxFacts(&f, Options{Root: root, NVML: fake.Lib()}); err != nil {
		t.Fatal(err)
	}
	if f.IsSoC || f.CPU != "AMD EPYC 9654 96-Core Processor" || len(f.GPUs) != 2 {
		t.Fatalf("facts %+v", f)
	}
	h := f.GPUs[0]
	if h.Name != "NVIDIA H200" || h.Arch != "Hopper" || h.VRAMBytes != 143771<<20 || h.ReservedBytes != 512<<20 || h.Unified ||
		h.MemBandwidthGBps != 4800 || h.TFLOPSFP32 != 67 || h.TFLOPSFP16 != 989 {
		t.Fatalf("H200 %+v", h)
	}
	if a := f.GPUs[1]; a.MemBandwidthGBps != 0 || a.TFLOPSFP16 != 0 {
		t.Fatalf("an A10G matched a table entry: %+v", a)
	}
	if fake.Shutdowns != 1 {
		t.Fatalf("NVML shut down %d times, want once", fake.Shutdowns)
	}
}

func TestLinuxNoGPUNoMeminfo(t *testing.T) {
	var f hw.Facts
	err := linuxFacts(&f, Options{Root: fstest.MapFS{}, NVML: (&nvmltest.NVML{InitErr: nvml.ErrDriverNotLoaded}).Lib()})
	if err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Fatalf("missing meminfo: %v", err)
	}
	if len(f.GPUs) != 0 {
		t.Fatalf("GPUs without NVML: %+v", f.GPUs)
	}
}

func TestAppleFacts(t *testing.T) {
	var f hw.Facts
	appleFacts(&f, "Apple M2 Pro", "Mac14,10", 32<<30, 40)
	if !f.IsSoC || f.CPU != "Apple M2 Pro" || f.Model != "Mac14,10" || f.Memory.TotalBytes != 32<<30 || f.Memory.AvailableBytes != (32<<30)/100*40 {
		t.Fatalf("facts %+v", f)
	}
	if len(f.GPUs) != 1 || f.GPUs[0].Name != "Apple M2 Pro GPU" || !f.GPUs[0].Unified || f.GPUs[0].VRAMBytes != 32<<30 ||
		f.GPUs[0].MemBandwidthGBps != 200 || f.GPUs[0].TFLOPSFP32 != 6.8 {
		t.Fatalf("gpu %+v", f.GPUs)
	}
	// What Metal says of the GPU: its name and working set, the rest of
	// the memory being what the driver holds back.
	metalFacts(&f.GPUs[0], mtl.Info{Name: "Apple M2 Pro", WorkingSet: 22 << 30, Unified: true})
	if g := f.GPUs[0]; g.Name != "Apple M2 Pro GPU" || g.WorkingSetBytes != 22<<30 || g.ReservedBytes != 10<<30 || !g.Unified || g.VRAMBytes != 32<<30 {
		t.Fatalf("gpu after Metal's facts %+v", g)
	}
	var intel hw.Facts
	appleFacts(&intel, "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz", "MacBookPro16,1", 16<<30, 101)
	if intel.IsSoC || len(intel.GPUs) != 0 || intel.Memory.AvailableBytes != 0 {
		t.Fatalf("an Intel Mac: %+v", intel)
	}
}

func TestChipLookup(t *testing.T) {
	tests := []struct {
		table []chip
		name  string
		bw    float64
		ok    bool
	}{
		{nvidiaChips, "NVIDIA H100 PCIe", 2000, true},
		{nvidiaChips, "NVIDIA H100 80GB HBM3", 3350, true},
		{nvidiaChips, "NVIDIA A100-SXM4-80GB", 2039, true},
		{nvidiaChips, "NVIDIA A100-PCIE-40GB", 1555, true},
		{nvidiaChips, "NVIDIA A10", 600, true},
		{nvidiaChips, "NVIDIA L40S", 864, true},
		{nvidiaChips, "NVIDIA L40", 0, false},
		{nvidiaChips, "Tesla V100-PCIE-32GB", 900, true},
		{nvidiaChips, "Tesla T4", 320, true},
		{jetsonChips, "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", 68, true},
		{jetsonChips, "Jetson-AGX", 136.5, true},
		{jetsonChips, "NVIDIA Jetson Nano Developer Kit", 25.6, true},
		{appleChips, "Apple M1", 68.25, true},
		{appleChips, "Apple M1 Max", 400, true},
		{appleChips, "Apple M4 Pro", 273, true},
		{appleChips, "Apple M10", 0, false},
	}
	for _, tt := range tests {
		c, ok := lookup(tt.table, tt.name)
		if ok != tt.ok || c.bandwidth != tt.bw {
			t.Errorf("lookup(%q) = %v %v GB/s, want %v %v", tt.name, ok, c.bandwidth, tt.ok, tt.bw)
		}
	}
}

// TestGatherRealMachine runs on whatever this machine is: it must name the
// host and count its memory, and never fail for lack of a GPU.
func TestGatherRealMachine(t *testing.T) {
	f, err := Gather(Options{})
	if f.Hostname == "" || f.CPUs == 0 || (runtime.GOOS == "linux" && f.Memory.TotalBytes == 0) {
		t.Fatalf("facts %+v (err %v)", f, err)
	}
	if err != nil && errors.Is(err, nvml.ErrNoDevices) {
		t.Fatalf("a machine without a GPU reported an error: %v", err)
	}
	t.Logf("this machine: %+v (gather errors: %v)", f, err)
}
