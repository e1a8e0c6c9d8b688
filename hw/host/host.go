// Package host gathers the facts about this machine that a node gossips
// (hw.Facts): hostname, memory, CPU, whether it is an SoC, and its GPUs
// with bandwidth and throughput hints.
//
// Linux facts come from procfs and the device tree through an fs.FS rooted
// at the machine's root, so tests hand it a fake tree; a Jetson is found by
// its device tree (compatible "nvidia,tegra"). Discrete NVIDIA GPUs come
// from NVML. On macOS the facts come from sysctl. Figures that cannot be
// queried come from a table by chip, and are zero where the table has no
// entry.
package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/internal/sysfs"
	"github.com/meshnode/meshnode/hw/nvml"
)

// Options tunes [Gather].
type Options struct {
	// Root is the machine's root directory for procfs and sysfs
	// (os.DirFS("/") when nil).
	Root fs.FS
	// NVML is the NVML to ask about discrete GPUs; nil loads the system's
	// from NVMLPath, and a machine without it has no discrete GPUs.
	NVML     *nvml.Lib
	NVMLPath string
	// Hostname defaults to os.Hostname.
	Hostname func() (string, error)
}

// Gather describes the machine. Missing pieces are left zero; an error is
// returned only alongside the facts that could be gathered, naming what
// could not.
func Gather(opts Options) (hw.Facts, error) {
	if opts.Root == nil {
		opts.Root = os.DirFS("/")
	}
	if opts.Hostname == nil {
		opts.Hostname = os.Hostname
	}
	f := hw.Facts{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	var errs []error
	if h, err := opts.Hostname(); err == nil {
		f.Hostname = h
	} else {
		errs = append(errs, fmt.Errorf("hostname: %w", err))
	}
	switch runtime.GOOS {
	case "linux":
		errs = append(errs, linuxFacts(&f, opts))
	case "darwin":
		errs = append(errs, darwinFacts(&f))
	}
	return f, errors.Join(errs...)
}

// linuxFacts fills f from procfs, the device tree and NVML.
func linuxFacts(f *hw.Facts, opts Options) error {
	var errs []error
	if b, err := sysfs.ReadBytes(opts.Root, "proc/meminfo"); err == nil {
		if f.Memory, err = ParseMeminfo(b); err != nil {
			errs = append(errs, err)
		}
	} else {
		errs = append(errs, fmt.Errorf("meminfo: %w", err))
	}
	if b, err := readCPUInfo(opts.Root); err == nil {
		f.CPU = cpuModel(b)
	}
	if model, ok := Jetson(opts.Root); ok {
		f.Model, f.IsSoC = model, true
		if f.CPU == "" {
			f.CPU = model
		}
		f.GPUs = []hw.GPU{socGPU(model, f.Memory.TotalBytes)}
		return errors.Join(errs...)
	}
	if model, err := deviceTreeModel(opts.Root); err == nil {
		f.Model = model
	}
	// No NVML, or NVML without a GPU, is the ordinary case for a machine
	// without one; the meters report says what NVML did.
	f.GPUs, _ = nvidiaGPUs(opts)
	return errors.Join(errs...)
}

// Jetson reports whether root is an NVIDIA Tegra board, and its model.
func Jetson(root fs.FS) (model string, ok bool) {
	for _, dir := range deviceTreeDirs {
		compat, err := sysfs.ReadBytes(root, dir+"/compatible")
		if err != nil {
			continue
		}
		for _, c := range bytes.Split(compat, []byte{0}) {
			if bytes.HasPrefix(c, []byte("nvidia,tegra")) {
				model, _ := sysfs.ReadString(root, dir+"/model")
				if model == "" {
					model = "NVIDIA Jetson"
				}
				return model, true
			}
		}
	}
	return "", false
}

var deviceTreeDirs = []string{"proc/device-tree", "sys/firmware/devicetree/base"}

func deviceTreeModel(root fs.FS) (string, error) {
	var err error
	for _, dir := range deviceTreeDirs {
		var m string
		if m, err = sysfs.ReadString(root, dir+"/model"); err == nil && m != "" {
			return m, nil
		}
	}
	return "", err
}

// socGPU is an SoC's integrated GPU: named and rated from the table, with
// the system's memory as its own.
func socGPU(model string, memTotal uint64) hw.GPU {
	g := hw.GPU{Name: model + " GPU", VRAMBytes: memTotal, Unified: true}
	if c, ok := lookup(jetsonChips, model); ok {
		g.Name, g.Arch = c.name, c.arch
		g.MemBandwidthGBps, g.TFLOPSFP32, g.TFLOPSFP16 = c.bandwidth, c.fp32, c.fp16
	}
	return g
}

// nvidiaGPUs asks NVML for the discrete GPUs, with table hints by name.
func nvidiaGPUs(opts Options) ([]hw.GPU, error) {
	lib := opts.NVML
	if lib == nil {
		var err error
		if lib, err = nvml.Load(opts.NVMLPath); err != nil {
			return nil, err
		}
	}
	s, err := nvml.Start(lib)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	found, err := s.GPUs()
	if err != nil {
		return nil, err
	}
	var gpus []hw.GPU
	for _, n := range found {
		g := hw.GPU{Name: n.Name, Arch: n.Arch, VRAMBytes: n.TotalBytes, ReservedBytes: n.ReservedBytes}
		if c, ok := lookup(nvidiaChips, n.Name); ok {
			g.MemBandwidthGBps, g.TFLOPSFP32, g.TFLOPSFP16 = c.bandwidth, c.fp32, c.fp16
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// appleFacts fills f from what sysctl says of an Apple Silicon Mac:
// machdep.cpu.brand_string, hw.model, hw.memsize and
// kern.memorystatus_level (the percentage of memory available).
func appleFacts(f *hw.Facts, brand, model string, memsize uint64, level uint32) {
	f.CPU, f.Model = brand, model
	f.Memory.TotalBytes = memsize
	if level <= 100 {
		f.Memory.AvailableBytes = memsize / 100 * uint64(level)
	}
	if !strings.HasPrefix(brand, "Apple M") {
		return // an Intel Mac: no unified GPU worth gossiping
	}
	f.IsSoC = true
	g := hw.GPU{Name: brand + " GPU", VRAMBytes: memsize, Unified: true}
	if c, ok := lookup(appleChips, brand); ok {
		g.MemBandwidthGBps, g.TFLOPSFP32, g.TFLOPSFP16 = c.bandwidth, c.fp32, c.fp16
	}
	f.GPUs = []hw.GPU{g}
}

// maxMeminfoLines bounds the parse of /proc/meminfo (about 60 lines).
const maxMeminfoLines = 1024

// ParseMeminfo reads MemTotal and MemAvailable (kB) from /proc/meminfo.
func ParseMeminfo(b []byte) (hw.Memory, error) {
	var m hw.Memory
	var haveTotal bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 0; sc.Scan() && n < maxMeminfoLines; n++ {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 || len(fields) > 2 || (len(fields) == 2 && fields[1] != "kB") {
			return hw.Memory{}, fmt.Errorf("meminfo: malformed %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil || kb >= 1<<54 { // kB × 1024 must fit in 64 bits
			return hw.Memory{}, fmt.Errorf("meminfo: malformed %s value %q", key, fields[0])
		}
		if key == "MemTotal" {
			m.TotalBytes, haveTotal = kb*1024, true
		} else {
			m.AvailableBytes = kb * 1024
		}
	}
	if !haveTotal {
		return hw.Memory{}, errors.New("meminfo: no MemTotal line")
	}
	return m, nil
}

func readCPUInfo(root fs.FS) ([]byte, error) {
	f, err := root.Open("proc/cpuinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The first processor's block is enough; bound the read.
	buf := make([]byte, 64<<10)
	n, err := f.Read(buf)
	if n == 0 {
		return nil, err
	}
	return buf[:n], nil
}

// cpuModel is the first "model name" in /proc/cpuinfo.
func cpuModel(b []byte) string {
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return ""
}
