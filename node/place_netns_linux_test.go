package node

// The placement namespace test runs each of three nodes as a process (this
// test binary re-executed as TestPlacementNetnsHelper) in its own network
// namespace on one LAN segment (netnslab): placement over real QUIC
// between processes, as between machines. The parent drives each node by
// commands on its stdin; the node answers "@ ..." lines.

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/internal/netnslab"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// The helper's environment: its address, and the watts its reference
// model is metered at (none: it serves no model).
const (
	envPlaceAddr  = "MESHNODE_PLACE_NETNS_ADDR"
	envPlaceWatts = "MESHNODE_PLACE_NETNS_WATTS"
	// For the benchmark: a host's time per output token (a paced engine
	// metered by the estimator on the real clock, in place of the fake
	// clock), its slots, and whether A places by RTT alone.
	envPlacePace    = "MESHNODE_PLACE_NETNS_PACE"
	envPlaceSlots   = "MESHNODE_PLACE_NETNS_SLOTS"
	envPlaceRTTOnly = "MESHNODE_PLACE_NETNS_RTT_ONLY"
)

const placeNetnsPort = 9340

// TestPlacementNetnsHelper is one node of TestPlacementNetns when
// envPlaceAddr is set; otherwise it is not a test and skips.
//
// Commands: "ask P" (a request to this node; answers "served DID"),
// "ask-bg P" then "wait-bg" (the same in the background), "join ID@ADDR",
// "figures N" (waits until N peers host the model with measured figures),
// "lower ID1 ID2" (waits until peer ID1 advertises less per output token
// than ID2), "free ID N" (waits until peer ID advertises a free slot
// with at least N receipts: not a free slot it advertised before its
// last serve, which may still be the latest this node has),
// "receipts" (this node's receipts in its placement window),
// "busy" (waits until this node's one slot is taken), "hold" and
// "release" (hold this node's serves before their first token, or let them
// run), and "lie" (advertise a hundredth of the measured energy).
func TestPlacementNetnsHelper(t *testing.T) {
	addr := os.Getenv(envPlaceAddr)
	if addr == "" {
		t.Skip("helper process of the placement namespace test only")
	}
	say := func(format string, args ...any) { fmt.Printf("@ "+format+"\n", args...) }
	watts, _ := strconv.ParseFloat(os.Getenv(envPlaceWatts), 64)
	cfg := Config{QUICAddr: netip.AddrPortFrom(netip.MustParseAddr(addr), placeNetnsPort).String()}
	var lie atomic.Bool
	gate := make(chan struct{})
	v := &valve{gate: gate}
	v.open()
	pace, _ := time.ParseDuration(os.Getenv(envPlacePace))
	slots, _ := strconv.Atoi(os.Getenv(envPlaceSlots))
	if watts > 0 {
		cfg = meteredConfig(cfg, watts)
		cfg.API = APIConfig{Concurrency: max(1, slots), QueueDepth: -1}
		if pace > 0 {
			cfg.API.QueueDepth = 0 // the default: load queues
		}
	} else {
		t.Setenv("MESHNODE_DEFAULT_MODEL", "none")
	}
	n, _ := startNodeWith(t, cfg, func(n *Node) {
		n.placeByRTT = os.Getenv(envPlaceRTTOnly) != ""
		switch {
		case watts > 0 && pace > 0:
			n.meterConfig = meters.Config{Meter: meters.Estimator, EstimatorWatts: watts}
			n.wrapModel = func(m localModel) localModel { return pacedModel{m, pace} }
		case watts > 0:
			meterHost(n, watts, gate)
		}
		n.claimHook = func(l *nodev1.MeshnodeModelLoad) {
			if lie.Load() {
				l.UjPerPromptTokenMilli /= 100
				l.UjPerOutputTokenMilli /= 100
			}
		}
	})
	defer v.shut()
	say("addr %s@%s %s", n.key.ID(), cfg.QUICAddr, n.steward.DID())

	var bg sync.WaitGroup
	var bgAnswer placedAnswer
	var bgErr error
	peerFigure := func(id identity.EndpointID) (uint64, bool) {
		for _, p := range n.mesh.PeersHosting(ReferenceModel) {
			if f, ok := peerFigures(p.Announcement, ReferenceModel); ok && p.ID == id && f.Receipts > 0 {
				return f.UJPerOutputTokenMilli, true
			}
		}
		return 0, false
	}
	until := func(cond func() bool) bool {
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
		return true
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		cmd, arg, _ := strings.Cut(lines.Text(), " ")
		switch cmd {
		case "ask":
			a, err := askAt(n.HTTPAddr().String(), arg)
			if err != nil {
				say("err %v", err)
				continue
			}
			say("served %s %s", a.steward, a.route)
		case "ask-bg":
			bg.Add(1)
			go func() { defer bg.Done(); bgAnswer, bgErr = askAt(n.HTTPAddr().String(), arg) }()
			say("started")
		case "wait-bg":
			bg.Wait()
			if bgErr != nil {
				say("err %v", bgErr)
				continue
			}
			say("served %s %s", bgAnswer.steward, bgAnswer.route)
		case "join":
			id, ap, _ := strings.Cut(arg, "@")
			pid, err := identity.ParseEndpointID(id)
			if err != nil {
				say("err %v", err)
				continue
			}
			if _, err := n.mesh.Dial(t.Context(), mesh.EndpointAddr{ID: pid, Addrs: []netip.AddrPort{netip.MustParseAddrPort(ap)}}); err != nil {
				say("err %v", err)
				continue
			}
			say("joined")
		case "figures":
			want, _ := strconv.Atoi(arg)
			if !until(func() bool { return hostsFigures(n, want, 1) }) {
				say("err no measured figures from %d hosts", want)
				continue
			}
			say("figures")
		case "lower":
			a, b, _ := strings.Cut(arg, " ")
			ida, _ := identity.ParseEndpointID(a)
			idb, _ := identity.ParseEndpointID(b)
			if !until(func() bool {
				fa, oka := peerFigure(ida)
				fb, okb := peerFigure(idb)
				return oka && okb && fa < fb
			}) {
				say("err %s never advertised less than %s", ida.Short(), idb.Short())
				continue
			}
			say("lower")
		case "free":
			ids, least, _ := strings.Cut(arg, " ")
			id, _ := identity.ParseEndpointID(ids)
			receipts, _ := strconv.ParseUint(least, 10, 32)
			if !until(func() bool {
				for _, p := range n.mesh.PeersHosting(ReferenceModel) {
					if f, ok := peerFigures(p.Announcement, ReferenceModel); ok && p.ID == id && f.FreeSlots > 0 && f.Receipts >= uint32(receipts) {
						return true
					}
				}
				return false
			}) {
				say("err %s never advertised a free slot after %d receipts", id.Short(), receipts)
				continue
			}
			say("free")
		case "receipts":
			_, _, _, count := n.place.window(ReferenceModel).Energy()
			say("receipts %d", count)
		case "busy":
			if !until(func() bool { l, _ := n.place.api.Load().Load(ReferenceModel); return l.Free == 0 }) {
				say("err the slot was never taken")
				continue
			}
			say("busy")
		case "hold":
			v.shut()
			say("ok")
		case "release":
			v.open()
			say("ok")
		case "lie":
			lie.Store(true)
			say("ok")
		case "load":
			// load K N BUDGET_MS: K clients send N requests in all; the
			// answer is "load TOKENS NANOSECONDS UJ DID=COUNT...".
			var k, total, budget int
			fmt.Sscan(arg, &k, &total, &budget)
			tokens, took, uj, by, err := placeLoad(n.HTTPAddr().String(), k, total, budget)
			if err != nil {
				say("err %v", err)
				continue
			}
			var counts []string
			for did, c := range by {
				counts = append(counts, fmt.Sprintf("%s=%d", did, c))
			}
			say("load %d %d %d %s", tokens, took.Nanoseconds(), uj, strings.Join(counts, " "))
		default:
			say("err unknown command %q", cmd)
		}
	}
}

