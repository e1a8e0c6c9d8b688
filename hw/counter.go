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
	// number of fresh readings. Only its movement is meaningful.
	Live uint64
	// Epoch changes when the counter loses continuity (a driver reset, a
	// sampler gap): readings from different epochs cannot be subtracted.
	Epoch uint64
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

// Read sums the parts. Epochs only ever increase, so the sum of the parts'
// epochs changes whenever any part's does.
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
		sum.Live += r.Live
		sum.Epoch += r.Epoch
	}
	if len(errs) > 0 {
		return Reading{}, errors.Join(errs...)
	}
	return sum, nil
}
