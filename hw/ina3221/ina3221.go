// Package ina3221 meters a Jetson through its INA3221 power monitors.
//
// The monitors publish instantaneous voltage and current per rail, not
// energy, so a [Sampler] reads them on a ticker and integrates the power
// (trapezoid rule) into a cumulative energy counter. Two sysfs layouts
// exist: hwmon on JetPack 5 and later
// (/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*/in<N>_label, in<N>_input
// in mV, curr<N>_input in mA) and iio on JetPack 4
// (/sys/bus/i2c/drivers/ina3221x/*/iio:device*/rail_name_<N>,
// in_voltage<N>_input, in_current<N>_input).
//
// The module's input rail (VDD_IN, or POM_5V_IN on older modules) is the
// whole module and is used alone where present. Boards without one (AGX
// Xavier, AGX Orin) are metered as the sum of their connected rails, and
// the figure claims only the domains those rails' names show. Unconnected
// ("NC") channels are skipped.
package ina3221

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/bits"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/internal/sysfs"
)

const (
	// DefaultPeriod is how often the rails are sampled.
	DefaultPeriod = 10 * time.Millisecond
	// windowPeriods is how many sample periods a span must cover for the
	// trapezoid's error at its two ends to be small (at most a period each).
	windowPeriods = 10

	hwmonGlob = "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
	iioGlob   = "sys/bus/i2c/drivers/ina3221x/*/iio:device*"

	// Bounds on a plausible reading; beyond them the sensor or driver is
	// misbehaving and the sample is refused.
	maxMillivolts = 100_000
	maxMilliamps  = 1_000_000
)

// DefaultModuleRails are the labels of a Jetson module's input rail.
var DefaultModuleRails = []string{"VDD_IN", "POM_5V_IN"}

// ErrNoRails means no INA3221 monitor with a connected rail was found.
var ErrNoRails = errors.New("ina3221: no INA3221 power monitor rails")

// ErrStale means the sampler has not produced a fresh sample lately: it is
// not serving, or reads are failing.
var ErrStale = errors.New("ina3221: no fresh sample (is the sampler serving?)")

// Options tunes [Open].
type Options struct {
	Clock hw.Clock
	// Period is the sampling period (DefaultPeriod).
	Period time.Duration
	// ModuleRails are the labels taken as the whole module's input, in
	// order of preference (DefaultModuleRails).
	ModuleRails []string
	Log         *slog.Logger
}

// Rail is one monitored channel.
type Rail struct {
	Label  string    `json:"label"`
	Layout string    `json:"layout"` // "hwmon" or "iio"
	Domain hw.Domain `json:"domain"`

	volt, curr string // attribute paths
}

// Sampler integrates the chosen rails' power into energy. It is a
// [hw.Counter]; its Serve must run for its readings to stay fresh.
type Sampler struct {
	fsys    fs.FS
	rails   []Rail
	domains hw.Domain
	clock   hw.Clock
	period  time.Duration
	window  time.Duration
	log     *slog.Logger
	running atomic.Bool // Serve has been entered
	serving atomic.Bool // Serve's ticker is running

	mu      sync.Mutex
	uj      uint64
	rem     uint64 // energy below 1 µJ, in units of 0.5 fJ (µW·ns)
	lastP   uint64 // µW
	lastT   time.Time
	have    bool
	lastRaw []int64
	fresh   uint64
	epoch   uint64
	failing bool
}

// Open finds the monitors in root (the machine's root directory), chooses
// the rails, and takes a first sample to prove they are readable.
func Open(root fs.FS, opts Options) (*Sampler, error) {
	if opts.Clock == nil {
		opts.Clock = hw.SystemClock{}
	}
	if opts.Period <= 0 {
		opts.Period = DefaultPeriod
	}
	if opts.Period > time.Second {
		return nil, fmt.Errorf("ina3221: sample period %v is too slow to meter serves (at most 1s)", opts.Period)
	}
	if opts.ModuleRails == nil {
		opts.ModuleRails = DefaultModuleRails
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	all, updateInterval, err := discover(root)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, ErrNoRails
	}
	s := &Sampler{fsys: root, clock: opts.Clock, period: opts.Period, log: opts.Log}
	s.rails = choose(all, opts.ModuleRails)
	for _, r := range s.rails {
		s.domains |= r.Domain
	}
	s.window = max(windowPeriods*s.period, 2*updateInterval)
	if err := s.sample(); err != nil {
		return nil, err
	}
	return s, nil
}

