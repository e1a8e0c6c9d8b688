package placement

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

func peerID(b byte) identity.EndpointID {
	var id identity.EndpointID
	id[0] = b
	return id
}

// figures advertises uj µJ per token (prompt and output alike), graded g,
// with free of 4 slots free and an empty queue of 8.
func figures(uj uint64, g Grade, free uint32) *Figures {
	return &Figures{UJPerPromptTokenMilli: uj * 1000, UJPerOutputTokenMilli: uj * 1000, Grade: g, Receipts: 10,
		TokensPerSecondMilli: 100_000, Slots: 4, FreeSlots: free, QueueLimit: 8, Fidelity: 2}
}

var req = Request{PromptTokens: 10, MaxTokens: 90, FidelityFloor: 2, JouleCeilingUJ: 1_000_000, Budget: 10 * time.Second}

// fixed draws x every time.
func fixed(x float64) func() float64 { return func() float64 { return x } }

func chosen(t *testing.T, d Decision) identity.EndpointID {
	t.Helper()
	id, _, ok := d.Chosen()
	if !ok {
		t.Fatalf("nothing chosen: %s", d.Line)
	}
	return id
}

func TestWindowFitsTwoRates(t *testing.T) {
	var w Window
	// 2 µJ a prompt token, 5 an output token, exactly.
	for i := range 10 {
		p, o := uint32(10+7*i), uint32(3+i*i%11)
		w.Add(Sample{PromptTokens: p, OutputTokens: o, UJ: uint64(2*p + 5*o), Grade: GradeHwShunt, Took: time.Duration(o) * 10 * time.Millisecond})
	}
	a, b, g, n := w.Energy()
	if a != 2000 || b != 5000 || g != GradeHwShunt || n != 10 {
		t.Fatalf("fit %d, %d milli-uJ, %v, %d receipts; want 2000, 5000, HwShunt, 10", a, b, g, n)
	}
	if tps := w.TokensPerSecondMilli(); tps != 100_000 {
		t.Fatalf("rate %d milli-tokens/s, want 100000 (10 ms a token)", tps)
	}
	// One estimator-graded receipt makes the figures Estimator.
	w.Add(Sample{PromptTokens: 4, OutputTokens: 4, UJ: 28, Grade: GradeEstimator})
	if _, _, g, _ := w.Energy(); g != GradeEstimator {
		t.Fatalf("grade %v after an Estimator receipt, want Estimator", g)
	}
}

func TestWindowSameProportionsOneRate(t *testing.T) {
	var w Window
	for i := 1; i <= 5; i++ {
		w.Add(Sample{PromptTokens: uint32(i), OutputTokens: uint32(3 * i), UJ: uint64(12 * i), Grade: GradeEstimator})
	}
	// Every serve 1:3: only the total rate is known, 12 uJ per 4 tokens.
	a, b, _, _ := w.Energy()
	if a != 3000 || b != 3000 {
		t.Fatalf("fit %d, %d; want 3000 for both", a, b)
	}
	var empty Window
	if a, b, g, n := empty.Energy(); a != 0 || b != 0 || g != GradeUnknown || n != 0 {
		t.Fatalf("empty window: %d %d %v %d", a, b, g, n)
	}
}

func TestWeighPicksCheaper(t *testing.T) {
	p := New(Config{Rand: fixed(0)})
	hosts := []Host{
		{ID: peerID(1), Figures: figures(50, GradeEstimator, 4), RTT: time.Millisecond},
		{ID: peerID(2), Figures: figures(5, GradeEstimator, 4), RTT: 3 * time.Millisecond},
		{ID: peerID(9), Self: true, Figures: figures(20, GradeEstimator, 4)},
	}
	d := p.Weigh("m", req, hosts)
	if got := chosen(t, d); got != peerID(2) {
		t.Fatalf("chose %s, want the 5 uJ/token peer: %s", got.Short(), d.Line)
	}
	if d.Candidates[0].Host != "self" || !d.Candidates[0].Admissible || !strings.Contains(d.Candidates[0].Reason, "costlier") {
		t.Fatalf("self: %+v", d.Candidates[0])
	}
	if want := []identity.EndpointID{peerID(2), peerID(9), peerID(1)}; !equalIDs(d.Hosts(), want) {
		t.Fatalf("order %v, want %v", shorts(d.Hosts()), shorts(want))
	}
	// est = 5 uJ × 100 tokens.
	if e := d.Candidates[2].EstimateUJ; e == nil || *e != 500 {
		t.Fatalf("estimate %v, want 500", e)
	}
	if !strings.Contains(d.Line, peerID(2).Short()+": best of 3 weighed") || !strings.Contains(d.Line, "self: costlier") {
		t.Fatalf("line %q", d.Line)
	}
}

