// Package ioreport reads Apple Silicon energy from IOReport's "Energy
// Model" group (libIOReport.dylib, opened at run time with purego).
//
// A subscription to the group yields samples; the delta of two samples
// gives each channel's energy over the interval, in the unit its label
// names (mJ, uJ or nJ, differing between channels of one chip). Only the
// aggregate channels are summed, so that nothing is counted twice: the CPU
// roll-up ("CPU Energy", or "DIE_n_CPU Energy" per die on an Ultra), the
// GPU ("GPU Energy"), the Neural Engine ("ANE", "ANE0", "ANE0_1") and
// memory ("DRAM", "DRAM0"); per-cluster, per-core and SRAM channels lie
// inside those and are skipped.
//
// The CoreFoundation glue is darwin-only and thin; the arithmetic here is
// portable and tested on recorded samples.
package ioreport

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
)

// Group is the IOReport channel group the counter subscribes to.
const Group = "Energy Model"

// MinWindow is IOReport's minimum window (mesh/1 §3.3).
const MinWindow = 10 * time.Millisecond

// ErrUnsupported means IOReport is not available on this system.
var ErrUnsupported = errors.New("ioreport: IOReport energy needs macOS on Apple Silicon")

// Channel is one channel of one delta sample.
type Channel struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	Unit  string `json:"unit"`
	Value int64  `json:"value"`
}

// Rail is a part of the SoC whose energy a channel reports.
type Rail uint8

// The rails summed.
const (
	RailCPU Rail = iota
	RailGPU
	RailANE
	RailDRAM
	numRails
)

var railDomains = [numRails]hw.Domain{hw.DomainCPU, hw.DomainGPU, hw.DomainANE, hw.DomainDRAM}

func (r Rail) String() string {
	switch r {
	case RailCPU:
		return "cpu"
	case RailGPU:
		return "gpu"
	case RailANE:
		return "ane"
	case RailDRAM:
		return "dram"
	}
	return fmt.Sprintf("Rail(%d)", uint8(r))
}

// Classify says which rail an Energy Model channel is the aggregate of, if
// any. gpuRollup says whether the chip publishes a "GPU Energy" roll-up;
// where it does not, the top-level GPU channels ("GPU0", "GPU0_1") are
// summed instead.
func Classify(name string, gpuRollup bool) (Rail, bool) {
	switch {
	case strings.HasSuffix(name, "CPU Energy"):
		return RailCPU, true
	case name == "GPU Energy":
		return RailGPU, true
	case !gpuRollup && name != "GPU" && topLevel(name, "GPU"):
		return RailGPU, true
	case topLevel(name, "ANE"):
		return RailANE, true
	case topLevel(name, "DRAM"):
		return RailDRAM, true
	}
	return 0, false
}

