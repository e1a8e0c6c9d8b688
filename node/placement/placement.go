package placement

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// Figures are what a host advertises for one model (the wire's
// MeshnodeModelLoad).
type Figures struct {
	// UJPerPromptTokenMilli and UJPerOutputTokenMilli are µJ per token in
	// thousandths; Grade the weakest grade of the receipts they came from;
	// Receipts how many (0: the engine's modelled figure).
	UJPerPromptTokenMilli, UJPerOutputTokenMilli uint64
	Grade                                        Grade
	Receipts                                     uint32
	// TokensPerSecondMilli is one generation's output rate (0: not
	// measured).
	TokensPerSecondMilli uint64
	// Slots, FreeSlots, Queued and QueueLimit are the model's queue: a
	// host with no free slot and QueueLimit waiting answers 429.
	Slots, FreeSlots, Queued, QueueLimit uint32
	// Fidelity is the advertised level, 0..4.
	Fidelity uint8
}

// Host is one node that serves the model.
type Host struct {
	ID   identity.EndpointID
	Self bool
	// Figures are nil for a peer that advertises none (a mesh-llm peer).
	Figures *Figures
	// RTT is the measured round trip to a peer (0 for this node, or not
	// measured yet).
	RTT time.Duration
}

// Request is what a request asks of its host.
type Request struct {
	PromptTokens, MaxTokens uint32
	FidelityFloor           uint8
	JouleCeilingUJ          uint64
	// Budget is the request's latency budget (0: DefaultBudget).
	Budget time.Duration
}

// DefaultBudget is the latency budget of a request that states none: the
// API's default queue wait, beyond which a local request is refused.
const DefaultBudget = 60 * time.Second

// Candidate is one host as it was weighed.
type Candidate struct {
	// Host is "self" or the peer's endpoint id in hex.
	Host string `json:"host"`
	// EstimateUJ is the expected energy, as the host's figures price the
	// request (before Trust); absent for a host without figures.
	EstimateUJ *uint64 `json:"estimate_uj,omitempty"`
	// Trust is what the claims check multiplies the estimate by (1 unless
	// the host's receipts exceeded its claims beyond the tolerance).
	Trust float64 `json:"trust"`
	Grade string  `json:"energy_grade"`
	// LatencyMS is the expected time to the last token: round trip, queue
	// wait and the generation itself.
	LatencyMS int64 `json:"latency_ms"`
	// Score is the figure hosts are ranked by (lower is better).
	Score      float64 `json:"score"`
	Admissible bool    `json:"admissible"`
	Chosen     bool    `json:"chosen,omitempty"`
	// Reason says why the host lost, or was passed over.
	Reason string `json:"reason,omitempty"`

	id   identity.EndpointID
	self bool
	free int // free slots after this node's requests in flight
	tier int // 0 admissible, 1 only over the budget, 2 no figures, 3 inadmissible
}

// Decision is the placement of one request.
type Decision struct {
	// Candidates are every host weighed: this node first, then peers by id.
	Candidates []Candidate `json:"candidates"`
	// Order indexes Candidates: the hosts to try, best first.
	Order []int `json:"-"`
	// Line is the decision in one line of ASCII (but for nothing: hosts
	// are hex), for the receipt's route.
	Line string `json:"route"`
}

// Chosen is the host to try first, and whether it is this node; ok is
// false when no host may take the request.
func (d *Decision) Chosen() (id identity.EndpointID, self, ok bool) {
	if len(d.Order) == 0 {
		return identity.EndpointID{}, false, false
	}
	c := d.Candidates[d.Order[0]]
	return c.id, c.self, true
}

// Hosts are the hosts to try, best first.
func (d *Decision) Hosts() []identity.EndpointID {
	out := make([]identity.EndpointID, len(d.Order))
	for i, k := range d.Order {
		out[i] = d.Candidates[k].id
	}
	return out
}

// Config tunes a Placer; zero values take the defaults.
type Config struct {
	// Tolerance is how far a peer's receipts may exceed its claims before
	// it is priced at what they show (default 0.25: 25%).
	Tolerance float64
	// Band is how close to the best score a host must be to be drawn
	// against it (default 0.10).
	Band float64
	// Rand returns a number in [0, 1) for the draw; default math/rand/v2.
	Rand func() float64
}

