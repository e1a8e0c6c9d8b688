package meters

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
)

var start = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// fakes builds candidates from a compact description: for each counter,
// "live", "frozen", "absent" or "unusable".
type fakeSpec struct {
	name    string
	state   string
	domains hw.Domain
	window  time.Duration
	watts   float64
}

var (
	raplSpec    = fakeSpec{RAPL, "live", hw.DomainCPU | hw.DomainDRAM, 10 * time.Millisecond, 40}
	nvmlSpec    = fakeSpec{NVML, "live", hw.DomainGPU, 100 * time.Millisecond, 70}
	iorepSpec   = fakeSpec{IOReport, "live", hw.DomainCPU | hw.DomainGPU | hw.DomainANE | hw.DomainDRAM, 10 * time.Millisecond, 12}
	inaSpec     = fakeSpec{INA3221, "live", hw.DomainModule, 100 * time.Millisecond, 18}
	cpuHost     = platform{hw.DomainCPU, "no GPU found", false}
	gpuHost     = platform{hw.DomainCPU | hw.DomainGPU, "NVML found 1 NVIDIA GPU(s)", false}
	socPlatform = platform{hw.DomainCPU | hw.DomainGPU, "an SoC", true}
)

func with(s fakeSpec, state string) fakeSpec { s.state = state; return s }

func build(clk *hwtest.Clock, specs ...fakeSpec) ([]candidate, map[string]*hwtest.Counter) {
	var cands []candidate
	fakes := map[string]*hwtest.Counter{}
	for _, s := range specs {
		c := candidate{name: s.name}
		switch s.state {
		case "absent":
			c.absent, c.err = true, errors.New(s.name+" is not on this machine")
		case "unusable":
			c.err = errors.New(s.name + ": permission denied")
		default:
			f := hwtest.NewCounter(s.name, s.domains, s.window, clk, s.watts)
			if s.state == "frozen" {
				f.Freeze()
			}
			c.counter, fakes[s.name] = f, f
		}
		cands = append(cands, c)
	}
	return cands, fakes
}

func cfgFor(clk *hwtest.Clock) Config {
	return Config{Clock: clk, Burn: func(context.Context) {}}
}