// discover lists the connected rails of every monitor, in both layouts,
// and the slowest sensor update interval published.
func discover(root fs.FS) ([]Rail, time.Duration, error) {
	var rails []Rail
	var update time.Duration
	dirs, err := fs.Glob(root, hwmonGlob)
	if err != nil {
		return nil, 0, fmt.Errorf("ina3221: %w", err)
	}
	for _, dir := range dirs {
		for n := 1; n <= 3; n++ { // channels 1-3; 7 is the sum of shunts
			label, err := sysfs.ReadString(root, path.Join(dir, fmt.Sprintf("in%d_label", n)))
			if err != nil || !connected(label) {
				continue
			}
			rails = append(rails, Rail{Label: label, Layout: "hwmon",
				volt: path.Join(dir, fmt.Sprintf("in%d_input", n)),
				curr: path.Join(dir, fmt.Sprintf("curr%d_input", n))})
		}
		if ms, err := sysfs.ReadUint(root, path.Join(dir, "update_interval")); err == nil {
			update = max(update, time.Duration(ms)*time.Millisecond)
		}
	}
	dirs, err = fs.Glob(root, iioGlob)
	if err != nil {
		return nil, 0, fmt.Errorf("ina3221: %w", err)
	}
	for _, dir := range dirs {
		for n := 0; n <= 2; n++ {
			label, err := sysfs.ReadString(root, path.Join(dir, "rail_name_"+strconv.Itoa(n)))
			if err != nil || !connected(label) {
				continue
			}
			rails = append(rails, Rail{Label: label, Layout: "iio",
				volt: path.Join(dir, fmt.Sprintf("in_voltage%d_input", n)),
				curr: path.Join(dir, fmt.Sprintf("in_current%d_input", n))})
		}
	}
	for i := range rails {
		rails[i].Domain = railDomain(rails[i].Label)
	}
	slices.SortStableFunc(rails, func(a, b Rail) int { return strings.Compare(a.Label, b.Label) })
	return rails, update, nil
}

func connected(label string) bool {
	return label != "" && !strings.EqualFold(label, "NC")
}

// railDomain is what a rail's name says it feeds.
func railDomain(label string) hw.Domain {
	u := strings.ToUpper(label)
	var d hw.Domain
	if strings.Contains(u, "CPU") {
		d |= hw.DomainCPU
	}
	if strings.Contains(u, "GPU") {
		d |= hw.DomainGPU
	}
	if strings.Contains(u, "DDR") || strings.Contains(u, "DRAM") || strings.HasPrefix(u, "VDDQ") || strings.Contains(u, "VDDRQ") {
		d |= hw.DomainDRAM
	}
	return d
}

// choose takes the module's input rail alone when there is one, else
// every connected rail.
func choose(all []Rail, module []string) []Rail {
	for _, want := range module {
		for _, r := range all {
			if strings.EqualFold(r.Label, want) {
				r.Domain = hw.DomainModule
				return []Rail{r}
			}
		}
	}
	return all
}

// Rails lists the rails summed.
func (s *Sampler) Rails() []Rail { return slices.Clone(s.rails) }

// Name is "ina3221".
func (s *Sampler) Name() string { return "ina3221" }

// Domains is the module where its input rail is read, else what the
// summed rails' names show.
func (s *Sampler) Domains() hw.Domain { return s.domains }

// MinWindow is ten sample periods, or two sensor updates if those are
// slower: the trapezoid's error at each end of a span is up to a period.
func (s *Sampler) MinWindow() time.Duration { return s.window }