func TestWeighSpillsFromFullQueue(t *testing.T) {
	p := New(Config{Rand: fixed(0)})
	full := figures(1, GradeEstimator, 0)
	full.Queued = full.QueueLimit
	hosts := []Host{
		{ID: peerID(9), Self: true, Figures: full},
		{ID: peerID(2), Figures: figures(40, GradeEstimator, 1), RTT: time.Millisecond},
	}
	d := p.Weigh("m", req, hosts)
	if got, self, _ := d.Chosen(); self || got != peerID(2) {
		t.Fatalf("chose self=%v %s, want the peer: %s", self, got.Short(), d.Line)
	}
	if len(d.Order) != 1 || !strings.HasPrefix(d.Candidates[0].Reason, "queue full") {
		t.Fatalf("order %v, self %+v", d.Order, d.Candidates[0])
	}
	// Requests in flight to the peer fill its one slot, then its queue.
	var ends []func()
	for range 1 + 8 {
		ends = append(ends, p.Begin(peerID(2)))
	}
	d = p.Weigh("m", req, hosts)
	if len(d.Order) != 0 || !strings.Contains(d.Line, "no host of 2 weighed") {
		t.Fatalf("with the peer full of our requests: order %v, %s", d.Order, d.Line)
	}
	ends[0]()
	ends[0]() // twice: counted once
	if n := p.InFlight(peerID(2)); n != 8 {
		t.Fatalf("in flight %d, want 8", n)
	}
	if d = p.Weigh("m", req, hosts); len(d.Order) != 1 {
		t.Fatalf("a place freed: order %v, %s", d.Order, d.Line)
	}
}

func TestWeighWaitPricedAgainstBudget(t *testing.T) {
	p := New(Config{Rand: fixed(0)})
	busy := figures(5, GradeEstimator, 0) // 90 tokens at 100/s: 0.9 s; 3 queued on 4 slots: wait 0.9 s
	busy.Queued = 3
	idle := figures(6, GradeEstimator, 4)
	hosts := []Host{{ID: peerID(1), Figures: busy}, {ID: peerID(2), Figures: idle}}
	r := req
	r.Budget = 2 * time.Second
	d := p.Weigh("m", r, hosts)
	// busy: 500 × 1.2 × (1 + 1.8/2) = 1140; idle: 600 × 1.2 × (1 + 0.9/2) = 1044.
	if got := chosen(t, d); got != peerID(2) {
		t.Fatalf("chose %s, want the idle peer: %s", got.Short(), d.Line)
	}
	if s := d.Candidates[0].Score; math.Abs(s-1140) > 1e-6 {
		t.Fatalf("busy score %v, want 1140", s)
	}
	if d.Candidates[0].LatencyMS != 1800 {
		t.Fatalf("busy latency %d ms, want 1800", d.Candidates[0].LatencyMS)
	}
	// A budget under the busy host's latency passes it over, but keeps it
	// after the admissible hosts.
	r.Budget = 1500 * time.Millisecond
	d = p.Weigh("m", r, hosts)
	if !equalIDs(d.Hosts(), []identity.EndpointID{peerID(2), peerID(1)}) || !strings.HasPrefix(d.Candidates[0].Reason, "over latency budget (1800 ms > 1500 ms)") {
		t.Fatalf("order %v, busy %+v", shorts(d.Hosts()), d.Candidates[0])
	}
}

