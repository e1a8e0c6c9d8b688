// Package stageplan places a model's layers on mesh nodes: which node
// runs which contiguous range of blocks when the model is split into
// stages (package stage runs the plan).
//
// It is pure and deterministic: Make decides from the figures it is
// given (the model's bytes per block, its embeddings and head, the KV
// bytes per block for the context; each host's free memory, RTT and
// memory bandwidth) and from nothing else, and the same inputs give the
// same plan. The rules, in order:
//
//   - A model that fits this node alone (weights + KV + headroom within
//     its free memory) is not split, unless the owner forces a split or
//     pins ranges.
//   - Stage 0 is this node: it holds the embeddings and serves the
//     requests. A peer whose RTT is above Options.MaxRTT is never a stage.
//   - Owner pins fix a host's range; the other ranges are fitted by free
//     memory, each host in turn taking as many blocks as fit it.
//   - Every stage is a range the model can be loaded as (Model.Check): a
//     cut the model forbids moves back to the nearest allowed one, and a
//     model that cannot be split at all, or pins that cross a forbidden
//     cut, are refused with the model's reason (ErrUnsplittable,
//     ErrPin).
//   - Among the placements that fit, the fewest stages win; then the
//     lower total RTT; then the higher slowest memory bandwidth among the
//     peers; then the
//     host ids in order, so that ties always fall the same way.
package stageplan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Model is what a model costs to place, in bytes.
type Model struct {
	// Layers is the weight bytes of each block, in order.
	Layers []int64
	// Embed is the token embeddings, held by the first stage; Head the
	// output norm and head (the embeddings again when they are tied),
	// held by the last.
	Embed, Head int64
	// KVPerLayer is one block's KV cache for the context and the sessions
	// a stage keeps.
	KVPerLayer int64
	// Check, when set, says whether the blocks [lo, hi) can be loaded as
	// one stage (model.Config.CheckStage): nil when they can, else why
	// not. It must be deterministic; nil allows every range.
	Check func(lo, hi int) error
}

// Host is a node that may run a stage.
type Host struct {
	// ID names the node (its endpoint id, hex): pins name it, and ties
	// are broken by it.
	ID string
	// Free is the memory the node gives to stages, in bytes (its budget
	// less what it holds already).
	Free int64
	// RTT is the round trip from this node (0 for itself); Bandwidth the
	// node's memory bandwidth in bytes/s (0 when unknown).
	RTT       time.Duration
	Bandwidth float64
}

// Pin fixes the blocks [Lo, Hi) on the host named Host.
type Pin struct {
	Host   string
	Lo, Hi int
}

// Options are the owner's.
type Options struct {
	// Headroom is kept free on every stage's host beyond its weights and
	// KV, in bytes.
	Headroom int64
	// MaxRTT, when not 0, is the highest RTT a peer may have to be a
	// stage.
	MaxRTT time.Duration
	// Force splits a model that would fit this node alone.
	Force bool
	// Pins fix ranges on named hosts; any pin implies a split.
	Pins []Pin
	// MaxStages bounds the stages of a plan (0: DefaultMaxStages).
	MaxStages int
}

// DefaultMaxStages bounds a plan: every boundary costs about 2·RTT per
// token, so a model that needs more stages than this is better not served.
const DefaultMaxStages = 8

// maxTries bounds the placements Make compares at one stage count, so
// that a large mesh costs bounded time; hosts are tried in preference
// order, so the ones left out are the least preferred.
const maxTries = 200_000

// Stage is one stage of a plan.
type Stage struct {
	Host   string
	Lo, Hi int
	// Bytes is what the stage holds: weights and KV (headroom not
	// counted).
	Bytes int64
}

// Plan is where a model's blocks run, stage 0 first.
type Plan struct {
	Stages []Stage
}

// Split reports whether the plan has more than one stage.
func (p Plan) Split() bool { return len(p.Stages) > 1 }

