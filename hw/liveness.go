package hw

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Liveness rule constants (mesh/1 §3.3): a counter is live when it
// advances in at least liveOf of every liveRun consecutive sample
// intervals, over at least liveRun intervals and at least
// DefaultProbeDuration, while the probe burns CPU.
const (
	liveRun = 5
	liveOf  = 4

	// DefaultProbeDuration is the shortest busy stretch a probe watches.
	DefaultProbeDuration = 300 * time.Millisecond
	// DefaultProbeIdle is the idle stretch measured before the burn.
	DefaultProbeIdle = 100 * time.Millisecond
)

// ProbeConfig tunes [Probe]. The zero value probes with the system clock
// and [BurnCPU].
type ProbeConfig struct {
	Clock Clock
	// Burn loads the CPU until its context is done. Tests pass a no-op.
	Burn func(ctx context.Context)
	// Duration is the shortest busy stretch watched (DefaultProbeDuration).
	Duration time.Duration
	// Idle is the stretch measured before the burn (DefaultProbeIdle).
	Idle time.Duration
}

// Liveness is what a probe saw of one counter.
type Liveness struct {
	Counter string `json:"counter"`
	Live    bool   `json:"live"`
	// Reason says why the counter is or is not live, for logs and the
	// meters report.
	Reason string `json:"reason"`
	// Window is the sample interval used: the counter's minimum window.
	Window time.Duration `json:"window_ns"`
	// Intervals and Advanced count the busy sample intervals and those in
	// which the counter moved.
	Intervals int `json:"intervals"`
	Advanced  int `json:"advanced"`
	// IdleWatts and BusyWatts are the mean power over the idle stretch and
	// over the burn, where the counter allowed measuring them.
	IdleWatts float64 `json:"idle_watts"`
	BusyWatts float64 `json:"busy_watts"`
	// Parts is each part's own verdict (see [Reading.Parts]); the counter
	// is live only when every part is. Advanced above counts the
	// intervals in which every part moved.
	Parts []PartLiveness `json:"parts,omitempty"`
}

// PartLiveness is what a probe saw of one part of a counter.
type PartLiveness struct {
	Name    string `json:"name"`
	Domains Domain `json:"domains"`
	Live    bool   `json:"live"`
	Reason  string `json:"reason"`
	// Advanced counts the busy intervals in which the part moved.
	Advanced int `json:"advanced"`
}

// Probe watches counters advance while the CPU is burned, and grades each
// live or not under the mesh/1 §3.3 rule. Each counter is sampled every
// MinWindow (at least 1 ms) for at least five intervals and at least
// cfg.Duration. All counters are watched in one pass, from one goroutine,
// so a probe costs one burn however many counters there are.
func Probe(ctx context.Context, counters []Counter, cfg ProbeConfig) []Liveness {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Burn == nil {
		cfg.Burn = BurnCPU
	}
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultProbeDuration
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultProbeIdle
	}
	clk := cfg.Clock
	ps := make([]*probeState, len(counters))
	for i, c := range counters {
		interval := max(c.MinWindow(), time.Millisecond)
		n := max(liveRun, int((cfg.Duration+interval-1)/interval))
		ps[i] = &probeState{c: c, interval: interval, n: n}
	}

	// Idle stretch: the counter's resting power, and a first check that it
	// reads at all.
	for _, p := range ps {
		p.read(clk)
	}
	if err := clk.Sleep(ctx, cfg.Idle); err != nil {
		return cancelled(ps, err)
	}
	for _, p := range ps {
		if first := p.last; p.read(clk) {
			p.idleWatts = watts(first, p.last, p.lastT.Sub(p.firstT))
		}
	}

	burnCtx, stop := context.WithCancel(ctx)
	burned := make(chan struct{})
	go func() { defer close(burned); cfg.Burn(burnCtx) }()
	defer func() { stop(); <-burned }()

	for _, p := range ps {
		if p.read(clk) {
			p.busyStart, p.busyT = p.last, p.lastT
			p.next = p.lastT.Add(p.interval)
		}
	}
	for {
		var due time.Time
		for _, p := range ps {
			if !p.done() && (due.IsZero() || p.next.Before(due)) {
				due = p.next
			}
		}
		if due.IsZero() {
			break
		}
		if wait := due.Sub(clk.Now()); wait > 0 {
			if err := clk.Sleep(ctx, wait); err != nil {
				return cancelled(ps, err)
			}
		}
		now := clk.Now()
		for _, p := range ps {
			if p.done() || p.next.After(now) {
				continue
			}
			prev := p.parts
			if !p.read(clk) {
				continue
			}
			for i, part := range p.parts {
				p.advanced[i] = append(p.advanced[i], part.Live > prev[i].Live)
			}
			p.intervals++
			// Drift rather than catch up: a burst of back-to-back reads
			// after a scheduling delay would look like a frozen counter.
			p.next = p.lastT.Add(p.interval)
		}
	}

	out := make([]Liveness, len(ps))
	for i, p := range ps {
		out[i] = p.judge()
	}
	return out
}

type probeState struct {
	c        Counter
	interval time.Duration
	n        int

	first, last   Reading
	parts         []PartReading // of the last reading
	firstT, lastT time.Time
	reads         int
	busyStart     Reading
	busyT         time.Time
	next          time.Time
	intervals     int
	advanced      [][]bool // per part, per busy interval
	idleWatts     float64
	fail          string
}

func (p *probeState) done() bool { return p.fail != "" || p.intervals >= p.n }

