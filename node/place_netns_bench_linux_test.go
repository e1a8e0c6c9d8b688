package node

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/internal/netnslab"
)

// BenchmarkPlacementNetns: a 3-node mesh, each node a process in its own
// network namespace (TestPlacementNetnsHelper). A serves nothing and
// takes the load: 8 clients, 64 requests of 16 tokens each per round. B
// and C serve the reference model paced at 2 ms a token (a device that
// decodes at 500 tok/s a sequence, without taking a CPU), two slots each,
// billed by the estimator on the real clock.
//
//   - hosts=1 and hosts=2: the model on B alone (10 W), then on B and C
//     (10 W each), the requests with a latency budget of 100 ms (a queue
//     that would pass it sends work to the other host): the mesh's
//     aggregate tok/s, and the ratio.
//   - energy and rtt: B at 10 W, C at 40 W, with B 4 ms further from A
//     than C where the kernel has netem (otherwise both are on the same
//     bridge and RTT-only placement picks by measured jitter): the mesh's
//     joules per output token (the receipts' energy over the tokens) with
//     energy-aware placement against RTT-only placement (the rule before
//     it: admission state, then RTT), and the share C served.
//
// Rounds run b.N times each; make bench-placement runs it (root, iproute2).
func BenchmarkPlacementNetns(b *testing.B) {
	type config struct {
		name    string
		cWatts  float64 // 0: C serves nothing
		far     bool    // B further from A
		rttOnly bool
		budget  int // the requests' latency budget, ms (0: the default, 60 s)
	}
	res := map[string]placeResult{}
	for _, cf := range []config{
		{name: "hosts=1", budget: 100},
		{name: "hosts=2", cWatts: 10, budget: 100},
		{name: "energy", cWatts: 40, far: true},
		{name: "rtt", cWatts: 40, far: true, rttOnly: true},
	} {
		b.Run(cf.name, func(b *testing.B) {
			lab := netnslab.New(b, 3)
			start := func(i int, name string, env ...string) (*netnslab.Child, string, string) {
				env = append(env, envPlaceAddr+"="+netnslab.Addr(i), envPlacePace+"=2ms", envPlaceSlots+"=2")
				c := lab.Start(i, name, "TestPlacementNetnsHelper", env...)
				out, ok := c.Expect("addr ")
				if !ok {
					b.Fatalf("%s did not start\n%s", name, c.Log())
				}
				ep, did, _ := strings.Cut(out, " ")
				return c, ep, did
			}
			ask := func(c *netnslab.Child, cmd string) string {
				out, err := c.Ask(cmd)
				if err != nil {
					b.Fatalf("%s: %v\n%s", cmd, err, c.Log())
				}
				return out
			}
			bc, bAddr, _ := start(1, "B", envPlaceWatts+"=10")
			ask(bc, "ask w")
			ask(bc, "ask warm up the host")
			hosts := 1
			var cAddr, cDID string
			if cf.cWatts > 0 {
				var cc *netnslab.Child
				cc, cAddr, cDID = start(2, "C", fmt.Sprintf("%s=%g", envPlaceWatts, cf.cWatts))
				ask(cc, "ask w")
				ask(cc, "ask warm up the host")
				ask(cc, "join "+bAddr)
				hosts = 2
			}
			if cf.far && lab.Netem {
				// B's egress: 4 ms more on every round trip to B.
				if err := netnslab.IP("tc", "-n", lab.NS[1], "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "4ms"); err != nil {
					b.Fatal(err)
				}
			}
			ac, _, _ := start(0, "A", rttEnv(cf.rttOnly)...)
			ask(ac, "join "+bAddr)
			if cAddr != "" {
				ask(ac, "join "+cAddr)
			}
			ask(ac, fmt.Sprintf("figures %d", hosts))
			res[cf.name] = placeRounds(b, ac, cDID, cf.budget)
		})
	}
	one, two, en, rtt := res["hosts=1"], res["hosts=2"], res["energy"], res["rtt"]
	if one.tokPerS > 0 && two.tokPerS > 0 {
		fmt.Printf("placement: aggregate %.0f tok/s on 1 host, %.0f on 2 (%.2fx)\n", one.tokPerS, two.tokPerS, two.tokPerS/one.tokPerS)
	}
	if en.mJPerTok > 0 && rtt.mJPerTok > 0 {
		fmt.Printf("placement: %.2f mJ/token energy-aware (%.0f%% on the 40 W host), %.2f mJ/token RTT-only (%.0f%%): %.2fx\n",
			en.mJPerTok, en.cShare*100, rtt.mJPerTok, rtt.cShare*100, en.mJPerTok/rtt.mJPerTok)
	}
}

func rttEnv(rttOnly bool) []string {
	if rttOnly {
		return []string{envPlaceRTTOnly + "=1"}
	}
	return nil
}

// placeResult is one configuration's figures.
type placeResult struct {
	tokPerS, mJPerTok, cShare float64
}

// placeRounds runs b.N rounds of load through a and reports the mesh's
// tok/s, mJ per output token and the share of requests cDID served.
func placeRounds(b *testing.B, a *netnslab.Child, cDID string, budgetMS int) (r placeResult) {
	var tokens, requests, onC int
	var ns, uj float64
	b.ResetTimer()
	for range b.N {
		out, err := a.Ask(fmt.Sprintf("load 8 64 %d", budgetMS))
		if err != nil {
			b.Fatalf("load: %v\n%s", err, a.Log())
		}
		f := strings.Fields(strings.TrimPrefix(out, "load "))
		if len(f) < 3 {
			b.Fatalf("load: %q", out)
		}
		tk, _ := strconv.Atoi(f[0])
		took, _ := strconv.ParseFloat(f[1], 64)
		e, _ := strconv.ParseFloat(f[2], 64)
		tokens, ns, uj = tokens+tk, ns+took, uj+e
		for _, kv := range f[3:] {
			did, c, _ := strings.Cut(kv, "=")
			n, _ := strconv.Atoi(c)
			requests += n
			if did == cDID {
				onC += n
			}
		}
	}
	b.StopTimer()
	r.tokPerS = float64(tokens) / (ns / 1e9)
	r.mJPerTok = uj / 1000 / float64(tokens)
	r.cShare = float64(onC) / float64(max(1, requests))
	b.ReportMetric(r.tokPerS, "tok/s")
	b.ReportMetric(r.mJPerTok, "mJ/tok")
	b.ReportMetric(r.cShare*100, "%onC")
	return r
}
