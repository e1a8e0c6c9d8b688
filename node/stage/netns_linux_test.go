package stage

// The namespace tests run each mesh node as a real process, in its own
// network namespace, on one LAN segment (a bridge in a further namespace,
// addresses 10.78.0.0/24 that the test assigns): the stage pipeline goes
// over real QUIC between processes, as it would between machines. Each
// node is this test binary re-executed in helper mode (TestStageNetnsHelper,
// which skips unless asked to be a node): a goroutine cannot safely be
// moved into a namespace, as quic-go's goroutines may run on any thread.
//
// Delay comes from netem on each node's interface (half the round trip on
// each side's egress), or, where the kernel has no sch_netem, from a
// user-space relay in each node (delayRelay), which the benchmark reports.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/internal/netnslab"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// The helper's environment: its role ("head" or "stage"), its address,
// whether it relays (and so advertises the relay), and for the head the
// stage nodes to join ("hexid@addr:port,...", in stage order).
const (
	envRole  = "MESHNODE_STAGE_NETNS_ROLE"
	envAddr  = "MESHNODE_STAGE_NETNS_ADDR"
	envRelay = "MESHNODE_STAGE_NETNS_RELAY"
	envBoot  = "MESHNODE_STAGE_NETNS_BOOT"
)

const (
	netnsMeshPort  = 9338
	netnsRelayPort = 9339
	netnsCtx       = 256 // decode context; trimmed back to the prompt when full
)

// The layer ranges of the built-in model's 4 blocks in 2 and 3 stages,
// the head's first.
var netnsSplits = map[int][]model.LayerRange{
	2: {{Lo: 0, Hi: 2}, {Lo: 2, Hi: 4}},
	3: {{Lo: 0, Hi: 1}, {Lo: 1, Hi: 3}, {Lo: 3, Hi: 4}},
}

var netnsPrompt = []uint32{1, 319, 767, 17042, 2039, 964, 263, 2594}

// TestStageNetnsHelper is one node of the namespace tests when envRole is
// set; otherwise it is not a test and skips.
func TestStageNetnsHelper(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("helper process of the namespace tests only")
	}
	if err := runNetnsNode(t, role); err != nil {
		fmt.Printf("@ err %v\n", err)
		t.Fatal(err)
	}
}

// runNetnsNode serves a mesh node (and, for role "stage", a stage Server)
// at envAddr until its stdin closes; the head also takes the commands of
// netnsHead from stdin. Lines for the parent start with "@ ".
func runNetnsNode(t *testing.T, role string) error {
	ip, err := netip.ParseAddr(os.Getenv(envAddr))
	if err != nil {
		return err
	}
	key, err := identity.GenerateKey(nil)
	if err != nil {
		return err
	}
	cfg := mesh.Config{ListenAddr: netip.AddrPortFrom(ip, netnsMeshPort).String(), MeshID: "stage-netns",
		Version: "netns-test", GossipInterval: 300 * time.Millisecond}
	var relay *delayRelay
	if os.Getenv(envRelay) != "" {
		if relay, err = newDelayRelay(netip.AddrPortFrom(ip, netnsRelayPort), netip.AddrPortFrom(ip, netnsMeshPort)); err != nil {
			return err
		}
		defer relay.close()
		cfg.AdvertiseAddrs = []netip.AddrPort{relay.addr()}
	}
	var stages []mesh.EndpointAddr
	if boot := os.Getenv(envBoot); boot != "" {
		for _, e := range strings.Split(boot, ",") {
			id, addr, _ := strings.Cut(e, "@")
			pid, err := identity.ParseEndpointID(id)
			if err != nil {
				return err
			}
			ap, err := netip.ParseAddrPort(addr)
			if err != nil {
				return err
			}
			stages = append(stages, mesh.EndpointAddr{ID: pid, Addrs: []netip.AddrPort{ap}})
		}
	}
	cfg.Bootstrap = stages
	n, err := mesh.New(cfg, key, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- n.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()
	f := fortunes(t)
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	adv := n.LocalAddr()
	if relay != nil {
		adv = relay.addr()
	}
	lines := bufio.NewScanner(os.Stdin)
	if role == "stage" {
		srv := &Server{Models: models{fortunesDigest: f}, Backend: be, Dial: MeshDialer{n}}
		if err := Register(n, srv); err != nil {
			return err
		}
		defer srv.Stop()
		if err := n.UpdateSelf(); err != nil {
			return err
		}
		fmt.Printf("@ id %s@%s\n", n.ID(), adv)
		// Peer counts, so that the parent knows when every node has
		// admitted every other (a stage forwards to its next one directly).
		stop := make(chan struct{})
		go func() {
			last := -1
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if c := len(n.Peers()); c != last {
					last = c
					fmt.Printf("@ peers %d\n", c)
				}
			}
		}()
		for lines.Scan() {
			if d, ok := strings.CutPrefix(lines.Text(), "delay "); ok && relay != nil {
				v, _ := time.ParseDuration(d)
				relay.setDelay(v)
				fmt.Println("@ ok")
			}
		}
		close(stop)
		return nil
	}
	h := &netnsHead{n: n, f: f, be: be, stages: stages, relay: relay}
	deadline := time.Now().Add(20 * time.Second)
	for !h.meshed() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the head did not admit the stage nodes, advertising meshnode-stage/1, within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("@ ready")
	for lines.Scan() {
		out, err := h.do(t, strings.Fields(lines.Text()))
		if err != nil {
			fmt.Printf("@ err %v\n", err)
			continue
		}
		fmt.Printf("@ %s\n", out)
	}
	h.close()
	return nil
}