// valve lets serves past a heldModel's gate while open.
type valve struct {
	gate chan struct{}
	mu   sync.Mutex
	stop chan struct{}
}

func (v *valve) open() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stop != nil {
		return
	}
	stop := make(chan struct{})
	v.stop = stop
	go func() {
		for {
			select {
			case v.gate <- struct{}{}:
			case <-stop:
				return
			}
		}
	}()
}

func (v *valve) shut() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stop != nil {
		close(v.stop)
		v.stop = nil
	}
}

// TestPlacementNetns: the in-process placement tests' three cases with
// each node a process in its own network namespace. B (10 W) and C
// (100 W) serve the reference model, one slot each and no queue; A serves
// nothing. A's requests go to B; with B's slot held, a request B is asked
// spills to C; and once C advertises a hundredth of what it spends, A
// sends it one request, then ranks it down on its receipt.
func TestPlacementNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts three node processes")
	}
	lab := netnslab.New(t, 3)
	type node struct {
		c         *netnslab.Child
		id, addr  string
		did, name string
	}
	ask := func(n node, cmd string) string {
		t.Helper()
		out, err := n.c.Ask(cmd)
		if err != nil {
			t.Fatalf("%s: %s: %v\n%s", n.name, cmd, err, n.c.Log())
		}
		return out
	}
	servedBy := func(n node, prompt string, want node) string {
		t.Helper()
		out := ask(n, "ask "+prompt)
		if !strings.HasPrefix(out, "served "+want.did+" ") {
			t.Fatalf("%s asked %q: %s; want served by %s", n.name, prompt, out, want.name)
		}
		return out
	}
	start := func(i int, name string, watts float64) node {
		t.Helper()
		c := lab.Start(i, name, "TestPlacementNetnsHelper", envPlaceAddr+"="+netnslab.Addr(i), fmt.Sprintf("%s=%g", envPlaceWatts, watts))
		out, ok := c.Expect("addr ")
		if !ok {
			t.Fatalf("%s did not start\n%s", name, c.Log())
		}
		ep, did, _ := strings.Cut(out, " ")
		id, _, _ := strings.Cut(ep, "@")
		return node{c: c, id: id, addr: ep, did: did, name: name}
	}
	// Each host serves two requests of its own before it has peers.
	b := start(1, "B", 10)
	servedBy(b, "w", b)
	servedBy(b, "warm up the host", b)
	c := start(2, "C", 100)
	servedBy(c, "w", c)
	servedBy(c, "warm up the host", c)
	ask(c, "join "+b.addr)
	a := start(0, "A", 0)
	// free waits until A sees host's slot free after its last serve.
	free := func(host node) {
		t.Helper()
		count, _ := strings.CutPrefix(ask(host, "receipts"), "receipts ")
		ask(a, "free "+host.id+" "+count)
	}
	ask(a, "join "+b.addr)
	ask(a, "join "+c.addr)
	ask(a, "figures 2")
	ask(b, "figures 1")

	// The cheaper host. Its one slot is taken while it serves, and its
	// gossip may show it so for a while after: A waits until it does not.
	// C's too, after its own serves, or A may pass C over as busy rather
	// than as costlier.
	free(c)
	for i := range 4 {
		free(b)
		out := servedBy(a, fmt.Sprintf("cheap %d", i), b)
		if !strings.Contains(out, "placed by ") || !strings.Contains(out, ": costlier") {
			t.Fatalf("B's route %q does not say how A placed it", out)
		}
	}

	// B's slot held: B spills to C.
	ask(b, "hold")
	ask(b, "ask-bg hold the slot")
	ask(b, "busy")
	if out := servedBy(b, "spill", c); !strings.Contains(out, "self: queue full") {
		t.Fatalf("C's route %q, want B's queue full", out)
	}
	ask(b, "release")
	if out := ask(b, "wait-bg"); !strings.HasPrefix(out, "served "+b.did+" ") {
		t.Fatalf("the held request: %s; want served by B", out)
	}

	// C under-claims: believed once, then ranked down.
	ask(c, "lie")
	ask(a, "lower "+c.id+" "+b.id)
	free(b)
	free(c)
	servedBy(a, "believe", c)
	for i := range 3 {
		free(b)
		out := servedBy(a, fmt.Sprintf("doubt %d", i), b)
		if !strings.Contains(out, "; its receipts ran 100.0x its claims") {
			t.Fatalf("B's route %q, want it to say why C was ranked down", out)
		}
	}
}

