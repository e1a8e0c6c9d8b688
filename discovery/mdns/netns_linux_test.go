package mdns_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/discovery"
	"github.com/meshnode/meshnode/discovery/mdns"
	"github.com/meshnode/meshnode/internal/netnslab"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// The end-to-end test runs two real nodes, each a child process in its own
// network namespace on one LAN segment with nothing else on it
// (internal/netnslab: its interfaces are plain eth0s, as a real NIC's name
// would be, so the node must choose it with no flags). Each child is this
// test binary re-running TestMDNSNetnsNode.

const helperEnv = "MESHNODE_MDNS_NETNS_HELPER"

// TestMDNSNetnsNode is one node of TestMDNSNetns, run only as its child.
func TestMDNSNetnsNode(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("a child of TestMDNSNetns")
	}
	if code := runNode(); code != 0 {
		t.Fatalf("node exited with %d", code)
	}
}

// runNode is one node: a mesh on UDP 9338 with no flags, a Joiner, and
// mDNS. It prints "@ id <hex>", then "@ peers <hex,...>" whenever its
// admitted peers change, and stops when its stdin closes.
func runNode() int {
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
	fmt.Printf("@ id %s\n", node.ID())
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
			fmt.Printf("@ peers %s\n", s)
		}
	}
}

// TestMDNSNetns: two nodes on one LAN segment, given no flags, no token
// and no address, find each other by mDNS and admit each other into one
// mesh.
func TestMDNSNetns(t *testing.T) {
	lab := netnslab.New(t, 2)
	a := lab.Start(0, "A", "TestMDNSNetnsNode", helperEnv+"=1")
	b := lab.Start(1, "B", "TestMDNSNetnsNode", helperEnv+"=1")
	idA, okA := a.Expect("id ")
	idB, okB := b.Expect("id ")
	if !okA || !okB {
		t.Fatalf("a node did not start\n%s\n%s", a.Log(), b.Log())
	}
	// Expect waits up to 30 s per line; a node prints its peers only when
	// they change, so the wait ends at the line naming the other.
	admits := func(c *netnslab.Child, other string) bool {
		for {
			peers, ok := c.Expect("peers ")
			if !ok {
				return false
			}
			if slices.Contains(strings.Split(peers, ","), other) {
				return true
			}
		}
	}
	if !admits(a, idB) || !admits(b, idA) {
		t.Fatalf("the nodes did not admit each other (A %s, B %s)\n%s\n%s", idA, idB, a.Log(), b.Log())
	}
	t.Logf("A %s and B %s admitted each other", idA[:12], idB[:12])
}
