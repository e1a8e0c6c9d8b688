package hw

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Counter is one source of cumulative energy: a RAPL zone set, the NVML
// devices, the IOReport Energy Model channels, a sampled INA3221 shunt.
// Implementations are safe for concurrent use.
type Counter interface {
	// Name is the counter's short name ("rapl", "nvml", ...).
	Name() string
	// Domains says which parts of the machine the counter reads.
	Domains() Domain
	// MinWindow is the shortest span over which the counter's readings are
	// not noise (mesh/1 §3.3).
	MinWindow() time.Duration
	// Read returns the counter's current cumulative reading.
	Read() (Reading, error)
}

// Reading is one snapshot of a [Counter].
type Reading struct {
	// UJ is the energy in microjoules since an arbitrary origin. Within
	// one Epoch it never decreases, so the difference of two readings is
	// the energy between them.
	UJ uint64
	// Live advances when the counter's source demonstrably updates; it is
	// what liveness is judged on (mesh/1 §3.3). For an energy counter it
	// is the energy of the rail that must be seen advancing (for IOReport
	// the CPU rail itself, in its own units); for a sampled sensor, the
	// number of fresh readings. Only its movement is meaningful. A counter
	// that reports Parts leaves it zero.
	Live uint64
	// Parts carries one liveness signal per source that can freeze on its
	// own (each RAPL zone, each GPU), for a counter that sums several:
	// a sum of signals keeps moving while one of its sources is frozen,
	// so each is judged by itself. Nil for a counter of one part, whose
	// signal is Live (see [PartsOf]).
	Parts []PartReading
	// Epoch changes when the counter loses continuity (a driver reset, a
	// sampler gap): readings from different epochs cannot be subtracted.
	Epoch uint64
}

// PartReading is the liveness signal of one part of a counter.
type PartReading struct {
	// Name is stable from read to read and unique across counters:
	// "rapl:package-0", "rapl:dram-0", "nvml:gpu1".
	Name string
	// Domains is what the part's energy covers.
	Domains Domain
	// Live advances when the part demonstrably updates.
	Live uint64
}

// PartsOf returns r's parts: its Parts, or, for a counter of one part,
// that part, named for c and covering c's domains.
func PartsOf(c Counter, r Reading) []PartReading {
	if len(r.Parts) > 0 {
		return r.Parts
	}
	return []PartReading{{Name: c.Name(), Domains: c.Domains(), Live: r.Live}}
}

// Combine joins counters that read different domains (RAPL for the CPU,
// NVML for the GPU) into one whose reading is their sum, whose domains
// are their union and whose window is the largest of theirs: a span must
// be long enough for every part of its figure.
func Combine(counters ...Counter) Counter {
	if len(counters) == 1 {
		return counters[0]
	}
	return combined(counters)
}

type combined []Counter

func (c combined) Name() string {
	names := make([]string, len(c))
	for i, x := range c {
		names[i] = x.Name()
	}
	return strings.Join(names, "+")
}

func (c combined) Domains() Domain {
	var d Domain
	for _, x := range c {
		d |= x.Domains()
	}
	return d
}

func (c combined) MinWindow() time.Duration {
	var w time.Duration
	for _, x := range c {
		w = max(w, x.MinWindow())
	}
	return w
}

// Read sums the parts' energy and lists every part's own liveness signal:
// adding the signals up would let one frozen part hide behind another
// that still advances. Epochs only ever increase, so the sum of the
// parts' epochs changes whenever any part's does.
func (c combined) Read() (Reading, error) {
	var sum Reading
	var errs []error
	for _, x := range c {
		r, err := x.Read()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", x.Name(), err))
			continue
		}
		sum.UJ += r.UJ
		sum.Parts = append(sum.Parts, PartsOf(x, r)...)
		sum.Epoch += r.Epoch
	}
	if len(errs) > 0 {
		return Reading{}, errors.Join(errs...)
	}
	return sum, nil
}
