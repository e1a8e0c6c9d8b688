package meters

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/hw/nvml"
	"github.com/meshnode/meshnode/hw/nvml/nvmltest"
)

// liveFS is a fake machine root whose attributes may follow the fake
// clock (an energy counter, a noisy sensor) or refuse to be read.
type liveFS struct {
	fstest.MapFS
	clock *hwtest.Clock
	dyn   map[string]func(t time.Duration) string // of time since start
	deny  map[string]bool
}

func (f liveFS) Open(name string) (fs.File, error) {
	if f.deny[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	if fn, ok := f.dyn[name]; ok {
		return fstest.MapFS{"f": &fstest.MapFile{Data: []byte(fn(f.clock.Now().Sub(start)) + "\n")}}.Open("f")
	}
	return f.MapFS.Open(name)
}

func newFS(clk *hwtest.Clock) liveFS {
	return liveFS{MapFS: fstest.MapFS{}, clock: clk, dyn: map[string]func(time.Duration) string{}, deny: map[string]bool{}}
}

func (f liveFS) static(name, v string) { f.MapFS[name] = &fstest.MapFile{Data: []byte(v + "\n")} }

func (f liveFS) dynamic(name string, fn func(time.Duration) string) {
	f.MapFS[name] = &fstest.MapFile{} // listed by ReadDir and Glob
	f.dyn[name] = fn
}

// joules is a counter file drawing watts, in µJ.
func joules(watts float64) func(time.Duration) string {
	return func(t time.Duration) string { return fmt.Sprint(uint64(watts * t.Seconds() * 1e6)) }
}

func addRAPL(f liveFS) {
	const pkg, dram = "sys/class/powercap/intel-rapl:0/", "sys/class/powercap/intel-rapl:0:0/"
	f.static(pkg+"name", "package-0")
	f.static(pkg+"max_energy_range_uj", "262143328850")
	f.dynamic(pkg+"energy_uj", joules(40))
	f.static(dram+"name", "dram")
	f.static(dram+"max_energy_range_uj", "65712999613")
	f.dynamic(dram+"energy_uj", joules(5))
}

func needLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RAPL and INA3221 discovery is Linux-only")
	}
}

