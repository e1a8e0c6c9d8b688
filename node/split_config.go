package node

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ByteSize is a size in bytes, written in TOML as an integer or as a
// string with a binary or decimal unit ("6GiB", "512MB", "1048576").
type ByteSize int64

// UnmarshalTOML reads an integer or a string with a unit.
func (b *ByteSize) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*b = ByteSize(v)
		return nil
	case string:
		n, err := ParseByteSize(v)
		*b = n
		return err
	}
	return fmt.Errorf("size %v: want bytes, or a string such as \"6GiB\"", v)
}

// MarshalText writes the size in bytes.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(strconv.FormatInt(int64(b), 10)), nil }

// ParseByteSize reads "6GiB", "512MB", "1.5GiB", "4096" or "4096B".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: want bytes, or a number with a unit such as \"6GiB\"", s)
	}
	return ByteSize(f * mult), nil
}

// StagesConfig is the [stages] table: how this node takes part in
// models split across the mesh (docs/mesh.md, "Split models").
type StagesConfig struct {
	// Serve is whether this node runs stages of its peers' split models,
	// within MemoryBudget (default true).
	Serve *bool `toml:"serve"`
	// Headroom is kept free on every stage's node beyond its weights and
	// KV (default DefaultStageHeadroom).
	Headroom ByteSize `toml:"headroom"`
	// MaxRTT is the highest RTT a peer may have to run a stage (default
	// DefaultStageMaxRTT).
	MaxRTT Duration `toml:"max_rtt"`
}

// Split settings of a [[model]].
const (
	// SplitAuto splits the model across peers only when it fits no
	// single node (this one first).
	SplitAuto = "auto"
	// SplitAlways splits it even when it would fit this node.
	SplitAlways = "always"
	// SplitNever serves it only whole, here.
	SplitNever = "never"
)

// Defaults and bounds of split models.
const (
	DefaultStageHeadroom = 64 << 20
	DefaultStageMaxRTT   = 50 * time.Millisecond
	MaxStageMaxRTT       = 10 * time.Second
	// MaxMemoryBudget bounds memory_budget (and the headroom): 1 PiB is
	// beyond any machine, so a larger figure is a typo.
	MaxMemoryBudget = 1 << 50
	// MinMemoryBudget is the least non-zero budget: below it no stage of
	// any model fits, and the figure is a mistake (bytes for MiB).
	MinMemoryBudget = 1 << 20
	MaxPins         = 64
)

// StageServe is whether the node serves stages to its peers.
func (s StagesConfig) StageServe() bool { return s.Serve == nil || *s.Serve }

// PinConfig is a pinned range of a split model: the blocks [Lo, Hi) on
// the node Node ("self" for this one).
type PinConfig struct {
	Node   string
	Lo, Hi int
}

// ParsePin reads "NODE:LO-HI": NODE is a node's endpoint id (hex) or
// "self", the range half-open.
func ParsePin(s string) (PinConfig, error) {
	node, r, ok := strings.Cut(s, ":")
	lo, hi, ok2 := strings.Cut(r, "-")
	if !ok || !ok2 {
		return PinConfig{}, fmt.Errorf("pin %q: want NODE:LO-HI (NODE: an endpoint id or self)", s)
	}
	if node != "self" {
		if b, err := hex.DecodeString(node); err != nil || len(b) != 32 {
			return PinConfig{}, fmt.Errorf("pin %q: %q is not an endpoint id (64 hex digits) or self", s, node)
		}
		node = strings.ToLower(node)
	}
	l, err1 := strconv.Atoi(lo)
	h, err2 := strconv.Atoi(hi)
	if err := errors.Join(err1, err2); err != nil || l < 0 || h <= l || h > 1<<16 {
		return PinConfig{}, fmt.Errorf("pin %q: want a range LO-HI with 0 ≤ LO < HI", s)
	}
	return PinConfig{Node: node, Lo: l, Hi: h}, nil
}

// checkSplit checks the split settings against their bounds.
func (c *Config) checkSplit() []error {
	var errs []error
	if b := c.MemoryBudget; b < 0 || b > MaxMemoryBudget || b > 0 && b < MinMemoryBudget {
		errs = append(errs, fmt.Errorf("memory_budget %d: want 0 (no budget) or %d…%d bytes", b, MinMemoryBudget, int64(MaxMemoryBudget)))
	}
	if h := c.Stages.Headroom; h < 0 || h > MaxMemoryBudget {
		errs = append(errs, fmt.Errorf("stages.headroom %d: want 0…%d bytes", h, int64(MaxMemoryBudget)))
	}
	if d := c.Stages.MaxRTT.Duration; d < 0 || d > MaxStageMaxRTT {
		errs = append(errs, fmt.Errorf("stages.max_rtt %v: want 0…%v", d, MaxStageMaxRTT))
	}
	for i, m := range c.Model {
		switch m.Split {
		case "", SplitAuto, SplitAlways, SplitNever:
		default:
			errs = append(errs, fmt.Errorf("model %d: split %q: want auto, always or never", i+1, m.Split))
		}
		if len(m.Pins) > MaxPins {
			errs = append(errs, fmt.Errorf("model %d: %d pins, want at most %d", i+1, len(m.Pins), MaxPins))
		}
		for _, p := range m.Pins {
			if _, err := ParsePin(p); err != nil {
				errs = append(errs, fmt.Errorf("model %d: %w", i+1, err))
			}
		}
		if len(m.Pins) > 0 && m.Split == SplitNever {
			errs = append(errs, fmt.Errorf("model %d: pins on a model with split = \"never\"", i+1))
		}
	}
	return errs
}

// resolveSplit fills the split defaults.
func (c *Config) resolveSplit() {
	if c.Stages.Headroom == 0 {
		c.Stages.Headroom = DefaultStageHeadroom
	}
	if c.Stages.MaxRTT.Duration == 0 {
		c.Stages.MaxRTT.Duration = DefaultStageMaxRTT
	}
	for i := range c.Model {
		if c.Model[i].Split == "" {
			c.Model[i].Split = SplitAuto
		}
	}
}