// topLevel reports whether name is prefix, prefix<n> or prefix<n>_<m>: a
// block's own channel rather than a sub-channel such as "ANE0_SRAM".
func topLevel(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	n, m, two := strings.Cut(rest, "_")
	return digits(n) && (!two || digits(m))
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Nanojoules is how many nanojoules one unit of a channel's label is.
func Nanojoules(unit string) (uint64, error) {
	switch strings.TrimSpace(unit) {
	case "mJ":
		return 1_000_000, nil
	case "uJ", "µJ", "μJ": // U+00B5 and U+03BC both occur as micro signs
		return 1_000, nil
	case "nJ":
		return 1, nil
	}
	return 0, fmt.Errorf("ioreport: unknown energy unit %q", unit)
}

// Source yields, on each call, every subscribed channel's energy since the
// previous call. The darwin glue is one; tests replay recorded samples.
type Source interface {
	Delta() ([]Channel, error)
	Close() error
}

// Counter is the IOReport [hw.Counter].
type Counter struct {
	src       Source
	gpuRollup bool
	domains   hw.Domain
	channels  map[string]Rail // the aggregate channels at subscription

	mu     sync.Mutex
	totals [numRails]uint64 // nanojoules
	epoch  uint64
}

// NewCounter takes a first delta from src to learn the chip's channels.
// It fails when the group has no CPU roll-up, the rail liveness is judged
// on.
func NewCounter(src Source) (*Counter, error) {
	chans, err := src.Delta()
	if err != nil {
		return nil, err
	}
	c := &Counter{src: src, channels: map[string]Rail{}}
	for _, ch := range chans {
		if ch.Group == Group && ch.Name == "GPU Energy" {
			c.gpuRollup = true
		}
	}
	for _, ch := range chans {
		if ch.Group != Group {
			continue
		}
		rail, ok := Classify(ch.Name, c.gpuRollup)
		if !ok {
			continue
		}
		if _, err := Nanojoules(ch.Unit); err != nil {
			return nil, fmt.Errorf("ioreport: channel %q: %w", ch.Name, err)
		}
		c.channels[ch.Name] = rail
		c.domains |= railDomains[rail]
	}
	if c.domains&hw.DomainCPU == 0 {
		return nil, fmt.Errorf("ioreport: no CPU energy channel in the %q group (%d channels)", Group, len(chans))
	}
	return c, nil
}

// Name is "ioreport".
func (c *Counter) Name() string { return "ioreport" }

// Domains is the rails the chip publishes.
func (c *Counter) Domains() hw.Domain { return c.domains }

// MinWindow is [MinWindow].
func (c *Counter) MinWindow() time.Duration { return MinWindow }

// Channels lists the aggregate channels summed, by rail.
func (c *Counter) Channels() map[string]Rail {
	out := make(map[string]Rail, len(c.channels))
	for k, v := range c.channels {
		out[k] = v
	}
	return out
}

// Read takes a delta and adds it to the running totals. Live is the CPU
// rail alone, in nanojoules: mesh/1 §3.3 asks for the CPU rail itself to
// be seen advancing.
func (c *Counter) Read() (hw.Reading, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	chans, err := c.src.Delta()
	if err != nil {
		return hw.Reading{}, err
	}
	add, err := c.sum(chans)
	if err != nil {
		// The interval is lost; so is continuity across it.
		c.epoch++
		return hw.Reading{}, err
	}
	for i := range c.totals {
		c.totals[i] += add[i]
	}
	var nj uint64
	for _, t := range c.totals {
		nj += t
	}
	return hw.Reading{UJ: nj / 1000, Live: c.totals[RailCPU], Epoch: c.epoch}, nil
}

// sum converts one delta to nanojoules per rail, insisting that every
// subscribed aggregate channel is present exactly once and non-negative.
func (c *Counter) sum(chans []Channel) ([numRails]uint64, error) {
	var add [numRails]uint64
	seen := make(map[string]bool, len(c.channels))
	for _, ch := range chans {
		if ch.Group != Group {
			continue
		}
		rail, ok := c.channels[ch.Name]
		if !ok {
			continue
		}
		if seen[ch.Name] {
			return add, fmt.Errorf("ioreport: channel %q twice in one sample", ch.Name)
		}
		seen[ch.Name] = true
		if ch.Value < 0 {
			return add, fmt.Errorf("ioreport: channel %q went backwards (%d %s)", ch.Name, ch.Value, ch.Unit)
		}
		mult, err := Nanojoules(ch.Unit)
		if err != nil {
			return add, fmt.Errorf("ioreport: channel %q: %w", ch.Name, err)
		}
		v := uint64(ch.Value)
		if v > math.MaxUint64/mult {
			return add, fmt.Errorf("ioreport: channel %q: %d %s overflows", ch.Name, ch.Value, ch.Unit)
		}
		add[rail] += v * mult
	}
	if len(seen) != len(c.channels) {
		return add, fmt.Errorf("ioreport: %d of %d energy channels missing from the sample", len(c.channels)-len(seen), len(c.channels))
	}
	return add, nil
}

// Close releases the subscription.
func (c *Counter) Close() error { return c.src.Close() }