func span(t *testing.T, m hw.Meter, clk *hwtest.Clock, d time.Duration) hw.Energy {
	t.Helper()
	s, err := m.Open()
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(d)
	e, err := s.Close()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSelectGPUHost: a fake x86 host with RAPL and an NVIDIA GPU, end to
// end through discovery, the probe and the chosen meter.
func TestSelectGPUHost(t *testing.T) {
	needLinux(t)
	clk := hwtest.NewClock(start)
	root := newFS(clk)
	addRAPL(root)
	gpu := &nvmltest.NVML{GPUs: []*nvmltest.GPU{{Name: "NVIDIA H200", Arch: 9, Total: 141 << 30,
		Energy: func() uint64 { return uint64(70 * clk.Now().Sub(start).Seconds() * 1e3) }}}}
	sel, err := Select(context.Background(), Config{Root: root, NVML: gpu.Lib(), Clock: clk, Burn: func(context.Context) {}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	r := sel.Report
	if r.Selected != "rapl+nvml" || r.Need != hw.DomainCPU|hw.DomainGPU || r.MinWindow != nvml.MinWindow {
		t.Fatalf("report %+v", r)
	}
	if w := r.Estimator.Watts; w < 114 || w > 116 {
		t.Fatalf("calibrated estimator %.2f W, want 115 (40 + 5 + 70)", w)
	}
	e := span(t, sel.Meter, clk, time.Second)
	if got, ok := e.MeasuredUJ(); !ok || e.Provenance() != hw.HwShunt || got < 114_990_000 || got > 115_010_000 {
		t.Fatalf("one second: %v, want about 115 J HwShunt", e)
	}
}

// TestSelectJetson: a fake Jetson with the JetPack 5 hwmon layout; NVML
// starts but cannot read energy, and the module shunt is chosen.
func TestSelectJetson(t *testing.T) {
	needLinux(t)
	clk := hwtest.NewClock(start)
	root := newFS(clk)
	root.static("proc/device-tree/compatible", "nvidia,p3768-0000+p3767-0005\x00nvidia,tegra234")
	root.static("proc/device-tree/model", "NVIDIA Jetson Orin Nano Developer Kit")
	const mon = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/"
	root.static(mon+"in1_label", "VDD_IN")
	root.static(mon+"in1_input", "5000")
	// A real sensor's current wobbles from sample to sample.
	root.dynamic(mon+"curr1_input", func(t time.Duration) string { return fmt.Sprint(1600 + t.Milliseconds()/10%3) })
	root.static(mon+"in2_label", "NC")
	gpu := &nvmltest.NVML{GPUs: []*nvmltest.GPU{{Name: "Orin (nvgpu)", EnergyErr: nvml.ErrNotSupported}}}

	sel, err := Select(context.Background(), Config{Root: root, NVML: gpu.Lib(), Clock: clk, Burn: func(context.Context) {}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	r := sel.Report
	if r.Selected != INA3221 || r.Need != hw.DomainCPU|hw.DomainGPU || !strings.Contains(r.NeedWhy, "Orin Nano") {
		t.Fatalf("report %+v", r)
	}
	if c := r.Counters[1]; c.Name != NVML || c.State != StateNotLive || !strings.Contains(c.Reason, "Not Supported") {
		t.Fatalf("nvml line %+v", c)
	}

	// Before Serve, the sampler is stopped and spans fall back.
	clk.Advance(time.Second)
	if e := span(t, sel.Meter, clk, 200*time.Millisecond); e.Provenance() != hw.Estimator {
		t.Fatalf("a span before Serve was graded %v", e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sel.Serve(ctx) }()
	for clk.Tickers() < 2 { // the sampler's and the keepalive's
		time.Sleep(time.Millisecond)
	}
	clk.Advance(50 * time.Millisecond) // a fresh sample and a new epoch
	for {                              // Advance returns when the tick is received; wait for its sample
		if _, err := sel.counter.Read(); err == nil {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	e := span(t, sel.Meter, clk, 500*time.Millisecond)
	// 5 V × 1.6 A = 8 W, plus the wobble's at most 10 mW, over 0.5 s. Each
	// read sees the last sample taken, which may be a period (10 ms) old
	// at either end: 0.49 s to 0.51 s of 8 W.
	if got, ok := e.MeasuredUJ(); !ok || e.Provenance() != hw.HwShunt || got < 3_920_000 || got > 4_090_000 {
		t.Fatalf("a served span: %v, want about 4 J HwShunt", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestSelectUnreadableRAPL: RAPL exists but is root-only; the node falls
// back to the estimator and says why, once.
func TestSelectUnreadableRAPL(t *testing.T) {
	needLinux(t)
	clk := hwtest.NewClock(start)
	root := newFS(clk)
	addRAPL(root)
	root.deny["sys/class/powercap/intel-rapl:0/energy_uj"] = true
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sel, err := Select(context.Background(), Config{Root: root, NVML: (&nvmltest.NVML{}).Lib(), Clock: clk, Burn: func(context.Context) {}}, log)
	if err != nil {
		t.Fatal(err)
	}
	r := sel.Report
	if r.Selected != Estimator || r.Counters[0].State != StateUnusable || !strings.Contains(r.Counters[0].Reason, "CVE-2020-8694") {
		t.Fatalf("report %+v", r)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "counter=rapl") {
		t.Fatalf("want one warning naming rapl, got:\n%s", logs.String())
	}
	if e := span(t, sel.Meter, clk, time.Second); e.Provenance() != hw.Estimator || e.UJ() != 65_000_000 {
		t.Fatalf("estimator span %v, want 65 J at the host default", e)
	}
}

// TestReportText pins the report's printed form (testdata/report.golden);
// run with -update to rewrite it.
func TestReportText(t *testing.T) {
	clk := hwtest.NewClock(start)
	cands, _ := build(clk, raplSpec, with(nvmlSpec, "frozen"), with(iorepSpec, "absent"), with(inaSpec, "unusable"))
	cands[0].detail = "intel-rapl:0 package-0, intel-rapl:0:0 dram"
	cands[1].detail = "1 GPU(s): NVIDIA H200"
	sel := choose(context.Background(), cfgFor(clk), nil, cands, gpuHost, nil)
	golden(t, sel.Report, "testdata/report.golden")
}

// TestReportPartsText pins the report of a host whose NVML does not start
// (testdata/report_parts.golden): RAPL's zones as parts, each live, and
// the grade of a serve by its devices, so an owner can see why a CUDA
// serve's receipt is Estimator while a CPU serve's is HwShunt.
func TestReportPartsText(t *testing.T) {
	needLinux(t)
	clk := hwtest.NewClock(start)
	root := newFS(clk)
	addRAPL(root)
	gpu := &nvmltest.NVML{InitErr: nvml.ErrDriverNotLoaded}
	sel, err := Select(context.Background(), Config{Root: root, NVML: gpu.Lib(), Clock: clk, Burn: func(context.Context) {}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	// Whether this machine has IOReport or INA3221 is not the test's.
	sel.Report.Counters = sel.Report.Counters[:2]
	golden(t, sel.Report, "testdata/report_parts.golden")
}

func golden(t *testing.T, r Report, file string) {
	t.Helper()
	var got bytes.Buffer
	if err := r.WriteText(&got); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(file, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("report text:\n%s\nwant:\n%s", got.Bytes(), want)
	}
}

func TestInspect(t *testing.T) {
	needLinux(t)
	clk := hwtest.NewClock(start)
	root := newFS(clk)
	addRAPL(root)
	gpu := &nvmltest.NVML{GPUs: []*nvmltest.GPU{{Name: "NVIDIA L4", EnergyMJ: 1}}}
	r, err := Inspect(context.Background(), Config{Root: root, NVML: gpu.Lib(), Clock: clk, Burn: func(context.Context) {}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Selected != Estimator || r.Counters[1].State != StateNotLive || gpu.Shutdowns != 1 {
		t.Fatalf("report %+v, NVML shut down %d times", r, gpu.Shutdowns)
	}
	if _, err := Inspect(context.Background(), Config{Meter: "bogus"}, nil); err == nil {
		t.Fatal("Inspect accepted a bad meter")
	}
}

// TestSelectThisMachine is the smoke test: whatever this machine has, Select
// returns a working meter, and every counter not chosen says why.
func TestSelectThisMachine(t *testing.T) {
	sel, err := Select(context.Background(), Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	var buf bytes.Buffer
	sel.Report.WriteText(&buf)
	t.Logf("meters on this machine:\n%s", buf.String())
	for _, c := range sel.Report.Counters {
		if c.State != StateLive && c.Reason == "" {
			t.Errorf("counter %s is %s without a reason", c.Name, c.State)
		}
	}
	if sel.Report.Selected == Estimator && sel.Report.Why == "" {
		t.Error("the estimator was chosen without a reason")
	}
	s, err := sel.Meter.Open()
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if e.Provenance() != hw.Estimator { // a zero-length span is below any window
		t.Fatalf("an instant span was graded %v", e)
	}
}

// TestSelectFrozenGPUAfterProbe is issue #17 item 1: with rapl+nvml
// selected, a GPU counter that freezes after the start-up probe must not
// leave a figure graded HwShunt that counts the CPU alone (mesh/1 §3.3: a
// frozen counter produces no hardware-graded figure). RAPL keeps advancing,
// so a liveness signal summed over the parts would still move.
func TestSelectFrozenGPUAfterProbe(t *testing.T) {
	needLinux(t)
	clk := hwtest.NewClock(start)
	root := newFS(clk)
	addRAPL(root)
	var frozen *uint64 // the GPU's last published energy, once it freezes
	gpu := &nvmltest.NVML{GPUs: []*nvmltest.GPU{{Name: "NVIDIA H200", Arch: 9, Total: 141 << 30,
		Energy: func() uint64 {
			if frozen != nil {
				return *frozen
			}
			return uint64(70 * clk.Now().Sub(start).Seconds() * 1e3)
		}}}}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sel, err := Select(context.Background(), Config{Root: root, NVML: gpu.Lib(), Clock: clk, Burn: func(context.Context) {}}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	if sel.Report.Selected != "rapl+nvml" {
		t.Fatalf("selected %s: %s", sel.Report.Selected, sel.Report.Why)
	}
	if e := span(t, sel.Meter, clk, time.Second); e.Provenance() != hw.HwShunt {
		t.Fatalf("before the freeze: %v, want HwShunt", e)
	}

	mj := gpu.GPUs[0].Energy()
	frozen = &mj
	for range 2 { // the warning is said once
		e := span(t, sel.Meter, clk, time.Second)
		if _, measured := e.MeasuredUJ(); e.Provenance() != hw.Estimator || measured {
			t.Fatalf("GPU frozen since the probe: %v, want Estimator (the CPU alone was 45 J of 115 J)", e)
		}
		if w := e.EstimatedUJ(); w < 114_000_000 || w > 116_000_000 {
			t.Fatalf("estimate %d µJ, want about 115 J at the calibrated power", w)
		}
	}
	if n := strings.Count(logs.String(), "nvml:gpu0"); n != 1 || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("want one warning naming nvml:gpu0, got:\n%s", logs.String())
	}
}

// TestSelectCUDAWithoutNVML is issue #17 item 2: where NVML's library is
// missing or nvmlInit fails, the selection sees no GPU and picks RAPL for
// the CPU. A serve on a CUDA backend then used a device no counter reads:
// Estimator, never HwShunt; a serve on the CPU backend stays HwShunt.
func TestSelectCUDAWithoutNVML(t *testing.T) {
	needLinux(t)
	for _, tt := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"library missing", func(c *Config) { c.NVMLPath = filepath.Join(t.TempDir(), "libnvidia-ml.so.1") }},
		{"nvmlInit fails", func(c *Config) { c.NVML = (&nvmltest.NVML{InitErr: nvml.ErrDriverNotLoaded}).Lib() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := hwtest.NewClock(start)
			root := newFS(clk)
			addRAPL(root)
			cfg := Config{Root: root, Clock: clk, Burn: func(context.Context) {}}
			tt.cfg(&cfg)
			sel, err := Select(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sel.Close()
			if r := sel.Report; r.Selected != RAPL || r.Need != hw.DomainCPU || r.Counters[1].State != StateAbsent && r.Counters[1].State != StateUnusable {
				t.Fatalf("report %+v", r)
			}
			m, ok := sel.Meter.(hw.DeviceMeter)
			if !ok {
				t.Fatalf("the selected meter %T cannot be told a serve's devices", sel.Meter)
			}
			serveOn := func(uses hw.Domain) hw.Energy {
				s, err := m.OpenFor(uses)
				if err != nil {
					t.Fatal(err)
				}
				clk.Advance(time.Second)
				e, err := s.Close()
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			if e := serveOn(hw.DomainCPU | hw.DomainGPU); e.Provenance() != hw.Estimator {
				t.Fatalf("a serve on CUDA: %v, want Estimator (RAPL does not read the GPU)", e)
			}
			if e := serveOn(hw.DomainCPU); e.Provenance() != hw.HwShunt || e.UJ() < 44_990_000 || e.UJ() > 45_010_000 {
				t.Fatalf("a serve on the CPU: %v, want about 45 J HwShunt", e)
			}
			g := sel.Report.Serves
			if len(g) != 2 || g[0].Uses != hw.DomainCPU || g[0].Grade != hw.HwShunt.String() ||
				g[1].Uses != hw.DomainCPU|hw.DomainGPU || g[1].Grade != hw.Estimator.String() || !strings.Contains(g[1].Why, "gpu") {
				t.Fatalf("report's grades by device: %+v", g)
			}
		})
	}
}