// read takes one reading and checks continuity; it reports whether the
// counter is still in the running.
func (p *probeState) read(clk Clock) bool {
	if p.fail != "" {
		return false
	}
	r, err := p.c.Read()
	t := clk.Now()
	var parts []PartReading
	if err == nil {
		parts = PartsOf(p.c, r)
	}
	switch {
	case err != nil:
		p.fail = fmt.Sprintf("read failed: %v", err)
	case p.reads > 0 && r.Epoch != p.last.Epoch:
		p.fail = "lost continuity during the probe (counter reset or sampler gap)"
	case p.reads > 0 && !sameParts(parts, p.parts):
		p.fail = "its parts changed during the probe"
	case p.reads > 0 && (backwards(parts, p.parts) || r.UJ < p.last.UJ):
		p.fail = "went backwards during the probe"
	}
	if p.fail != "" {
		return false
	}
	if p.reads == 0 {
		p.first, p.firstT = r, t
		p.advanced = make([][]bool, len(parts))
	}
	p.reads++
	p.last, p.parts, p.lastT = r, parts, t
	return true
}

func sameParts(a, b []PartReading) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

func backwards(cur, prev []PartReading) bool {
	for i := range cur {
		if cur[i].Live < prev[i].Live {
			return true
		}
	}
	return false
}

func (p *probeState) judge() Liveness {
	l := Liveness{
		Counter:   p.c.Name(),
		Window:    p.interval,
		Intervals: p.intervals,
		IdleWatts: p.idleWatts,
	}
	for k := range p.intervals {
		all := true
		for _, adv := range p.advanced {
			all = all && adv[k]
		}
		if all {
			l.Advanced++
		}
	}
	for i, part := range p.parts {
		l.Parts = append(l.Parts, PartLiveness{Name: part.Name, Domains: part.Domains, Reason: p.fail})
		if p.fail == "" {
			l.Parts[i].Live, l.Parts[i].Reason, l.Parts[i].Advanced = judgeRun(p.advanced[i], p.interval)
		}
	}
	if p.fail != "" {
		l.Reason = p.fail
		return l
	}
	l.BusyWatts = watts(p.busyStart, p.last, p.lastT.Sub(p.busyT))
	switch {
	case len(l.Parts) == 1 && !l.Parts[0].Live:
		l.Reason = l.Parts[0].Reason
	case len(l.Parts) > 1 && !allLive(l.Parts):
		var dead []string
		for _, part := range l.Parts {
			if !part.Live {
				dead = append(dead, part.Name+" "+part.Reason)
			}
		}
		l.Reason = "not every part is live: " + strings.Join(dead, "; ")
	case p.last.UJ == p.busyStart.UJ:
		l.Reason = "its updates carried no energy under load"
	default:
		l.Live = true
		l.Reason = fmt.Sprintf("advanced in %d of %d intervals of %v under load", l.Advanced, l.Intervals, p.interval)
		if len(l.Parts) > 1 {
			l.Reason = fmt.Sprintf("each of its %d parts live; all advanced together in %d of %d intervals of %v under load",
				len(l.Parts), l.Advanced, l.Intervals, p.interval)
		}
	}
	return l
}

func allLive(parts []PartLiveness) bool {
	for _, p := range parts {
		if !p.Live {
			return false
		}
	}
	return true
}

// judgeRun applies the liveness rule to one part's busy intervals.
func judgeRun(advanced []bool, interval time.Duration) (live bool, reason string, n int) {
	for _, a := range advanced {
		if a {
			n++
		}
	}
	worst, at := liveRun, 0
	for i := 0; i+liveRun <= len(advanced); i++ {
		k := 0
		for _, a := range advanced[i : i+liveRun] {
			if a {
				k++
			}
		}
		if k < worst {
			worst, at = k, i
		}
	}
	switch {
	case n == 0:
		return false, fmt.Sprintf("frozen: did not advance in any of %d intervals of %v under load", len(advanced), interval), n
	case worst < liveOf:
		return false, fmt.Sprintf("lumpy: advanced in only %d of intervals %d-%d (%d of %d overall, need %d of every %d)",
			worst, at+1, at+liveRun, n, len(advanced), liveOf, liveRun), n
	}
	return true, fmt.Sprintf("advanced in %d of %d intervals of %v under load", n, len(advanced), interval), n
}

func cancelled(ps []*probeState, err error) []Liveness {
	out := make([]Liveness, len(ps))
	for i, p := range ps {
		out[i] = Liveness{Counter: p.c.Name(), Window: p.interval, Reason: fmt.Sprintf("probe cancelled: %v", err)}
	}
	return out
}

// watts is the mean power between two readings of one epoch.
func watts(a, b Reading, d time.Duration) float64 {
	if d <= 0 || a.Epoch != b.Epoch || b.UJ < a.UJ {
		return 0
	}
	return float64(b.UJ-a.UJ) / 1e6 / d.Seconds()
}

// BurnCPU keeps all but one of the machine's CPUs busy until ctx is done,
// leaving one for the probe's own sampling.
func BurnCPU(ctx context.Context) {
	var wg sync.WaitGroup
	for range max(1, runtime.NumCPU()-1) {
		wg.Go(func() { spin(ctx.Done()) })
	}
	wg.Wait()
}

// burnSink keeps the burn loop's result observable so the compiler cannot
// drop the work.
var burnSink atomic.Uint64

func spin(done <-chan struct{}) {
	x := 1.0
	for {
		select {
		case <-done:
			burnSink.Add(math.Float64bits(x))
			return
		default:
		}
		for range 1 << 14 {
			x = x*1.0000001 + 1e-9
		}
	}
}