// netnsHead is the head node's side: stage 0 and the driver.
type netnsHead struct {
	n      *mesh.Node
	f      *gguf.File
	be     *cpu.Backend
	stages []mesh.EndpointAddr
	relay  *delayRelay

	// One open run: a Pipeline, or the whole model's session for 1 stage.
	p    *Pipeline
	s    *model.Session
	tok  uint32
	held int
}

func (h *netnsHead) meshed() bool {
	for _, st := range h.stages {
		p, ok := h.n.Peer(st.ID)
		if !ok || !advertises(p) {
			return false
		}
	}
	return true
}

func (h *netnsHead) places(s int) []Placement {
	ids := []identity.EndpointID{h.n.ID()}
	for _, st := range h.stages {
		ids = append(ids, st.ID)
	}
	var out []Placement
	for i, r := range netnsSplits[s] {
		out = append(out, Placement{Peer: ids[i], Range: r})
	}
	return out
}

func (h *netnsHead) start(ctx context.Context, s, seqs int) (*Pipeline, error) {
	return Start(ctx, PipelineConfig{File: h.f, Digest: fortunesDigest, Self: h.n.ID(), Stages: h.places(s),
		Context: netnsCtx, Batch: 32, Seqs: seqs, Backend: h.be, Dial: MeshDialer{h.n}})
}