// pacedModel serves its model at pace per output token, as a device that
// decodes at that rate would, without taking a CPU while it waits.
type pacedModel struct {
	localModel
	pace time.Duration
}

func (m pacedModel) Engine() engine.Engine { return pacedEngine{m.localModel.Engine(), m.pace} }

type pacedEngine struct {
	engine.Engine
	pace time.Duration
}

func (e pacedEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	return e.Engine.Serve(ctx, req, prompt, func(tok uint32) error {
		select {
		case <-time.After(e.pace):
		case <-ctx.Done():
			return ctx.Err()
		}
		return emit(tok)
	})
}

// placeLoad has k clients send total requests for 16 tokens each to the
// node at addr, with the latency budget budgetMS (0: none), and sums what
// came back: output tokens, the receipts' energy, and who served.
func placeLoad(addr string, k, total, budgetMS int) (tokens int, took time.Duration, uj uint64, by map[string]int, err error) {
	meta := ""
	if budgetMS > 0 {
		meta = fmt.Sprintf(`,"metadata":{"latency_budget_ms":"%d"}`, budgetMS)
	}
	var mu sync.Mutex
	by = map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(total); i = next.Add(1) {
				a, aerr := askWith(addr, fmt.Sprintf(`{"model":"mesh-reference","max_tokens":16,"prompt":"load %d"%s}`, i, meta))
				mu.Lock()
				if aerr != nil && err == nil {
					err = aerr
				}
				tokens += a.tokens
				uj += a.uj
				by[a.steward]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return tokens, time.Since(start), uj, by, err
}