func TestWeighFloorCeilingAndLegacyPeers(t *testing.T) {
	p := New(Config{Rand: fixed(0)})
	low := figures(1, GradeHwShunt, 4)
	low.Fidelity = 1
	hosts := []Host{
		{ID: peerID(1), Figures: low},
		{ID: peerID(2), Figures: figures(20_000, GradeHwShunt, 4)}, // 2 J > 1 J ceiling
		{ID: peerID(3), RTT: 9 * time.Millisecond},                 // a mesh-llm peer
		{ID: peerID(4), RTT: 2 * time.Millisecond},
		{ID: peerID(5)},
	}
	d := p.Weigh("m", req, hosts)
	if want := []identity.EndpointID{peerID(4), peerID(3), peerID(5)}; !equalIDs(d.Hosts(), want) {
		t.Fatalf("order %v, want the figureless peers by RTT %v: %s", shorts(d.Hosts()), shorts(want), d.Line)
	}
	if r := d.Candidates[0].Reason; r != "below floor (F1 < F2)" {
		t.Fatalf("low fidelity: %q", r)
	}
	if r := d.Candidates[1].Reason; r != "over ceiling (2000000 uJ > 1000000 uJ)" {
		t.Fatalf("costly: %q", r)
	}
}

func TestWeighPrefersMeasuredClaim(t *testing.T) {
	for _, x := range []float64{0, 0.5, 0.999} {
		p := New(Config{Rand: fixed(x)})
		hosts := []Host{{ID: peerID(1), Figures: figures(10, GradeEstimator, 4)}, {ID: peerID(2), Figures: figures(10, GradeHwShunt, 4)}}
		if got := chosen(t, p.Weigh("m", req, hosts)); got != peerID(2) {
			t.Fatalf("draw %v: chose %s, want the HwShunt-graded claim", x, got.Short())
		}
	}
}

func TestWeighDrawsWithinBandBySlots(t *testing.T) {
	// Equal claims: the draw decides, weighted by free slots (1 and 3).
	hosts := []Host{{ID: peerID(1), Figures: figures(10, GradeHwShunt, 1)}, {ID: peerID(2), Figures: figures(10, GradeHwShunt, 3)}}
	for _, tc := range []struct {
		x    float64
		want identity.EndpointID
	}{{0, peerID(1)}, {0.24, peerID(1)}, {0.25, peerID(2)}, {0.99, peerID(2)}} {
		d := New(Config{Rand: fixed(tc.x)}).Weigh("m", req, hosts)
		if got := chosen(t, d); got != tc.want {
			t.Fatalf("draw %v: chose %s, want %s", tc.x, got.Short(), tc.want.Short())
		}
		loser := d.Candidates[0]
		if tc.want == peerID(1) {
			loser = d.Candidates[1]
		}
		if !strings.HasPrefix(loser.Reason, "lost the draw within 10%") {
			t.Fatalf("loser's reason %q", loser.Reason)
		}
	}
	// Beyond the band the cheaper always wins.
	hosts[1].Figures = figures(12, GradeHwShunt, 3)
	if got := chosen(t, New(Config{Rand: fixed(0.99)}).Weigh("m", req, hosts)); got != peerID(1) {
		t.Fatalf("chose %s, want the cheaper beyond the band", got.Short())
	}
}

