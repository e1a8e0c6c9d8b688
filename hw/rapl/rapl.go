// Package rapl reads Intel and AMD RAPL energy counters through the Linux
// powercap sysfs interface (/sys/class/powercap/intel-rapl:N[:M]).
//
// Zones are chosen so that nothing is counted twice: the platform zone
// (psys) alone where it exists, otherwise every package zone plus the DRAM
// zones where present; core and uncore sub-zones lie inside their package
// and are skipped, as are intel-rapl-mmio zones that duplicate an MSR zone.
// Each zone's 32-bit hardware counter wraps at max_energy_range_uj; the
// counter extends it to 64 bits, which needs a read at least once per wrap
// period (minutes at full load), and starts a new epoch when reads are
// further apart than that.
package rapl

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/internal/sysfs"
)

// Dir is where the kernel publishes powercap zones, relative to the
// machine's root.
const Dir = "sys/class/powercap"

// MinWindow is RAPL's minimum window: the counters update about every
// millisecond, so 10 ms spans are well resolved (mesh/1 §3.3).
const MinWindow = 10 * time.Millisecond

// maxWatts bounds a zone's draw for deciding when a wrap could have gone
// unseen: a zone cannot spend its whole range faster than this.
const maxWatts = 1000

// ErrNoZones means the powercap tree has no RAPL zone to read.
var ErrNoZones = errors.New("rapl: no RAPL zones")

// ErrUnreadable means the zones exist but energy_uj cannot be read: since
// CVE-2020-8694 (Platypus) it is readable by root only.
var ErrUnreadable = errors.New("rapl: energy_uj is readable by root only (CVE-2020-8694); run as root or grant read access with a udev rule")

// Zone is one powercap zone the counter reads.
type Zone struct {
	// ID is the sysfs name, e.g. "intel-rapl:0" or "intel-rapl:0:2".
	ID string `json:"id"`
	// Name is the zone's name file: "package-0", "dram", "psys".
	Name string `json:"name"`
	// Domain is what the zone covers.
	Domain hw.Domain `json:"domain"`
	// RangeUJ is max_energy_range_uj, where the counter wraps.
	RangeUJ uint64 `json:"range_uj"`
	// Part is the zone's name as a part of the counter's readings, judged
	// live by itself: "rapl:package-0", "rapl:dram-0", "rapl:psys".
	Part string `json:"part"`

	dir  string
	mmio bool
	sub  bool // a sub-zone of a package (core, uncore, dram)
	// parent is the parent zone's name for sub-zones, so that package-1's
	// dram is not mistaken for package-0's.
	parent string
}

// Counter is the RAPL [hw.Counter] over the chosen zones.
type Counter struct {
	fsys    fs.FS
	zones   []Zone
	clock   hw.Clock
	domains hw.Domain
	maxGap  time.Duration

	mu    sync.Mutex
	last  []uint64
	total []uint64 // extended energy per zone
	lastT time.Time
	epoch uint64
}

// Open discovers the zones under [Dir] in root (the machine's root
// directory, os.DirFS("/") in production), chooses them, and takes a first
// reading to prove they are readable.
func Open(root fs.FS, clock hw.Clock) (*Counter, error) {
	if clock == nil {
		clock = hw.SystemClock{}
	}
	all, err := discover(root)
	if err != nil {
		return nil, err
	}
	zones := choose(all)
	if len(zones) == 0 {
		return nil, fmt.Errorf("%w under /%s (found %s)", ErrNoZones, Dir, names(all))
	}
	nameParts(zones)
	c := &Counter{fsys: root, zones: zones, clock: clock, last: make([]uint64, len(zones)), total: make([]uint64, len(zones))}
	minRange := uint64(0)
	for _, z := range zones {
		c.domains |= z.Domain
		if minRange == 0 || z.RangeUJ < minRange {
			minRange = z.RangeUJ
		}
	}
	c.maxGap = time.Duration(float64(minRange) / maxWatts * float64(time.Microsecond))
	for i, z := range zones {
		v, err := sysfs.ReadUint(root, path.Join(z.dir, "energy_uj"))
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return nil, fmt.Errorf("%w: %w", ErrUnreadable, err)
			}
			return nil, fmt.Errorf("rapl: zone %s: %w", z.ID, err)
		}
		c.last[i] = v
	}
	c.lastT = clock.Now()
	return c, nil
}

// Zones lists the zones the counter reads.
func (c *Counter) Zones() []Zone { return slices.Clone(c.zones) }

// Name is "rapl".
func (c *Counter) Name() string { return "rapl" }

// Domains is the union of the chosen zones' domains.
func (c *Counter) Domains() hw.Domain { return c.domains }

// MinWindow is [MinWindow].
func (c *Counter) MinWindow() time.Duration { return MinWindow }

// MaxGap is the longest time between reads over which no wrap can go
// unseen; the meters keep reads closer than this.
func (c *Counter) MaxGap() time.Duration { return c.maxGap }