// Placer weighs hosts, counts this node's requests in flight to each,
// and checks peers' claims against their receipts.
type Placer struct {
	cfg      Config
	mu       sync.Mutex
	inflight map[identity.EndpointID]int
	claims   map[claimKey]*claim
}

type claimKey struct {
	id    identity.EndpointID
	model string
}

// claimWindow is how many receipts a claims check averages over.
const claimWindow = 8

// claim holds the ratios of a peer's receipts to what it advertised.
type claim struct {
	ratios [claimWindow]float64
	n, at  int
}

func (c *claim) mean() float64 {
	var s float64
	for _, r := range c.ratios[:c.n] {
		s += r
	}
	return s / float64(c.n)
}

// New returns a Placer.
func New(cfg Config) *Placer {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = 0.25
	}
	if cfg.Band <= 0 {
		cfg.Band = 0.10
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Placer{cfg: cfg, inflight: map[identity.EndpointID]int{}, claims: map[claimKey]*claim{}}
}

// Begin counts a request sent to host until end is called.
func (p *Placer) Begin(host identity.EndpointID) (end func()) {
	p.mu.Lock()
	p.inflight[host]++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.inflight[host]--; p.inflight[host] <= 0 {
				delete(p.inflight, host)
			}
			p.mu.Unlock()
		})
	}
}

// InFlight is how many requests this node has sent to host and not seen
// end.
func (p *Placer) InFlight(host identity.EndpointID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight[host]
}