func TestClaimsCheckRanksDown(t *testing.T) {
	p := New(Config{Rand: fixed(0)})
	liar := figures(2, GradeEstimator, 4)
	hosts := []Host{{ID: peerID(1), Figures: liar}, {ID: peerID(2), Figures: figures(5, GradeEstimator, 4)}}
	if got := chosen(t, p.Weigh("m", req, hosts)); got != peerID(1) {
		t.Fatalf("before any receipt chose %s, want the cheaper claim", got.Short())
	}
	// Its receipts show 20 uJ a token, 10x its claim.
	p.Observe(peerID(1), "m", *liar, 10, 90, 2000)
	if tr := p.Trust(peerID(1), "m"); math.Abs(tr-10) > 1e-9 {
		t.Fatalf("trust %v, want 10", tr)
	}
	if tr := p.Trust(peerID(1), "other"); tr != 1 {
		t.Fatalf("trust for another model %v, want 1", tr)
	}
	d := p.Weigh("m", req, hosts)
	if got := chosen(t, d); got != peerID(2) {
		t.Fatalf("after its receipt chose %s, want the honest peer: %s", got.Short(), d.Line)
	}
	if c := d.Candidates[0]; c.Trust != 10 || !strings.HasSuffix(c.Reason, "; its receipts ran 10.0x its claims") {
		t.Fatalf("liar's candidate %+v", c)
	}
	// Within the tolerance nothing changes.
	q := New(Config{})
	q.Observe(peerID(1), "m", *liar, 10, 90, 240) // 1.2x
	if tr := q.Trust(peerID(1), "m"); tr != 1 {
		t.Fatalf("trust %v at 1.2x, want 1 (tolerance 25%%)", tr)
	}
	// Honest receipts bring it back as they replace the window.
	for range claimWindow {
		p.Observe(peerID(1), "m", *liar, 10, 90, 200)
	}
	if tr := p.Trust(peerID(1), "m"); tr != 1 {
		t.Fatalf("trust %v after %d honest receipts, want 1", tr, claimWindow)
	}
}

func equalIDs(a, b []identity.EndpointID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func shorts(ids []identity.EndpointID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Short()
	}
	return out
}

// TestWeighLineBounded: however many hosts, the line names at most
// lineHosts besides the chosen one, and stays short.
func TestWeighLineBounded(t *testing.T) {
	var hosts []Host
	for i := range 200 {
		hosts = append(hosts, Host{ID: peerID(byte(i)), Figures: figures(uint64(10+i), GradeHwShunt, 4)})
	}
	d := New(Config{Rand: fixed(0)}).Weigh("m", req, hosts)
	if len(d.Candidates) != 200 || !strings.HasSuffix(d.Line, "; and 191 more") || len(d.Line) > 2048 {
		t.Fatalf("%d candidates, line of %d bytes: %s", len(d.Candidates), len(d.Line), d.Line)
	}
	// An estimate past uint64 saturates.
	huge := &Figures{UJPerPromptTokenMilli: math.MaxUint64, UJPerOutputTokenMilli: math.MaxUint64, Slots: 1, FreeSlots: 1}
	d = New(Config{}).Weigh("m", Request{PromptTokens: 1 << 30, MaxTokens: 1 << 30, JouleCeilingUJ: math.MaxUint64}, []Host{{ID: peerID(1), Figures: huge}})
	if e := d.Candidates[0].EstimateUJ; e == nil || *e != math.MaxUint64 || !strings.HasPrefix(d.Candidates[0].Reason, "over ceiling") {
		t.Fatalf("huge estimate %v, %q", e, d.Candidates[0].Reason)
	}
}

// TestWeighSelfWithinBand: this node keeps a request when it is within
// the band of the best, whatever the draw; beyond it, it does not.
func TestWeighSelfWithinBand(t *testing.T) {
	for _, x := range []float64{0, 0.5, 0.99} {
		hosts := []Host{
			{ID: peerID(1), Figures: figures(10, GradeHwShunt, 4)},
			{ID: peerID(9), Self: true, Figures: figures(10, GradeHwShunt, 1)},
		}
		d := New(Config{Rand: fixed(x)}).Weigh("m", req, hosts)
		if _, self, _ := d.Chosen(); !self {
			t.Fatalf("draw %v: chose a peer within the band: %s", x, d.Line)
		}
		if r := d.Candidates[1].Reason; !strings.HasPrefix(r, "within 10% of this node, which keeps its own requests") {
			t.Fatalf("peer's reason %q", r)
		}
		hosts[1].Figures = figures(12, GradeHwShunt, 4)
		d = New(Config{Rand: fixed(x)}).Weigh("m", req, hosts)
		if _, self, _ := d.Chosen(); self {
			t.Fatalf("draw %v: kept a request 20%% dearer than a peer", x)
		}
	}
}