func TestChoose(t *testing.T) {
	tests := []struct {
		name     string
		meter    string
		watts    float64
		plat     platform
		specs    []fakeSpec
		selected string
		window   time.Duration
		why      string
		model    string // substring of the estimator's source
		states   string
	}{
		{"cpu host with RAPL", "", 0, cpuHost,
			[]fakeSpec{raplSpec, with(nvmlSpec, "absent"), with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"rapl", 10 * time.Millisecond, "preferred", "calibrated", "live absent absent absent"},
		{"gpu host: RAPL and NVML combined", "", 0, gpuHost,
			[]fakeSpec{raplSpec, nvmlSpec, with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"rapl+nvml", 100 * time.Millisecond, "combined", "calibrated", "live live absent absent"},
		{"gpu host without a CPU counter: NVML alone is partial", "", 0, gpuHost,
			[]fakeSpec{with(raplSpec, "unusable"), nvmlSpec, with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"estimator", 0, "cover gpu, a request uses cpu+gpu", "default for a host", "unusable live absent absent"},
		{"gpu host with a frozen RAPL", "", 0, gpuHost,
			[]fakeSpec{with(raplSpec, "frozen"), nvmlSpec, with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"estimator", 0, "partial figure", "default for a host", "not live live absent absent"},
		{"jetson: the module shunt, NVML energy unreadable", "", 0, socPlatform,
			[]fakeSpec{with(raplSpec, "absent"), with(nvmlSpec, "frozen"), with(iorepSpec, "absent"), inaSpec},
			"ina3221", 100 * time.Millisecond, "preferred", "calibrated", "absent not live absent live"},
		{"apple silicon", "", 0, socPlatform,
			[]fakeSpec{with(raplSpec, "absent"), with(nvmlSpec, "absent"), iorepSpec, with(inaSpec, "absent")},
			"ioreport", 10 * time.Millisecond, "preferred", "calibrated", "absent absent live absent"},
		{"nothing at all", "", 0, cpuHost,
			[]fakeSpec{with(raplSpec, "absent"), with(nvmlSpec, "absent"), with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"estimator", 0, "no live energy counter", "default for a host", "absent absent absent absent"},
		{"soc without a counter", "", 0, socPlatform,
			[]fakeSpec{with(raplSpec, "absent"), with(nvmlSpec, "absent"), with(iorepSpec, "unusable"), with(inaSpec, "absent")},
			"estimator", 0, "no live energy counter", "default for an SoC", "absent absent unusable absent"},
		{"forced estimator skips the probe", "estimator", 0, gpuHost,
			[]fakeSpec{raplSpec, nvmlSpec, with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"estimator", 0, "forced by config", "default", "not probed not probed absent absent"},
		{"forced partial meter is refused", "nvml", 0, gpuHost,
			[]fakeSpec{raplSpec, nvmlSpec, with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"estimator", 0, "forced meter nvml not usable: nvml covers gpu", "default", "live live absent absent"},
		{"forced absent meter is refused", "ina3221", 0, cpuHost,
			[]fakeSpec{raplSpec, with(nvmlSpec, "absent"), with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"estimator", 0, "forced meter ina3221 not usable: ina3221 unavailable (ina3221 is not on this machine)", "default", "live absent absent absent"},
		{"forced set that covers", "nvml+rapl", 0, gpuHost,
			[]fakeSpec{raplSpec, nvmlSpec, with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"nvml+rapl", 100 * time.Millisecond, "forced by config", "calibrated", "live live absent absent"},
		{"configured watts win over calibration", "", 33, cpuHost,
			[]fakeSpec{raplSpec, with(nvmlSpec, "absent"), with(iorepSpec, "absent"), with(inaSpec, "absent")},
			"rapl", 10 * time.Millisecond, "preferred", "config", "live absent absent absent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := hwtest.NewClock(start)
			cands, _ := build(clk, tt.specs...)
			forced, err := parseMeter(tt.meter)
			if err != nil {
				t.Fatal(err)
			}
			cfg := cfgFor(clk)
			cfg.EstimatorWatts = tt.watts
			sel := choose(context.Background(), cfg, forced, cands, tt.plat, nil)
			r := sel.Report
			var states []string
			for _, c := range r.Counters {
				states = append(states, c.State)
			}
			if r.Selected != tt.selected || sel.Meter.Name() != tt.selected || r.MinWindow != tt.window || sel.Meter.MinWindow() != tt.window {
				t.Fatalf("selected %q (meter %q) window %v; want %q %v; why %q", r.Selected, sel.Meter.Name(), r.MinWindow, tt.selected, tt.window, r.Why)
			}
			if !strings.Contains(r.Why, tt.why) || !strings.Contains(r.Estimator.Source, tt.model) || strings.Join(states, " ") != tt.states {
				t.Fatalf("why %q estimator %q states %q; want %q %q %q", r.Why, r.Estimator.Source, strings.Join(states, " "), tt.why, tt.model, tt.states)
			}
			if r.Forced != (tt.meter != "") {
				t.Fatalf("forced = %v for meter %q", r.Forced, tt.meter)
			}
		})
	}
}

// TestCalibratedEstimator: the estimator bills at the chosen counters'
// busy power, so a short span costs what the hardware would have said.
func TestCalibratedEstimator(t *testing.T) {
	clk := hwtest.NewClock(start)
	cands, _ := build(clk, raplSpec, nvmlSpec)
	sel := choose(context.Background(), cfgFor(clk), nil, cands, gpuHost, nil)
	if w := sel.Report.Estimator.Watts; w < 109.99 || w > 110.01 {
		t.Fatalf("calibrated estimator %.3f W, want 110 W (40 + 70)", w)
	}
}

// TestSelectedMeterWindow is the window test through a selection:
// under a 100 ms combined window a 20 ms span is Estimator at the
// estimator's figure, a 120 ms span the counters' figure and grade.
func TestSelectedMeterWindow(t *testing.T) {
	clk := hwtest.NewClock(start)
	cands, _ := build(clk, raplSpec, nvmlSpec)
	cfg := cfgFor(clk)
	cfg.EstimatorWatts = 50
	sel := choose(context.Background(), cfg, nil, cands, gpuHost, nil)
	span := func(d time.Duration) hw.Energy {
		s, _ := sel.Meter.Open()
		clk.Advance(d)
		e, err := s.Close()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := span(20 * time.Millisecond); e.Provenance() != hw.Estimator || e.UJ() != 1_000_000 {
		t.Fatalf("20 ms: %v, want the estimator's 1000000 µJ as Estimator", e)
	}
	if e := span(120 * time.Millisecond); e.Provenance() != hw.HwShunt || e.UJ() != 13_200_000 || e.EstimatedUJ() != 6_000_000 {
		t.Fatalf("120 ms: %v, want 13200000 µJ measured (110 W), 6000000 estimated, HwShunt", e)
	}
}

func TestParseMeter(t *testing.T) {
	for in, want := range map[string]string{"": "", "auto": "", " Estimator ": "estimator", "rapl+nvml": "rapl+nvml", "ina3221": "ina3221"} {
		got, err := parseMeter(in)
		if err != nil || strings.Join(got, "+") != want {
			t.Errorf("parseMeter(%q) = %v, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"rapl+tpu", "rapl+rapl", "estimator+rapl", "+"} {
		if _, err := parseMeter(bad); err == nil {
			t.Errorf("parseMeter(%q) accepted", bad)
		}
	}
	if _, err := Select(context.Background(), Config{Meter: "watts"}, nil); err == nil {
		t.Error("Select accepted an unknown meter")
	}
}

// TestCloseUnchosen: counters not chosen are released at once, chosen
// ones when the selection closes.
func TestCloseUnchosen(t *testing.T) {
	clk := hwtest.NewClock(start)
	cands, _ := build(clk, raplSpec, nvmlSpec, iorepSpec)
	closed := map[string]int{}
	for i := range cands {
		n := cands[i].name
		cands[i].close = func() error { closed[n]++; return nil }
	}
	sel := choose(context.Background(), cfgFor(clk), nil, cands, socPlatform, nil)
	if sel.Report.Selected != IOReport || closed[RAPL] != 1 || closed[NVML] != 1 || closed[IOReport] != 0 {
		t.Fatalf("selected %s, closed %v", sel.Report.Selected, closed)
	}
	sel.Close()
	sel.Close()
	if closed[IOReport] != 1 {
		t.Fatalf("the chosen counter closed %d times, want once", closed[IOReport])
	}
}

var update = flag.Bool("update", false, "rewrite golden files")