// do runs one command: "parity S", "ping", "delay D", "open S",
// "decode N", "close".
func (h *netnsHead) do(t *testing.T, cmd []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	arg := func(i int) int {
		if len(cmd) <= i {
			return 0
		}
		v, _ := strconv.Atoi(cmd[i])
		return v
	}
	if len(cmd) == 0 {
		return "", fmt.Errorf("empty command")
	}
	switch cmd[0] {
	case "parity":
		s := arg(1)
		if netnsSplits[s] == nil || len(h.stages) < s-1 {
			return "", fmt.Errorf("no %d-stage split here", s)
		}
		p, err := h.start(ctx, s, 4)
		if err != nil {
			return "", err
		}
		defer p.Close(ctx)
		res, err := script(pipelineStepper(p), stagewire.OutLogits)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("parity %d %s %d", s, netnsResultsHash(res), len(res)), nil
	case "ping":
		var out []string
		for _, st := range h.stages {
			d, err := stagePing(ctx, h.n, st.ID, 21)
			if err != nil {
				return "", err
			}
			out = append(out, strconv.FormatInt(int64(d), 10))
		}
		return "rtt " + strings.Join(out, " "), nil
	case "delay":
		if h.relay != nil {
			d, err := time.ParseDuration(cmd[1])
			if err != nil {
				return "", err
			}
			h.relay.setDelay(d)
		}
		return "ok", nil
	case "open":
		h.close()
		s := arg(1)
		if s == 1 {
			m, err := model.Load(h.f, h.be)
			if err != nil {
				return "", err
			}
			if h.s, err = m.NewSession(model.SessionOptions{Context: netnsCtx}); err != nil {
				return "", err
			}
			if _, h.tok, err = h.s.PrefillArgMax(ctx, netnsPrompt); err != nil {
				return "", err
			}
		} else {
			if netnsSplits[s] == nil || len(h.stages) < s-1 {
				return "", fmt.Errorf("no %d-stage split here", s)
			}
			p, err := h.start(ctx, s, 1)
			if err != nil {
				return "", err
			}
			h.p = p
			res, err := p.Step(ctx, []Seq{{1, netnsPrompt, stagewire.OutToken, 0}})
			if err != nil {
				return "", err
			}
			h.tok = res[0].Token
		}
		h.held = len(netnsPrompt)
		return "ready", nil
	case "decode":
		// The total, and the fastest, median and slowest step: the spread
		// tells load and late timers from the path's own cost.
		start := time.Now()
		steps := make([]time.Duration, 0, arg(1))
		for range arg(1) {
			t0 := time.Now()
			if err := h.decode(ctx); err != nil {
				return "", err
			}
			steps = append(steps, time.Since(t0))
		}
		total := time.Since(start)
		slices.Sort(steps)
		return fmt.Sprintf("done %d %d %d %d", total.Nanoseconds(), steps[0].Nanoseconds(), steps[len(steps)/2].Nanoseconds(), steps[len(steps)-1].Nanoseconds()), nil
	case "close":
		h.close()
		return "closed", nil
	}
	return "", fmt.Errorf("unknown command %q", cmd[0])
}

// decode is one greedy step of the open run, as BenchmarkPipelineDecode
// takes it: trimmed back to the prompt before the context fills.
func (h *netnsHead) decode(ctx context.Context) error {
	var err error
	if h.s != nil {
		if h.s.Len() >= netnsCtx-1 {
			h.s.Truncate(len(netnsPrompt))
		}
		h.tok, err = h.s.EvalArgMax(ctx, []uint32{h.tok})
		return err
	}
	if h.held >= netnsCtx-1 {
		if err := h.p.Trim(ctx, 1, len(netnsPrompt)); err != nil {
			return err
		}
		h.held = len(netnsPrompt)
	}
	res, err := h.p.Step(ctx, []Seq{{1, []uint32{h.tok}, stagewire.OutToken, 0}})
	if err != nil {
		return err
	}
	h.tok, h.held = res[0].Token, h.held+1
	return nil
}

func (h *netnsHead) close() {
	if h.p != nil {
		h.p.Close(context.Background())
		h.p = nil
	}
	if h.s != nil {
		h.s.Close()
		h.s = nil
	}
}