// Observe checks a peer's signed receipt for model against the figures it
// advertised when the request was sent: the ratio of the receipt's energy
// to what the figures price its tokens at joins the peer's last
// claimWindow ratios. A claim of nothing for work that took energy counts
// as a ratio of 1000.
func (p *Placer) Observe(host identity.EndpointID, model string, claimed Figures, promptTokens, outputTokens uint32, uj uint64) {
	want := (float64(claimed.UJPerPromptTokenMilli)*float64(promptTokens) + float64(claimed.UJPerOutputTokenMilli)*float64(outputTokens)) / 1000
	var r float64
	switch {
	case want > 0:
		r = min(float64(uj)/want, 1000)
	case uj > 0:
		r = 1000
	default:
		r = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := claimKey{host, model}
	c := p.claims[k]
	if c == nil {
		c = &claim{}
		p.claims[k] = c
	}
	c.ratios[c.at] = r
	c.at = (c.at + 1) % claimWindow
	c.n = min(c.n+1, claimWindow)
}

// Trust is what host's claims for model are multiplied by: the mean ratio
// of its receipts to its claims when that exceeds 1 + Tolerance, else 1.
func (p *Placer) Trust(host identity.EndpointID, model string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.trustLocked(host, model)
}

func (p *Placer) trustLocked(host identity.EndpointID, model string) float64 {
	c := p.claims[claimKey{host, model}]
	if c == nil || c.n == 0 {
		return 1
	}
	if m := c.mean(); m > 1+p.cfg.Tolerance {
		return m
	}
	return 1
}

// Weigh places req for model among hosts (docs/mesh.md#placement):
//
//	E = (uj_per_prompt_token × prompt_tokens + uj_per_output_token × max_tokens) × trust
//	service = max_tokens / output_tokens_per_second      (0 when not measured)
//	wait    = 0 with a free slot, else (queued + 1) / slots × service
//	L = RTT + wait + service
//	score = E × grade_factor × (1 + L / budget)
//
// counting this node's requests in flight to a peer as taking its free
// slots, then queueing. A host is admissible when its fidelity is at least
// the floor, E is at most the joule ceiling, its queue is not full and L
// is within the budget. The hosts to try are the admissible ones by
// score, the first picked among those within Band of the best (this node
// if it is one of them, else drawn, weighted by free slots); then those
// over the budget only, by score; then peers that advertise no figures, by
// RTT.
func (p *Placer) Weigh(model string, req Request, hosts []Host) Decision {
	budget := req.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	hosts = slices.Clone(hosts)
	slices.SortFunc(hosts, func(a, b Host) int {
		if a.Self != b.Self {
			if a.Self {
				return -1
			}
			return 1
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	d := Decision{Candidates: make([]Candidate, len(hosts))}
	p.mu.Lock()
	for i, h := range hosts {
		d.Candidates[i] = p.weighLocked(model, req, budget, h)
	}
	p.mu.Unlock()

	var tiers [3][]int
	for i, c := range d.Candidates {
		if c.tier < 3 {
			tiers[c.tier] = append(tiers[c.tier], i)
		}
	}
	byScore := func(a, b int) int {
		ca, cb := d.Candidates[a], d.Candidates[b]
		return cmp.Or(cmp.Compare(ca.Score, cb.Score), cmp.Compare(a, b))
	}
	slices.SortFunc(tiers[0], byScore)
	slices.SortFunc(tiers[1], byScore)
	slices.SortFunc(tiers[2], func(a, b int) int {
		ra, rb := hosts[a].RTT, hosts[b].RTT
		if (ra == 0) != (rb == 0) { // unmeasured last
			return cmp.Compare(b2i(ra == 0), b2i(rb == 0))
		}
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(a, b))
	})
	band := 0
	if len(tiers[0]) > 1 {
		band = p.draw(d.Candidates, tiers[0])
		first := tiers[0][band]
		tiers[0] = append([]int{first}, slices.Delete(slices.Clone(tiers[0]), band, band+1)...)
	}
	d.Order = slices.Concat(tiers[0], tiers[1], tiers[2])
	p.explain(&d)
	return d
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// draw picks among the admissible hosts (sorted by score) those within
// Band of the best: this node when it is one of them (it costs no hop,
// and no other node sends it this node's requests, so keeping them herds
// nothing), else one drawn at random, weighted by free slots (equally
// when none has one). It returns the position of the one picked.
func (p *Placer) draw(cs []Candidate, sorted []int) int {
	best := cs[sorted[0]].Score
	n := 1
	for n < len(sorted) && cs[sorted[n]].Score <= best*(1+p.cfg.Band) {
		n++
	}
	for i, k := range sorted[:n] {
		if cs[k].self {
			return i
		}
	}
	if n == 1 {
		return 0
	}
	total := 0
	for _, k := range sorted[:n] {
		total += cs[k].free
	}
	x := p.cfg.Rand()
	if total == 0 {
		return min(int(x*float64(n)), n-1)
	}
	at := x * float64(total)
	for i, k := range sorted[:n] {
		if at < float64(cs[k].free) {
			return i
		}
		at -= float64(cs[k].free)
	}
	return n - 1
}

// weighLocked prices one host. p.mu held.
func (p *Placer) weighLocked(model string, req Request, budget time.Duration, h Host) Candidate {
	c := Candidate{Host: "self", id: h.ID, self: h.Self, Trust: 1, Grade: GradeUnknown.String()}
	if !h.Self {
		c.Host = h.ID.String()
	}
	f := h.Figures
	if f == nil {
		c.LatencyMS = h.RTT.Milliseconds()
		c.tier = 2
		c.Reason = "advertises no energy figures"
		return c
	}
	c.Grade = f.Grade.String()
	e := (float64(f.UJPerPromptTokenMilli)*float64(req.PromptTokens) + float64(f.UJPerOutputTokenMilli)*float64(req.MaxTokens)) / 1000
	est := uint64(math.MaxUint64)
	if e < 1<<63 {
		est = uint64(math.Ceil(e))
	}
	c.EstimateUJ = &est
	if !h.Self {
		c.Trust = p.trustLocked(h.ID, model)
	}
	priced := e * c.Trust

	// This node's own requests in flight to a peer take its free slots,
	// then queue: its gossip may not show them yet.
	free, queued := int(f.FreeSlots), int(f.Queued)
	if !h.Self {
		in := p.inflight[h.ID]
		free -= in
		if free < 0 {
			queued -= free
			free = 0
		}
	}
	c.free = free
	var service time.Duration
	if f.TokensPerSecondMilli > 0 {
		service = time.Duration(float64(req.MaxTokens) * 1000 / float64(f.TokensPerSecondMilli) * float64(time.Second))
	}
	var wait time.Duration
	if free == 0 {
		wait = time.Duration(float64(queued+1) / float64(max(1, f.Slots)) * float64(service))
	}
	lat := h.RTT + wait + service
	c.LatencyMS = lat.Milliseconds()
	c.Score = priced * gradeFactor(f.Grade) * (1 + lat.Seconds()/budget.Seconds())

	var why []string
	if f.Fidelity < req.FidelityFloor {
		why = append(why, fmt.Sprintf("below floor (F%d < F%d)", f.Fidelity, req.FidelityFloor))
	}
	if priced > float64(req.JouleCeilingUJ) {
		why = append(why, fmt.Sprintf("over ceiling (%.0f uJ > %d uJ)", priced, req.JouleCeilingUJ))
	}
	if free == 0 && queued >= int(f.QueueLimit) {
		why = append(why, fmt.Sprintf("queue full (%d slots busy, %d queued of %d)", f.Slots, queued, f.QueueLimit))
	}
	switch {
	case len(why) > 0:
		c.tier = 3
		c.Reason = strings.Join(why, "; ")
	case lat > budget:
		c.tier = 1
		c.Reason = fmt.Sprintf("over latency budget (%d ms > %d ms)", lat.Milliseconds(), budget.Milliseconds())
	default:
		c.tier = 0
		c.Admissible = true
	}
	return c
}

// explain marks the chosen host and says why each other lost, and writes
// the decision's line.
func (p *Placer) explain(d *Decision) {
	if len(d.Order) == 0 {
		d.Line = fmt.Sprintf("no host of %d weighed can take it: %s", len(d.Candidates), reasons(d.Candidates, -1))
		return
	}
	first := d.Order[0]
	best := &d.Candidates[first]
	best.Chosen = true
	for i := range d.Candidates {
		c := &d.Candidates[i]
		if i == first || !c.Admissible {
			continue
		}
		if c.Score <= best.Score*(1+p.cfg.Band) {
			c.Reason = fmt.Sprintf("lost the draw within %.0f%% of the best (score %.0f)", p.cfg.Band*100, c.Score)
			if best.self {
				c.Reason = fmt.Sprintf("within %.0f%% of this node, which keeps its own requests (score %.0f)", p.cfg.Band*100, c.Score)
			}
		} else {
			c.Reason = fmt.Sprintf("costlier (score %.0f > %.0f)", c.Score, best.Score)
		}
	}
	if !best.Admissible {
		best.Reason += " (the best left)"
	}
	for i := range d.Candidates {
		if c := &d.Candidates[i]; c.Trust > 1 && i != first {
			c.Reason += fmt.Sprintf("; its receipts ran %.1fx its claims", c.Trust)
		}
	}
	d.Line = fmt.Sprintf("%s: best of %d weighed (%s, est %s uJ x trust %.2f, %d ms, score %.0f); %s",
		short(best), len(d.Candidates), best.Grade, estimate(best), best.Trust, best.LatencyMS, best.Score, reasons(d.Candidates, first))
}

// lineHosts bounds how many hosts the line names besides the chosen
// one, so that it stays well within a header (api.PlacementHeader) however
// large the mesh; usage.placement lists them all.
const lineHosts = 8

func reasons(cs []Candidate, skip int) string {
	var parts []string
	more := 0
	for i, c := range cs {
		switch {
		case i == skip:
		case len(parts) == lineHosts:
			more++
		default:
			parts = append(parts, short(&c)+": "+c.Reason)
		}
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	if len(parts) == 0 {
		return "no other host"
	}
	return strings.Join(parts, "; ")
}

func short(c *Candidate) string {
	if c.self {
		return "self"
	}
	return c.id.Short()
}

func estimate(c *Candidate) string {
	if c.EstimateUJ == nil {
		return "?"
	}
	return fmt.Sprint(*c.EstimateUJ)
}
