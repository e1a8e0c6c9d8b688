// Package meters finds the machine's energy counters, proves them live,
// and picks the meter every serve is billed through (mesh/1 §3.3).
//
// [Select] opens every counter that exists here (RAPL, NVML, IOReport,
// Jetson INA3221), probes them all in one pass while burning CPU, and
// chooses the best live one, or a combination of live ones, that covers
// everything a request may use: the CPU always, and the GPU where the
// machine has one. With none, serves are billed by the estimator and
// graded Estimator, and the report says why. The [Report] is what
// `meshnode meters` prints.
package meters

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/host"
	"github.com/meshnode/meshnode/hw/ina3221"
	"github.com/meshnode/meshnode/hw/ioreport"
	"github.com/meshnode/meshnode/hw/nvml"
	"github.com/meshnode/meshnode/hw/rapl"
)

// Counter names, in order of preference: a shunt on the module's input
// first, then the SoC's own model, then RAPL, and NVML last (it never
// covers the CPU alone).
const (
	INA3221  = "ina3221"
	IOReport = "ioreport"
	RAPL     = "rapl"
	NVML     = "nvml"
	// Estimator is the meter of last resort.
	Estimator = "estimator"
)

var preference = []string{INA3221, IOReport, RAPL, NVML}

// Default estimator powers where neither config nor a probe gives one:
// deliberately generous, since under-billing is the unsafe direction.
const (
	defaultSoCWatts  = 15
	defaultHostWatts = 65
)

// keepalive is how often a selection reads its counter between serves, so
// that wrapping counters (RAPL) never wrap unseen.
const keepalive = 5 * time.Second

// Config chooses and tunes the meter. The zero value selects
// automatically on the real machine.
type Config struct {
	// Meter forces a choice: "" or "auto" picks the best live meter;
	// "estimator" bills everything by the estimator; a counter name
	// ("rapl", "nvml", "ioreport", "ina3221") or a "+"-joined set
	// ("rapl+nvml") uses exactly those counters, if they are live and
	// cover what a request uses, and the estimator otherwise.
	Meter string
	// EstimatorWatts, when positive, is the estimator's modelled power;
	// otherwise it is calibrated from the chosen counter's busy power
	// during the probe, or a default.
	EstimatorWatts float64
	// Need is what a figure must cover to be graded HwShunt; zero
	// detects it (the CPU, plus the GPU where there is one).
	Need hw.Domain

	// Root is the machine's root directory for sysfs and procfs
	// (os.DirFS("/") when nil).
	Root fs.FS
	// NVML, when set, is used instead of loading NVMLPath.
	NVML     *nvml.Lib
	NVMLPath string
	// ModuleRails and SamplePeriod tune the INA3221 sampler.
	ModuleRails  []string
	SamplePeriod time.Duration

	// Clock times spans and probes (hw.SystemClock when nil).
	Clock hw.Clock
	// Burn and ProbeDuration tune the liveness probe (hw.ProbeConfig).
	Burn          func(context.Context)
	ProbeDuration time.Duration
}

// Selection is the chosen meter, the report of how it was chosen, and the
// background work it needs.
type Selection struct {
	// Meter is what the steward meters serves through.
	Meter hw.Meter
	// Report says what was found and why this meter was chosen.
	Report Report

	counter hw.Counter // nil for the estimator
	serves  []func(context.Context) error
	closers []func() error
	clock   hw.Clock
	log     *slog.Logger
	once    sync.Once
}

// Select finds, probes and chooses. It fails only on a bad Config; a
// machine without counters gets the estimator and a report saying why.
// The caller runs the selection's Serve for the node's life and Closes it
// at the end.
func Select(ctx context.Context, cfg Config, log *slog.Logger) (*Selection, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	forced, err := parseMeter(cfg.Meter)
	if err != nil {
		return nil, err
	}
	if cfg.Root == nil {
		cfg.Root = os.DirFS("/")
	}
	if cfg.Clock == nil {
		cfg.Clock = hw.SystemClock{}
	}
	cands := discover(cfg, log)
	plat := detect(cfg.Root, cands)
	if cfg.Need != 0 {
		plat.need, plat.why = cfg.Need, "config"
	}
	return choose(ctx, cfg, forced, cands, plat, log), nil
}

// Inspect is `meshnode meters`: it selects as Select does, releases what
// it opened, and returns the report. Print it with [Report.WriteText] or
// encode it as JSON.
func Inspect(ctx context.Context, cfg Config, log *slog.Logger) (Report, error) {
	sel, err := Select(ctx, cfg, log)
	if err != nil {
		return Report{}, err
	}
	defer sel.Close()
	return sel.Report, nil
}

