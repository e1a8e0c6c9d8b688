package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// meteredHost starts a node serving the reference model whose serves cost
// exactly watts × 1 ms per output token: the estimator meter on a fake
// clock that the engine advances by a millisecond a token (onCUDA without
// CUDA), so that energy per token differs between hosts by their watts
// alone, however loaded the machine. Its modelled cost, what it
// advertises before its first receipt, is the same figure. gate, when
// set, holds each serve until it is closed or sent on.
func meteredHost(t *testing.T, watts float64, cfg Config, gate chan struct{}, setup func(*Node)) *Node {
	t.Helper()
	n, _ := startNodeWith(t, meteredConfig(cfg, watts), func(n *Node) {
		meterHost(n, watts, gate)
		if setup != nil {
			setup(n)
		}
	})
	return n
}

// meteredConfig is cfg serving the reference model at watts × 1 ms a
// token as its modelled cost.
func meteredConfig(cfg Config, watts float64) Config {
	cfg.Model = []ModelConfig{{Path: ReferenceModel, UJPerToken: uint64(watts * 1000)}}
	return cfg
}

// meterHost gives n meteredHost's meter and model wrapper.
func meterHost(n *Node, watts float64, gate chan struct{}) {
	clk := hwtest.NewClock(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	n.meterConfig = meters.Config{Meter: meters.Estimator, EstimatorWatts: watts, Clock: clk}
	n.wrapModel = func(m localModel) localModel {
		var lm localModel = onCUDA{m, clk, false}
		if gate != nil {
			lm = heldModel{lm, gate}
		}
		return lm
	}
}

// heldModel holds each serve of its model, before its first token, until
// gate yields one (gatedModel holds every serve after its first token
// once, until its gate opens for all).
type heldModel struct {
	localModel
	gate chan struct{}
}

func (m heldModel) Engine() engine.Engine { return heldEngine{m.localModel.Engine(), m.gate} }

type heldEngine struct {
	engine.Engine
	gate chan struct{}
}

func (e heldEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	select {
	case <-e.gate:
	case <-ctx.Done():
		return engine.Outcome{}, ctx.Err()
	}
	return e.Engine.Serve(ctx, req, prompt, emit)
}

// placedAnswer is what the tests read of an answer: who sealed its
// receipt, and usage.placement.
type placedAnswer struct {
	steward   string
	tokens    int    // completion tokens
	uj        uint64 // the receipt's energy: measured, else estimated
	placement struct {
		Route      string `json:"route"`
		Candidates []struct {
			Host       string  `json:"host"`
			Trust      float64 `json:"trust"`
			Admissible bool    `json:"admissible"`
			Chosen     bool    `json:"chosen"`
			Reason     string  `json:"reason"`
		} `json:"candidates"`
	}
	route string // the receipt's
}

func askPlaced(t *testing.T, n *Node, prompt string) placedAnswer {
	t.Helper()
	a, err := askAt(n.HTTPAddr().String(), prompt)
	if err != nil {
		t.Error(err)
	}
	return a
}

// askAt asks the node whose API is at addr for 8 tokens of the reference
// model.
func askAt(addr, prompt string) (placedAnswer, error) {
	return askWith(addr, fmt.Sprintf(`{"model":"mesh-reference","max_tokens":8,"prompt":%q}`, prompt))
}

// askWith posts body to the completions endpoint of the node whose API
// is at addr.
func askWith(addr, body string) (placedAnswer, error) {
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return placedAnswer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var answer struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
			Energy           struct {
				Receipt struct {
					Steward     string  `json:"steward"`
					Route       string  `json:"route"`
					MeasuredUJ  *uint64 `json:"measured_uj"`
					EstimatedUJ uint64  `json:"estimated_uj"`
				} `json:"receipt"`
			} `json:"energy"`
			Placement json.RawMessage `json:"placement"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || resp.StatusCode != http.StatusOK {
		return placedAnswer{}, fmt.Errorf("%s: %d %s", body, resp.StatusCode, b)
	}
	r := answer.Usage.Energy.Receipt
	a := placedAnswer{steward: r.Steward, route: r.Route, tokens: answer.Usage.CompletionTokens, uj: r.EstimatedUJ}
	if r.MeasuredUJ != nil {
		a.uj = *r.MeasuredUJ
	}
	if len(answer.Usage.Placement) > 0 {
		if err := json.Unmarshal(answer.Usage.Placement, &a.placement); err != nil {
			return a, fmt.Errorf("usage.placement %s: %v", answer.Usage.Placement, err)
		}
	}
	return a, nil
}

// hostsFigures reports whether n's peers hosting the reference model
// (hosts of them) all announce figures from at least receipts receipts.
func hostsFigures(n *Node, hosts, receipts int) bool {
	peers := n.mesh.PeersHosting(ReferenceModel)
	if len(peers) != hosts {
		return false
	}
	for _, p := range peers {
		f, ok := peerFigures(p.Announcement, ReferenceModel)
		if !ok || int(f.Receipts) < receipts {
			return false
		}
	}
	return true
}

// threeNodes starts B (cheap: 10 W, 10 mJ an output token) and C (dear:
// 100 W), both serving the reference model, and A serving nothing,
// joined to both, with C joined to B. Each host has served two requests
// of its own first, before it had peers (so it served them itself), with
// prompts of different lengths, which its figures tell apart; A and B
// have heard the measured figures.
func threeNodes(t *testing.T, bCfg Config, bGate chan struct{}, cSetup func(*Node)) (a, b, c *Node) {
	t.Helper()
	t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	warm := func(h *Node) {
		for _, p := range []string{"w", "warm up the host"} {
			if got := askPlaced(t, h, p); got.steward != h.steward.DID() {
				t.Fatalf("a warm-up on a lone host was served by %s", got.steward)
			}
		}
	}
	b = meteredHost(t, 10, bCfg, bGate, nil)
	if bGate != nil {
		go func() { bGate <- struct{}{}; bGate <- struct{}{} }()
	}
	warm(b)
	c = meteredHost(t, 100, Config{}, nil, cSetup)
	warm(c)
	if _, err := c.mesh.Dial(t.Context(), b.mesh.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	a, _ = startNode(t, Config{Join: []string{b.invite, c.invite}})
	// Each host announces its figures at most every pushGap, so A, joined
	// right after C's warm-up, may first hear C's from one receipt; it
	// waits for the announcement of both.
	waitFor(t, "A to hear both hosts' measured figures", func() bool { return hostsFigures(a, 2, 2) })
	for _, p := range a.mesh.PeersHosting(ReferenceModel) {
		f, _ := peerFigures(p.Announcement, ReferenceModel)
		want := uint64(10_000_000) // 10 W × 1 ms, in thousandths of a µJ
		if p.ID == c.key.ID() {
			want = 100_000_000
			if cSetup != nil {
				want /= 100
			}
		}
		if f.UJPerOutputTokenMilli != want || f.UJPerPromptTokenMilli != 0 || f.Grade.String() != "Estimator" || f.Receipts != 2 {
			t.Fatalf("A sees %s's figures %+v, want %d milli-uJ an output token, none a prompt token, from 2 Estimator receipts", p.ID.Short(), f, want)
		}
	}
	waitFor(t, "B to hear C's measured figures", func() bool { return hostsFigures(b, 1, 2) })
	return a, b, c
}

// TestPlacementCheaperHost: of two hosts of the model, the one that spends
// less per token serves what a third node is asked, and the answer says
// why the other lost, in usage.placement and in the receipt's route.
func TestPlacementCheaperHost(t *testing.T) {
	a, b, c := threeNodes(t, Config{}, nil, nil)
	for i := range 6 {
		got := askPlaced(t, a, fmt.Sprintf("cheap %d", i))
		if got.steward != b.steward.DID() {
			t.Fatalf("request %d served by %s, want B (10 W) over C (100 W): %s", i, got.steward, got.placement.Route)
		}
		// B's receipt, and the usage it answered with, record that A
		// placed it there, and why C lost.
		want := "placed by " + a.key.ID().Short() + ": " + b.key.ID().Short() + ": best of 2 weighed (Estimator, est 80000 uJ"
		if !strings.Contains(got.route, "; mesh: "+want) || !strings.Contains(got.route, c.key.ID().Short()+": costlier") {
			t.Fatalf("receipt route %q, want it to hold %q and C's reason", got.route, want)
		}
		if !strings.HasSuffix(got.route, got.placement.Route) {
			t.Fatalf("usage.placement.route %q is not the receipt's mesh placement %q", got.placement.Route, got.route)
		}
	}

	// Asked itself, C weighs itself against B, and B serves.
	if got := askPlaced(t, c, "dear here"); got.steward != b.steward.DID() || !strings.Contains(got.route, "self: costlier") {
		t.Fatalf("C's request served by %s, route %q; want B, C costlier", got.steward, got.route)
	}
	// Asked itself, B serves, and its answer lists both candidates.
	got := askPlaced(t, b, "cheap here")
	if got.steward != b.steward.DID() || len(got.placement.Candidates) != 2 ||
		!strings.Contains(got.route, "; mesh: self: best of 2 weighed") {
		t.Fatalf("B's request served by %s, route %q, placement %+v; want B itself", got.steward, got.route, got.placement)
	}
	for _, cand := range got.placement.Candidates {
		switch cand.Host {
		case "self":
			if !cand.Chosen || !cand.Admissible {
				t.Fatalf("B's own candidate %+v, want chosen", cand)
			}
		case c.key.ID().String():
			if cand.Chosen || !strings.HasPrefix(cand.Reason, "costlier") {
				t.Fatalf("C's candidate %+v, want costlier", cand)
			}
		default:
			t.Fatalf("candidate %q is neither host", cand.Host)
		}
	}
}

// TestPlacementSpills: with B's one slot taken (and no queue), a request
// B is asked spills to C instead of a 429, and one A is asked goes to C.
func TestPlacementSpills(t *testing.T) {
	gate := make(chan struct{})
	a, b, c := threeNodes(t, Config{API: APIConfig{Concurrency: 1, QueueDepth: -1}}, gate, nil)

	var wg sync.WaitGroup
	wg.Add(1)
	var held placedAnswer
	go func() { defer wg.Done(); held = askPlaced(t, b, "hold the slot") }()
	waitFor(t, "B's slot to be taken", func() bool {
		l, _ := b.place.api.Load().Load(ReferenceModel)
		return l.Free == 0
	})

	got := askPlaced(t, b, "spill")
	if got.steward != c.steward.DID() {
		t.Fatalf("with its slot taken B's request was served by %s, want C", got.steward)
	}
	if !strings.Contains(got.route, "placed by "+b.key.ID().Short()+": ") || !strings.Contains(got.route, "self: queue full (1 slots busy, 0 queued of 0)") {
		t.Fatalf("C's receipt route %q, want it to say B placed it there, its own queue being full", got.route)
	}

	waitFor(t, "A to hear that B is full", func() bool {
		for _, p := range a.mesh.PeersHosting(ReferenceModel) {
			if f, ok := peerFigures(p.Announcement, ReferenceModel); p.ID == b.key.ID() && ok && f.FreeSlots == 0 {
				return true
			}
		}
		return false
	})
	got = askPlaced(t, a, "elsewhere")
	if got.steward != c.steward.DID() {
		t.Fatalf("with B full A's request was served by %s, want C", got.steward)
	}
	if !strings.Contains(got.route, b.key.ID().Short()+": queue full") {
		t.Fatalf("C's receipt route %q, want B passed over with its queue full", got.route)
	}

	close(gate)
	wg.Wait()
	if held.steward != b.steward.DID() {
		t.Fatalf("the held request was served by %s, want B", held.steward)
	}
}

// TestPlacementClaimsChecked: C claims a hundredth of what it spends, so
// it looks cheapest and is sent the first request; its receipt shows the
// truth, and from then on A ranks it down and sends requests to B.
func TestPlacementClaimsChecked(t *testing.T) {
	a, b, c := threeNodes(t, Config{}, nil, func(n *Node) {
		n.claimHook = func(l *nodev1.MeshnodeModelLoad) {
			l.UjPerPromptTokenMilli /= 100
			l.UjPerOutputTokenMilli /= 100
		}
	})
	first := askPlaced(t, a, "believe")
	if first.steward != c.steward.DID() {
		t.Fatalf("first request served by %s, want C on its under-claim: %s", first.steward, first.placement.Route)
	}
	if tr := a.place.placer.Trust(c.key.ID(), ReferenceModel); tr < 50 {
		t.Fatalf("A's trust factor for C %v after its receipt, want about 100", tr)
	}
	// A's status shows it.
	var shown bool
	for _, p := range a.Status().Peers {
		for _, pl := range p.Placement {
			if p.ID == c.key.ID().String() && pl.Model == ReferenceModel {
				shown = pl.Trust >= 50 && pl.UJPerOutputToken == 1000 && pl.EnergyGrade == "Estimator"
			}
		}
	}
	if !shown {
		t.Fatalf("A's status peers %+v, want C's placement with its trust factor", a.Status().Peers)
	}
	for i := range 4 {
		got := askPlaced(t, a, fmt.Sprintf("doubt %d", i))
		if got.steward != b.steward.DID() {
			t.Fatalf("request %d after C's receipt served by %s, want B: %s", i, got.steward, got.placement.Route)
		}
		if !strings.Contains(got.route, c.key.ID().Short()+": costlier") || !strings.Contains(got.route, "x its claims") {
			t.Fatalf("B's route %q, want it to say C was ranked down on its receipts", got.route)
		}
	}
}
