package mdns_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/discovery"
	"github.com/meshnode/meshnode/discovery/mdns"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// The end-to-end test runs two real nodes, each a child process in its own
// network namespace, joined by a veth pair: one LAN segment with nothing
// else on it. Each child is this test binary re-executed in helper mode
// (a goroutine cannot safely be moved into a namespace: quic-go and the
// responder start goroutines that may run on any thread).

const helperEnv = "MESHNODE_MDNS_NETNS_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	os.Exit(m.Run())
}

// runHelper is one node: a mesh on UDP 9338 with no flags, a Joiner, and
// mDNS. It prints "id <hex>", then "peers <hex,...>" whenever its admitted
// peers change, and stops when its stdin closes.
func runHelper() int {
	lvl := slog.LevelInfo
	if os.Getenv("MESHNODE_MDNS_NETNS_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	key, err := identity.GenerateKey(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	node, err := mesh.New(mesh.Config{ListenAddr: ":9338", Version: "netns-test", GossipInterval: time.Second}, key, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	j := discovery.NewJoiner(node, discovery.JoinerConfig{Check: 200 * time.Millisecond, Logger: log})
	md, err := mdns.New(mdns.Config{
		ID: node.ID(), Listen: node.LocalAddr(), Version: "netns-test",
		Found: j.Offer, Interval: 300 * time.Millisecond, Window: 250 * time.Millisecond, Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	errs := make(chan error, 3)
	go func() { errs <- node.Serve(ctx) }()
	go func() { errs <- j.Serve(ctx) }()
	go func() { errs <- md.Serve(ctx) }()
	fmt.Printf("id %s\n", node.ID())
	last := "-"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	// finish collects the results of the n parts still running once asked
	// to stop.
	finish := func(n int) int {
		code := 0
		for range n {
			if err := <-errs; err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
		return code
	}
	for {
		select {
		case <-ctx.Done():
			return finish(3)
		case err := <-errs:
			if ctx.Err() != nil {
				// Asked to stop, and this select saw a part return before
				// it saw ctx end.
				code := finish(2)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					code = 1
				}
				return code
			}
			fmt.Fprintln(os.Stderr, "stopped early:", err)
			return 1
		case <-tick.C:
		}
		var ids []string
		for _, p := range node.Peers() {
			ids = append(ids, p.ID.String())
		}
		if s := strings.Join(ids, ","); s != last {
			last = s
			fmt.Printf("peers %s\n", s)
		}
	}
}

// ip runs an iproute2 command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// lan builds two namespaces joined by a veth pair, eth0 in each, with
// 10.77.0.1/24 and 10.77.0.2/24, and removes it all when the test ends.
func lan(t *testing.T) (nsA, nsB string) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: creating network namespaces needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: iproute2's ip command is not installed")
	}
	tag := fmt.Sprintf("%d%03x", os.Getpid()%100000, rand.IntN(0x1000))
	nsA, nsB = "mn-"+tag+"-a", "mn-"+tag+"-b"
	vethA, vethB := "mnA"+tag, "mnB"+tag // at most 15 characters
	if err := ip("netns", "add", nsA); err != nil {
		t.Skipf("skipping: cannot create a network namespace here: %v", err)
	}
	t.Cleanup(func() { ip("netns", "del", nsA) })
	if err := ip("netns", "add", nsB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ip("netns", "del", nsB) })
	if err := ip("link", "add", vethA, "type", "veth", "peer", "name", vethB); err != nil {
		t.Skipf("skipping: cannot create a veth pair here: %v", err)
	}
	t.Cleanup(func() { ip("link", "del", vethA) }) // fails, harmlessly, once moved
	for _, side := range []struct{ ns, veth, addr string }{{nsA, vethA, "10.77.0.1/24"}, {nsB, vethB, "10.77.0.2/24"}} {
		for _, cmd := range [][]string{
			{"link", "set", side.veth, "netns", side.ns},
			// A plain name: the node must choose it with no flags, as it
			// would a real NIC (a veth name would be skipped as virtual).
			{"-n", side.ns, "link", "set", side.veth, "name", "eth0"},
			{"-n", side.ns, "addr", "add", side.addr, "dev", "eth0"},
			{"-n", side.ns, "link", "set", "eth0", "multicast", "on", "up"},
			{"-n", side.ns, "link", "set", "lo", "up"},
		} {
			if err := ip(cmd...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return nsA, nsB
}

// child is a helper node running in a namespace.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	lines  chan string
}

func startChild(t *testing.T, ns string) *child {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{name: ns, lines: make(chan string, 64)}
	c.cmd = exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^$")
	c.cmd.Env = append(os.Environ(), helperEnv+"=1")
	c.cmd.Stderr = &syncWriter{w: &c.stderr}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop closes the child's stdin, which ends it cleanly, and kills it if
// it has not ended a few seconds later.
func (c *child) stop(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && !t.Failed() {
			t.Errorf("node in %s: %v\n%s", c.name, err, c.stderr.String())
		}
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
		t.Errorf("node in %s did not stop when asked", c.name)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// TestMDNSNetns: two nodes on one LAN segment, given no flags, no token
// and no address, find each other by mDNS and admit each other into one
// mesh.
func TestMDNSNetns(t *testing.T) {
	nsA, nsB := lan(t)
	a, b := startChild(t, nsA), startChild(t, nsB)
	ids := map[*child]string{}
	peers := map[*child][]string{}
	deadline := time.After(30 * time.Second)
	joined := func() bool {
		return ids[a] != "" && ids[b] != "" &&
			slices.Contains(peers[a], ids[b]) && slices.Contains(peers[b], ids[a])
	}
	for !joined() {
		var c *child
		var line string
		var ok bool
		select {
		case line, ok = <-a.lines:
			c = a
		case line, ok = <-b.lines:
			c = b
		case <-deadline:
			t.Fatalf("the nodes did not admit each other within 30s\nA %s peers=%v\n%s\nB %s peers=%v\n%s",
				ids[a], peers[a], a.cmd.Stderr, ids[b], peers[b], b.cmd.Stderr)
		}
		if !ok {
			t.Fatalf("node in %s exited\n%s", c.name, c.cmd.Stderr)
		}
		switch kind, rest, _ := strings.Cut(line, " "); kind {
		case "id":
			ids[c] = rest
		case "peers":
			peers[c] = strings.Split(rest, ",")
		}
	}
	t.Logf("A %s and B %s admitted each other", ids[a][:12], ids[b][:12])
}