// stagePing is the median round trip of an InventoryRequest on a
// meshnode-stage/1 stream to peer: the RTT the stage protocol sees, over
// the same QUIC connection its activations take.
func stagePing(ctx context.Context, n *mesh.Node, peer identity.EndpointID, count int) (time.Duration, error) {
	rw, err := MeshDialer{n}.Open(ctx, peer)
	if err != nil {
		return 0, err
	}
	defer rw.Close()
	var rtts []time.Duration
	for range count {
		start := time.Now()
		if err := stagewire.Write(ctx, rw, &stagewire.InventoryRequest{}); err != nil {
			return 0, err
		}
		m, _, err := stagewire.Read(ctx, rw, nil)
		if err != nil {
			return 0, err
		}
		if _, ok := m.(*stagewire.Inventory); !ok {
			return 0, fmt.Errorf("%v in answer to InventoryRequest", m.Kind())
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// netnsResultsHash digests every result bit for bit: the run's identity.
func netnsResultsHash(res []Result) string {
	h := sha256.New()
	for _, r := range res {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], r.Request)
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], uint64(r.Pos))
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], uint64(r.Token))
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], uint64(len(r.Logits)))
		h.Write(b[:])
		for _, v := range r.Logits {
			binary.LittleEndian.PutUint32(b[:4], math.Float32bits(v))
			h.Write(b[:4])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// netnsLab is a LAN of nodes, each a process in its own namespace
// (netnslab); node 0 is the head.
type netnsLab struct {
	*netnslab.Lab
	t     testing.TB
	netem bool // delay by netem; otherwise by each node's relay
	nodes []*netnslab.Child
}

// newNetnsLab builds count node namespaces on one segment, starts a stage
// node in each but the first, then the head in the first, and waits until
// all have admitted one another. It skips where namespaces cannot be
// made.
func newNetnsLab(t testing.TB, count int) *netnsLab {
	lab := &netnsLab{Lab: netnslab.New(t, count), t: t}
	lab.netem = lab.Netem // the relay otherwise
	lab.nodes = make([]*netnslab.Child, count)
	// The last stage first, each later one joining those before it: the
	// stages know one another before the head arrives.
	var boot []string
	for i := count - 1; i >= 1; i-- {
		c := lab.start(i, "stage", boot)
		id, ok := c.Expect("id ")
		if !ok {
			t.Fatalf("stage node %d did not start\n%s", i, c.Log())
		}
		boot = append([]string{id}, boot...)
		lab.nodes[i] = c
	}
	lab.nodes[0] = lab.start(0, "head", boot)
	if _, ok := lab.nodes[0].Expect("ready"); !ok {
		t.Fatalf("the head did not start or mesh\n%s", lab.nodes[0].Log())
	}
	for i := 1; i < count; i++ {
		c := lab.nodes[i]
		for {
			v, ok := c.Expect("peers ")
			if !ok {
				t.Fatalf("stage node %d did not admit the other %d nodes\n%s", i, count-1, c.Log())
			}
			if n, _ := strconv.Atoi(v); n >= count-1 {
				break
			}
		}
	}
	return lab
}

func (l *netnsLab) start(i int, role string, boot []string) *netnslab.Child {
	env := []string{envRole + "=" + role, envAddr + "=" + netnslab.Addr(i), envBoot + "=" + strings.Join(boot, ",")}
	if !l.netem {
		env = append(env, envRelay+"=1")
	}
	c := l.Start(i, fmt.Sprintf("%s node %d", role, i), "TestStageNetnsHelper", env...)
	c.Skip = []string{"peers "}
	return c
}

// setRTT gives every pair of nodes a round trip of rtt more than the
// bridge's own: half of it on each side.
func (l *netnsLab) setRTT(rtt time.Duration) {
	if l.netem {
		l.SetRTT(rtt)
		return
	}
	// A connection passes one relay, the dialled node's, which delays
	// both ways: half the round trip each.
	for i := range l.NS {
		if _, err := l.nodes[i].Ask("delay " + (rtt / 2).String()); err != nil {
			l.t.Fatal(err)
		}
	}
}

// head sends the head a command and returns its answer.
func (l *netnsLab) head(cmd string) string {
	l.t.Helper()
	out, err := l.nodes[0].Ask(cmd)
	if err != nil {
		l.t.Fatalf("%s: %v\n%s", cmd, err, l.nodes[0].Log())
	}
	return out
}

// TestPipelineNetns: three nodes, each a process in its own network
// namespace, with a 1 ms round trip between any two: the built-in model
// in 2 and 3 stages over meshnode-stage/1 on real QUIC gives the
// single-node run's logits bit for bit (through batched prefill, decode
// steps and trims: script).
func TestPipelineNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts three node processes")
	}
	lab := newNetnsLab(t, 3)
	lab.setRTT(time.Millisecond)
	res, err := script(whole(t, fortunes(t)), stagewire.OutLogits)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s %d", netnsResultsHash(res), len(res))
	for _, s := range []int{2, 3} {
		got := lab.head(fmt.Sprintf("parity %d", s))
		if got != fmt.Sprintf("parity %d %s", s, want) {
			t.Errorf("%d stages across namespaces: %q, want the single-node run's %q", s, got, want)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("delay by %s; logits bit for bit in 2 and 3 stages (%d results, sha256 %s)", map[bool]string{true: "netem", false: "the user-space relay"}[lab.netem], len(res), want[:16])
}