// Period is the sampling period.
func (s *Sampler) Period() time.Duration { return s.period }

// maxGap is the longest pause between samples that is still integrated;
// past it the sampler starts a new epoch rather than guess.
func (s *Sampler) maxGap() time.Duration { return windowPeriods * s.period }

// staleAfter is how old the last sample may be for Read to return it.
func (s *Sampler) staleAfter() time.Duration { return 5 * s.period }

// Serving reports whether Serve's ticker is running, so a caller that
// starts Serve can wait for sampling to begin.
func (s *Sampler) Serving() bool { return s.serving.Load() }

// Serve samples every period until ctx is done. It may be called again
// after it returns; the pause starts a new epoch.
func (s *Sampler) Serve(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("ina3221: sampler already serving")
	}
	defer s.running.Store(false)
	t := s.clock.NewTicker(s.period)
	defer t.Stop()
	s.serving.Store(true)
	defer s.serving.Store(false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := s.sample(); err != nil {
				s.mu.Lock()
				first := !s.failing
				s.failing = true
				s.mu.Unlock()
				if first {
					s.log.Warn("ina3221 sample failed; spans fall back to the estimator until it recovers", "err", err)
				}
			}
		}
	}
}

// sample reads every rail and integrates from the previous sample.
func (s *Sampler) sample() error {
	raw := make([]int64, 0, 2*len(s.rails))
	var p uint64 // µW
	for _, r := range s.rails {
		mv, err := sysfs.ReadInt(s.fsys, r.volt)
		if err != nil {
			return fmt.Errorf("ina3221: rail %s: %w", r.Label, err)
		}
		ma, err := sysfs.ReadInt(s.fsys, r.curr)
		if err != nil {
			return fmt.Errorf("ina3221: rail %s: %w", r.Label, err)
		}
		if mv < 0 || mv > maxMillivolts || ma < -maxMilliamps || ma > maxMilliamps {
			return fmt.Errorf("ina3221: rail %s: implausible reading %d mV %d mA", r.Label, mv, ma)
		}
		if ma > 0 { // reverse current feeds nothing
			p += uint64(mv) * uint64(ma) // mV × mA = µW
		}
		raw = append(raw, mv, ma)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = false
	if s.have {
		switch dt := now.Sub(s.lastT); {
		case dt > s.maxGap():
			s.epoch++
		case dt > 0:
			s.integrate(s.lastP+p, uint64(dt))
		}
	}
	if !slices.Equal(raw, s.lastRaw) {
		s.fresh++
	}
	s.lastRaw = raw
	s.lastP, s.lastT, s.have = p, now, true
	return nil
}

// integrate adds (p0+p1)/2 × dt, with p0+p1 in µW and dt in ns: the
// product is in units of 0.5 fJ, and 2e9 of them are 1 µJ.
func (s *Sampler) integrate(sumP, dtNS uint64) {
	const perUJ = 2_000_000_000
	hi, lo := bits.Mul64(sumP, dtNS)
	lo, carry := bits.Add64(lo, s.rem, 0)
	hi += carry
	// sumP ≤ 2 × 1e5 mV × 1e6 mA per rail and dt ≤ maxGap keep hi far
	// below perUJ, so the quotient fits.
	q, r := bits.Div64(hi, lo, perUJ)
	s.uj += q
	s.rem = r
}

// Read returns the energy integrated up to the last sample. Live counts
// the samples whose raw values differed from the one before: a stuck
// sensor reads the same forever, and its integral would advance anyway.
func (s *Sampler) Read() (hw.Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.have {
		return hw.Reading{}, ErrStale
	}
	if age := s.clock.Now().Sub(s.lastT); age > s.staleAfter() {
		return hw.Reading{}, fmt.Errorf("%w: last sample %v ago", ErrStale, age)
	}
	return hw.Reading{UJ: s.uj, Live: s.fresh, Epoch: s.epoch}, nil
}