// String is "host:lo-hi" per stage, with hosts cut to 12 characters.
func (p Plan) String() string {
	var b strings.Builder
	for i, s := range p.Stages {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:%d-%d", short(s.Host), s.Lo, s.Hi)
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ErrPin marks pins that cannot be honoured (overlapping, out of range,
// on an unknown or too distant host, or placing another host at layer 0).
var ErrPin = errors.New("stageplan: bad pin")

// ErrModel marks a model description that cannot be planned.
var ErrModel = errors.New("stageplan: bad model")

// ErrUnsplittable marks a split the model cannot take: no range of its
// blocks past the first can be a stage of its own (Model.Check refuses
// every cut). The error wraps Check's reason too.
var ErrUnsplittable = errors.New("stageplan: the model cannot be split into stages")

// NoFitError says no placement fits: Need is what the whole model takes
// (weights, KV and one headroom), Free what the eligible hosts offer
// together, Hosts how many there are.
type NoFitError struct {
	Need, Free int64
	Hosts      int
	Stages     int // the most stages tried
}

// Missing is how much more memory the eligible hosts would need at the
// least; 0 when they have enough together but not in pieces that fit.
func (e *NoFitError) Missing() int64 { return max(0, e.Need-e.Free) }

func (e *NoFitError) Error() string {
	if m := e.Missing(); m > 0 {
		return fmt.Sprintf("stageplan: the model needs %s (weights + KV + headroom) and the %d eligible hosts have %s free: %s is missing",
			Bytes(e.Need), e.Hosts, Bytes(e.Free), Bytes(m))
	}
	return fmt.Sprintf("stageplan: the model needs %s and the %d eligible hosts have %s free together, but no placement of contiguous ranges in at most %d stages fits them",
		Bytes(e.Need), e.Hosts, Bytes(e.Free), e.Stages)
}

// Bytes formats n in binary units.
func Bytes(n int64) string {
	const k = 1024
	switch {
	case n >= k*k*k:
		return fmt.Sprintf("%.2f GiB", float64(n)/(k*k*k))
	case n >= k*k:
		return fmt.Sprintf("%.2f MiB", float64(n)/(k*k))
	case n >= k:
		return fmt.Sprintf("%.2f KiB", float64(n)/k)
	}
	return fmt.Sprintf("%d B", n)
}

// need is what blocks [lo, hi) hold on one host, without headroom.
func (m *Model) need(lo, hi int) int64 {
	var n int64
	for _, b := range m.Layers[lo:hi] {
		n += b
	}
	n += int64(hi-lo) * m.KVPerLayer
	if lo == 0 {
		n += m.Embed
	}
	if hi == len(m.Layers) {
		n += m.Head
	}
	return n
}

// Make plans m from self, which serves it, over peers.
func Make(m Model, self Host, peers []Host, opt Options) (Plan, error) {
	L := len(m.Layers)
	if L == 0 {
		return Plan{}, fmt.Errorf("%w: no layers", ErrModel)
	}
	if m.Embed < 0 || m.Head < 0 || m.KVPerLayer < 0 || slices.ContainsFunc(m.Layers, func(b int64) bool { return b < 0 }) {
		return Plan{}, fmt.Errorf("%w: negative sizes", ErrModel)
	}
	if opt.Headroom < 0 {
		return Plan{}, fmt.Errorf("stageplan: negative headroom %d", opt.Headroom)
	}
	maxStages := opt.MaxStages
	if maxStages <= 0 {
		maxStages = DefaultMaxStages
	}
	fits := func(h *Host, lo, hi int) bool { return m.need(lo, hi)+opt.Headroom <= h.Free }

	if !opt.Force && len(opt.Pins) == 0 && fits(&self, 0, L) {
		return Plan{Stages: []Stage{{Host: self.ID, Lo: 0, Hi: L, Bytes: m.need(0, L)}}}, nil
	}

	// Eligible peers, in preference order: lower RTT, higher bandwidth,
	// then id. The order only steers the search; the plan is chosen by
	// the rules above.
	var hosts []Host
	seen := map[string]bool{self.ID: true}
	for _, p := range peers {
		if seen[p.ID] || opt.MaxRTT > 0 && p.RTT > opt.MaxRTT || p.Free <= opt.Headroom {
			continue
		}
		seen[p.ID] = true
		hosts = append(hosts, p)
	}
	slices.SortFunc(hosts, prefer)

	pins, err := checkPins(opt.Pins, L, self, hosts, opt.MaxRTT, peers)
	if err != nil {
		return Plan{}, err
	}
	cuts, err := m.cuts(pins)
	if err != nil {
		return Plan{}, err
	}
	for _, p := range pins {
		h := find(self, hosts, p.Host)
		if !fits(h, p.Lo, p.Hi) {
			return Plan{}, fmt.Errorf("%w: layers %d-%d need %s with headroom on %s, which has %s free",
				ErrPin, p.Lo, p.Hi, Bytes(m.need(p.Lo, p.Hi)+opt.Headroom), short(p.Host), Bytes(h.Free))
		}
	}

	s := &search{m: &m, self: self, hosts: hosts, pins: pins, fits: fits, force: opt.Force, cuts: cuts}
	for n := max(2, len(pins)); n <= maxStages; n++ {
		s.limit = n
		s.tries = 0
		s.used = map[string]bool{}
		s.walk(0, nil)
		if s.best != nil {
			return Plan{Stages: s.best}, nil
		}
	}
	e := &NoFitError{Need: m.need(0, L) + opt.Headroom, Free: max(0, self.Free-opt.Headroom), Hosts: len(hosts) + 1, Stages: maxStages}
	for _, h := range hosts {
		e.Free += h.Free - opt.Headroom
	}
	return Plan{}, e
}

func prefer(a, b Host) int {
	if c := cmp.Compare(a.RTT, b.RTT); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Bandwidth, a.Bandwidth); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

func find(self Host, hosts []Host, id string) *Host {
	if id == self.ID {
		return &self
	}
	for i := range hosts {
		if hosts[i].ID == id {
			return &hosts[i]
		}
	}
	return nil
}

// checkPins sorts the pins by layer and checks them against the model
// and the hosts.
func checkPins(pins []Pin, layers int, self Host, hosts []Host, maxRTT time.Duration, peers []Host) ([]Pin, error) {
	pins = slices.Clone(pins)
	slices.SortFunc(pins, func(a, b Pin) int { return cmp.Compare(a.Lo, b.Lo) })
	hostOnce := map[string]bool{}
	for i, p := range pins {
		if p.Lo < 0 || p.Hi <= p.Lo || p.Hi > layers {
			return nil, fmt.Errorf("%w: layers %d-%d of a %d-layer model", ErrPin, p.Lo, p.Hi, layers)
		}
		if i > 0 && p.Lo < pins[i-1].Hi {
			return nil, fmt.Errorf("%w: layers %d-%d overlap %d-%d", ErrPin, p.Lo, p.Hi, pins[i-1].Lo, pins[i-1].Hi)
		}
		if hostOnce[p.Host] {
			return nil, fmt.Errorf("%w: host %s is pinned twice (a host runs one stage)", ErrPin, short(p.Host))
		}
		hostOnce[p.Host] = true
		if p.Host == self.ID {
			if p.Lo != 0 {
				return nil, fmt.Errorf("%w: this node runs stage 0, from layer 0, not %d-%d", ErrPin, p.Lo, p.Hi)
			}
			continue
		}
		if p.Lo == 0 {
			return nil, fmt.Errorf("%w: layer 0 pinned on %s: stage 0 is this node", ErrPin, short(p.Host))
		}
		if find(self, hosts, p.Host) == nil {
			why := "not a candidate (it does not hold the model, serve stages or have memory free)"
			for _, q := range peers {
				if q.ID == p.Host && maxRTT > 0 && q.RTT > maxRTT {
					why = fmt.Sprintf("above the RTT limit (%v > %v)", q.RTT, maxRTT)
				}
			}
			return nil, fmt.Errorf("%w: host %s is %s", ErrPin, short(p.Host), why)
		}
	}
	return pins, nil
}

// search finds the best placement in at most limit stages.
type search struct {
	m     *Model
	self  Host
	hosts []Host
	pins  []Pin
	fits  func(h *Host, lo, hi int) bool
	force bool
	cuts  *cuts

	limit int
	tries int
	used  map[string]bool
	best  []Stage
}

// walk places the stage that starts at layer lo, after stages.
func (s *search) walk(lo int, stages []Stage) {
	L := len(s.m.Layers)
	if lo == L {
		s.consider(stages)
		return
	}
	if len(stages) == s.limit || s.tries >= maxTries {
		return
	}
	s.tries++
	// The next pin at or after lo bounds a free stage's reach.
	end := L
	for _, p := range s.pins {
		if p.Lo == lo {
			s.place(p.Host, p.Lo, p.Hi, stages)
			return
		}
		if p.Lo > lo {
			end = p.Lo
			break
		}
	}
	if lo == 0 {
		// Stage 0 is this node, taking as many blocks as fit; a forced
		// split leaves at least one to the others.
		if s.force && end == L {
			end = L - 1
		}
		if hi := s.reach(&s.self, 0, end); hi > 0 {
			s.place(s.self.ID, 0, hi, stages)
		}
		return
	}
	for i := range s.hosts {
		h := &s.hosts[i]
		if s.used[h.ID] || s.pinned(h.ID) {
			continue
		}
		if hi := s.reach(h, lo, end); hi > lo {
			s.place(h.ID, lo, hi, stages)
		}
	}
}

func (s *search) pinned(id string) bool {
	return slices.ContainsFunc(s.pins, func(p Pin) bool { return p.Host == id })
}

// reach is the furthest hi ≤ end such that h holds [lo, hi), [lo, hi)
// is a stage the model allows and the blocks from hi on can be placed in
// stages it allows, or lo when there is none. Taking the most each stage
// can never needs more stages than taking less: a later stage's need
// only falls as its start moves on (a cut the model forbids is passed
// over, to the nearest allowed one before it).
func (s *search) reach(h *Host, lo, end int) int {
	hi := lo
	for hi < end && s.fits(h, lo, hi+1) {
		hi++
	}
	for ; hi > lo; hi-- {
		if s.cuts.stage(lo, hi) {
			return hi
		}
	}
	return lo
}

func (s *search) place(host string, lo, hi int, stages []Stage) {
	s.used[host] = true
	s.walk(hi, append(stages, Stage{Host: host, Lo: lo, Hi: hi, Bytes: s.m.need(lo, hi)}))
	delete(s.used, host)
}

// consider keeps stages if they beat the best so far.
func (s *search) consider(stages []Stage) {
	if s.best == nil || s.better(stages, s.best) {
		s.best = slices.Clone(stages)
	}
}

// better orders complete placements: fewer stages, lower total RTT,
// higher slowest bandwidth, then host ids.
func (s *search) better(a, b []Stage) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	ra, wa := s.cost(a)
	rb, wb := s.cost(b)
	if ra != rb {
		return ra < rb
	}
	if wa != wb {
		return wa > wb
	}
	for i := range a {
		if c := strings.Compare(a[i].Host, b[i].Host); c != 0 {
			return c < 0
		}
		if a[i].Hi != b[i].Hi {
			return a[i].Hi > b[i].Hi
		}
	}
	return false
}

func (s *search) cost(stages []Stage) (rtt time.Duration, slowest float64) {
	slowest = -1
	// Stage 0 is this node in every placement: only the peers differ.
	for _, st := range stages[1:] {
		h := find(s.self, s.hosts, st.Host)
		rtt += h.RTT
		if slowest < 0 || h.Bandwidth < slowest {
			slowest = h.Bandwidth
		}
	}
	return rtt, slowest
}

// cuts is which stages a model allows, as far as its blocks can still be
// placed after them: stage(lo, hi) holds when Model.Check allows [lo,
// hi) and the blocks from hi on can be cut into allowed stages (around
// the pins, which are fixed).
type cuts struct {
	m    *Model
	pins []Pin
	// ok[lo]: the blocks from lo on can be cut into allowed stages
	// (ok[L] is true).
	ok   []bool
	memo map[[2]int]error
}

// check is m.Check, memoised (the search asks the same ranges often).
func (c *cuts) check(lo, hi int) error {
	if c.m.Check == nil {
		return nil
	}
	k := [2]int{lo, hi}
	if err, ok := c.memo[k]; ok {
		return err
	}
	err := c.m.Check(lo, hi)
	c.memo[k] = err
	return err
}

// stage reports whether [lo, hi) may be a stage of a plan.
func (c *cuts) stage(lo, hi int) bool { return c.ok[hi] && c.check(lo, hi) == nil }

// end is where a free stage from lo must end at the latest: the next
// pin's start, or the last block; pinned is the pin starting at lo.
func (c *cuts) end(lo int) (end int, pinned *Pin) {
	for i, p := range c.pins {
		if p.Lo == lo {
			return p.Hi, &c.pins[i]
		}
		if p.Lo > lo {
			return p.Lo, nil
		}
	}
	return len(c.m.Layers), nil
}

// cuts finds which stages m allows around pins (sorted, checked). A pin
// that is not a stage m allows, and a model that cannot be cut into
// allowed stages at all, are refused with Check's reason.
func (m *Model) cuts(pins []Pin) (*cuts, error) {
	L := len(m.Layers)
	c := &cuts{m: m, pins: pins, ok: make([]bool, L+1), memo: map[[2]int]error{}}
	for _, p := range pins {
		if err := c.check(p.Lo, p.Hi); err != nil {
			return nil, fmt.Errorf("%w: layers %d-%d on %s cannot be a stage: %w", ErrPin, p.Lo, p.Hi, short(p.Host), err)
		}
	}
	c.ok[L] = true
	for lo := L - 1; lo >= 0; lo-- {
		end, pin := c.end(lo)
		if pin != nil {
			c.ok[lo] = c.ok[pin.Hi]
			continue
		}
		for hi := lo + 1; hi <= end && !c.ok[lo]; hi++ {
			c.ok[lo] = c.stage(lo, hi)
		}
	}
	if !c.ok[0] {
		why := c.why(0)
		if len(pins) > 0 {
			return nil, fmt.Errorf("%w: the blocks around the pins cannot be cut into stages the model allows: %w", ErrPin, why)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnsplittable, why)
	}
	split := false
	for hi := 1; hi < L && !split; hi++ {
		split = c.stage(0, hi)
	}
	if len(pins) == 0 && !split {
		// The model loads only whole: asked to split, say why.
		why := errors.New("it has one block")
		if L > 1 {
			if why = c.check(0, L-1); why == nil {
				why = c.why(L - 1)
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrUnsplittable, why)
	}
	return c, nil
}

// why is the reason the blocks from lo on cannot be cut into allowed
// stages (ok[lo] is false): Check's refusal of the longest stage from lo
// after which the rest could be placed, else the reason of what follows.
func (c *cuts) why(lo int) error {
	end, pin := c.end(lo)
	if pin != nil {
		return c.why(pin.Hi) // the pin itself was allowed
	}
	for hi := end; hi > lo; hi-- {
		if c.ok[hi] {
			if err := c.check(lo, hi); err != nil {
				return err
			}
		}
	}
	return c.why(end) // end < L, a pin's start: ok[L] is true
}

// CheckSplit reports whether m can be split into stages under pins
// (their ranges only: the hosts are Make's to check), before any host is
// asked: an error wrapping ErrUnsplittable for a model that loads only
// whole, or ErrPin for pins out of range, overlapping, or crossing a cut
// the model forbids, with the model's reason (Model.Check).
func CheckSplit(m Model, pins []Pin) error {
	L := len(m.Layers)
	if L == 0 {
		return fmt.Errorf("%w: no layers", ErrModel)
	}
	pins = slices.Clone(pins)
	slices.SortFunc(pins, func(a, b Pin) int { return cmp.Compare(a.Lo, b.Lo) })
	for i, p := range pins {
		if p.Lo < 0 || p.Hi <= p.Lo || p.Hi > L {
			return fmt.Errorf("%w: layers %d-%d of a %d-layer model", ErrPin, p.Lo, p.Hi, L)
		}
		if i > 0 && p.Lo < pins[i-1].Hi {
			return fmt.Errorf("%w: layers %d-%d overlap %d-%d", ErrPin, p.Lo, p.Hi, pins[i-1].Lo, pins[i-1].Hi)
		}
	}
	_, err := m.cuts(pins)
	return err
}