// parseMeter validates Config.Meter: nil means automatic.
func parseMeter(s string) ([]string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || s == "auto" {
		return nil, nil
	}
	if s == Estimator {
		return []string{Estimator}, nil
	}
	var names []string
	for _, n := range strings.Split(s, "+") {
		if !slices.Contains(preference, n) {
			return nil, fmt.Errorf("meters: unknown meter %q in %q (want auto, estimator, %s, or a + of counters)", n, s, strings.Join(preference, ", "))
		}
		if slices.Contains(names, n) {
			return nil, fmt.Errorf("meters: %q names %s twice", s, n)
		}
		names = append(names, n)
	}
	return names, nil
}

// candidate is one counter source as discovery found it.
type candidate struct {
	name    string
	counter hw.Counter // nil when absent or unusable
	absent  bool       // nothing of this kind on the machine
	err     error      // why there is no counter
	detail  string
	gpus    int // GPUs this source saw
	serve   func(context.Context) error
	close   func() error
}

// platform is what a serve may use here and why we think so.
type platform struct {
	need hw.Domain
	why  string
	soc  bool
}

// detect says what a serve may use: the CPU always, the GPU where one was
// found.
func detect(root fs.FS, cands []candidate) platform {
	if model, ok := host.Jetson(root); ok {
		return platform{hw.DomainCPU | hw.DomainGPU, model + " (an SoC with an integrated GPU)", true}
	}
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		return platform{hw.DomainCPU | hw.DomainGPU, "Apple Silicon (an SoC with an integrated GPU)", true}
	}
	for _, c := range cands {
		if c.name == NVML && c.gpus > 0 {
			return platform{hw.DomainCPU | hw.DomainGPU, fmt.Sprintf("NVML found %d NVIDIA GPU(s)", c.gpus), false}
		}
	}
	return platform{hw.DomainCPU, "no GPU found", false}
}

// discover opens every counter source this platform can have.
func discover(cfg Config, log *slog.Logger) []candidate {
	return []candidate{raplCandidate(cfg), nvmlCandidate(cfg), ioreportCandidate(), ina3221Candidate(cfg, log)}
}

func raplCandidate(cfg Config) candidate {
	c := candidate{name: RAPL}
	if runtime.GOOS != "linux" {
		c.absent, c.err = true, errors.New("RAPL is read through Linux powercap")
		return c
	}
	r, err := rapl.Open(cfg.Root, cfg.Clock)
	if err != nil {
		c.absent, c.err = errors.Is(err, rapl.ErrNoZones), err
		return c
	}
	var zs []string
	for _, z := range r.Zones() {
		zs = append(zs, z.ID+" "+z.Name)
	}
	c.counter, c.detail = r, strings.Join(zs, ", ")
	return c
}

func nvmlCandidate(cfg Config) candidate {
	c := candidate{name: NVML}
	lib := cfg.NVML
	if lib == nil {
		if runtime.GOOS != "linux" {
			c.absent, c.err = true, errors.New("NVML is a Linux library")
			return c
		}
		var err error
		if lib, err = nvml.Load(cfg.NVMLPath); err != nil {
			c.absent, c.err = true, err
			return c
		}
	}
	s, err := nvml.Start(lib)
	if err != nil {
		c.absent, c.err = errors.Is(err, nvml.ErrNoDevices), err
		return c
	}
	c.gpus, c.close = s.Devices(), s.Close
	var names []string
	if gpus, err := s.GPUs(); err == nil {
		for _, g := range gpus {
			names = append(names, g.Name)
		}
	}
	c.counter, c.detail = s.Counter(), fmt.Sprintf("%d GPU(s): %s", s.Devices(), strings.Join(names, ", "))
	return c
}

func ioreportCandidate() candidate {
	c := candidate{name: IOReport}
	r, err := ioreport.Open()
	if err != nil {
		c.absent, c.err = errors.Is(err, ioreport.ErrUnsupported), err
		return c
	}
	var chans []string
	for name, rail := range r.Channels() {
		chans = append(chans, rail.String()+"="+name)
	}
	slices.Sort(chans)
	c.counter, c.detail, c.close = r, strings.Join(chans, ", "), r.Close
	return c
}

func ina3221Candidate(cfg Config, log *slog.Logger) candidate {
	c := candidate{name: INA3221}
	if runtime.GOOS != "linux" {
		c.absent, c.err = true, errors.New("INA3221 monitors are read through Linux sysfs")
		return c
	}
	s, err := ina3221.Open(cfg.Root, ina3221.Options{Clock: cfg.Clock, Period: cfg.SamplePeriod, ModuleRails: cfg.ModuleRails, Log: log})
	if err != nil {
		c.absent, c.err = errors.Is(err, ina3221.ErrNoRails), err
		return c
	}
	var rails []string
	for _, r := range s.Rails() {
		rails = append(rails, r.Label)
	}
	c.counter, c.serve = s, s.Serve
	c.detail = fmt.Sprintf("%s, sampled every %v", strings.Join(rails, "+"), s.Period())
	return c
}