// Read reads every zone and extends each past its wrap. Each zone is a
// part whose liveness signal is its own energy: the DRAM zones are in the
// figure too, so they must be seen advancing like the packages.
func (c *Counter) Read() (hw.Reading, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	raw := make([]uint64, len(c.zones))
	for i, z := range c.zones {
		v, err := sysfs.ReadUint(c.fsys, path.Join(z.dir, "energy_uj"))
		if err != nil {
			return hw.Reading{}, fmt.Errorf("rapl: zone %s: %w", z.ID, err)
		}
		if v > z.RangeUJ {
			return hw.Reading{}, fmt.Errorf("rapl: zone %s: energy_uj %d beyond max_energy_range_uj %d", z.ID, v, z.RangeUJ)
		}
		raw[i] = v
	}
	now := c.clock.Now()
	if now.Sub(c.lastT) > c.maxGap {
		// A whole wrap could have passed unseen: the extension is no
		// longer trustworthy across this gap.
		c.epoch++
	}
	r := hw.Reading{Parts: make([]hw.PartReading, len(c.zones))}
	for i, z := range c.zones {
		c.total[i] += delta(c.last[i], raw[i], z.RangeUJ)
		c.last[i] = raw[i]
		r.UJ += c.total[i]
		r.Parts[i] = hw.PartReading{Name: z.Part, Domains: z.Domain, Live: c.total[i]}
	}
	c.lastT = now
	r.Epoch = c.epoch
	return r, nil
}

// delta is the energy between two raw readings of a counter that wraps
// from rangeUJ back to zero, assuming at most one wrap.
func delta(prev, cur, rangeUJ uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	return rangeUJ - prev + cur
}

// discover lists every RAPL zone under Dir.
func discover(root fs.FS) ([]Zone, error) {
	entries, err := fs.ReadDir(root, Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: /%s does not exist (not Linux, or no powercap driver)", ErrNoZones, Dir)
		}
		return nil, fmt.Errorf("rapl: %w", err)
	}
	var zones []Zone
	for _, e := range entries {
		id := e.Name()
		prefix, rest, ok := strings.Cut(id, ":")
		if !ok || (prefix != "intel-rapl" && prefix != "intel-rapl-mmio") {
			continue // the control-type directories, other powercap drivers
		}
		dir := path.Join(Dir, id)
		name, err := sysfs.ReadString(root, path.Join(dir, "name"))
		if err != nil {
			return nil, fmt.Errorf("rapl: zone %s: %w", id, err)
		}
		rng, err := sysfs.ReadUint(root, path.Join(dir, "max_energy_range_uj"))
		if err != nil {
			return nil, fmt.Errorf("rapl: zone %s: %w", id, err)
		}
		if rng == 0 {
			return nil, fmt.Errorf("rapl: zone %s: max_energy_range_uj is zero", id)
		}
		z := Zone{ID: id, Name: name, RangeUJ: rng, dir: dir, mmio: prefix == "intel-rapl-mmio", sub: strings.Contains(rest, ":")}
		if z.sub {
			parentID := prefix + ":" + rest[:strings.IndexByte(rest, ':')]
			if p, err := sysfs.ReadString(root, path.Join(Dir, parentID, "name")); err == nil {
				z.parent = p
			}
		}
		z.Domain = domainOf(z)
		zones = append(zones, z)
	}
	slices.SortFunc(zones, func(a, b Zone) int { return strings.Compare(a.ID, b.ID) })
	return zones, nil
}

func domainOf(z Zone) hw.Domain {
	switch {
	case z.Name == "psys":
		return hw.DomainCPU | hw.DomainDRAM // the platform: SoC and memory, not a discrete GPU
	case strings.HasPrefix(z.Name, "package"):
		return hw.DomainCPU
	case z.Name == "dram":
		return hw.DomainDRAM
	}
	return 0 // core, uncore: inside a package
}

// choose picks the zones to sum: psys alone if present, else packages and
// DRAM. MMIO zones are dropped when an MSR zone has the same identity.
func choose(all []Zone) []Zone {
	key := func(z Zone) string { return z.parent + "/" + z.Name }
	msr := map[string]bool{}
	for _, z := range all {
		if !z.mmio {
			msr[key(z)] = true
		}
	}
	var psys, rest []Zone
	for _, z := range all {
		if z.mmio && msr[key(z)] {
			continue
		}
		switch {
		case z.Name == "psys" && !z.sub:
			psys = append(psys, z)
		case z.Domain == hw.DomainCPU && !z.sub, z.Domain == hw.DomainDRAM:
			rest = append(rest, z)
		}
	}
	if len(psys) > 0 {
		return psys[:1]
	}
	return rest
}

// nameParts names each chosen zone as a part: package-N and psys by
// their own names, a DRAM sub-zone for its package's number (two sockets
// each have a zone named "dram"), and the sysfs id where a name repeats.
func nameParts(zs []Zone) {
	seen := map[string]bool{}
	for i := range zs {
		z := &zs[i]
		name := z.Name
		if n, ok := strings.CutPrefix(z.parent, "package-"); ok && z.Name == "dram" {
			name = "dram-" + n
		}
		if seen[name] {
			name = z.ID
		}
		seen[name] = true
		z.Part = "rapl:" + name
	}
}

func names(zs []Zone) string {
	if len(zs) == 0 {
		return "none"
	}
	var s []string
	for _, z := range zs {
		s = append(s, z.ID+"="+z.Name)
	}
	return strings.Join(s, ", ")
}
