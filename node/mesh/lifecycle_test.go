package mesh

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// threeNodes starts a, b and c, joined into a full mesh.
func threeNodes(t *testing.T, cfg Config) (a, b, c *testNode) {
	t.Helper()
	a, b, c = start(t, cfg), start(t, cfg), start(t, cfg)
	for _, x := range []*testNode{b, c} {
		if _, err := a.Dial(t.Context(), x.EndpointAddr()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "full mesh", func() bool {
		return len(a.Peers()) == 2 && len(b.Peers()) == 2 && len(c.Peers()) == 2
	})
	return a, b, c
}

// TestCleanShutdown: a node that stops says PeerLeaving, and its peers drop
// it at once, although they would take a minute to notice by themselves.
func TestCleanShutdown(t *testing.T) {
	checkLeaks(t)
	a, b, c := threeNodes(t, slowDetection(fastConfig()))
	evA, evB := a.Subscribe(t.Context(), 256), b.Subscribe(t.Context(), 256)
	start := time.Now()
	c.stop(t)
	for _, ev := range []<-chan Event{evA, evB} {
		// Far less than the minute they would take to notice alone, and
		// room for the 1s leave timeout on a loaded machine.
		e := nextEvent(t, ev, PeerLeft, c.ID(), 10*time.Second)
		if e.Reason == "" {
			t.Error("PeerLeft without a reason")
		}
	}
	t.Logf("both peers dropped the leaver within %v", time.Since(start))
	if hasPeer(a.Node, c.ID()) || hasPeer(b.Node, c.ID()) {
		t.Fatal("leaver still in a table")
	}
	if !hasPeer(a.Node, b.ID()) || !hasPeer(b.Node, a.ID()) {
		t.Fatal("the remaining pair lost each other")
	}
}

// TestKilledNode: a node that dies without a word is noticed by its peers,
// confirmed unreachable by a redial, and evicted.
func TestKilledNode(t *testing.T) {
	checkLeaks(t)
	a, b, c := threeNodes(t, fastConfig())
	evA, evB := a.Subscribe(t.Context(), 256), b.Subscribe(t.Context(), 256)
	c.kill()
	for _, ev := range []<-chan Event{evA, evB} {
		nextEvent(t, ev, PeerDown, c.ID(), 20*time.Second)
	}
	if hasPeer(a.Node, c.ID()) || hasPeer(b.Node, c.ID()) {
		t.Fatal("dead node still in a table")
	}
	if !hasPeer(a.Node, b.ID()) || !hasPeer(b.Node, a.ID()) {
		t.Fatal("the survivors lost each other")
	}
}

// TestProbe: a node that notices a dead peer only slowly by itself finds
// it out at once when it probes it (as a split model's head does when a
// stage does not answer): a probed live peer stays, a probed dead one is
// confirmed unreachable and evicted with PeerDown, and its connection is
// closed, which ends the streams on it.
func TestProbe(t *testing.T) {
	checkLeaks(t)
	a, b, c := threeNodes(t, slowDetection(fastConfig()))
	ev := a.Subscribe(t.Context(), 256)
	a.Probe(b.ID())
	a.Probe(identity.EndpointID{1}) // not a peer: nothing
	c.kill()
	a.Probe(c.ID())
	// Far less than the minute a would take to notice alone.
	nextEvent(t, ev, PeerDown, c.ID(), 10*time.Second)
	if !hasPeer(a.Node, b.ID()) {
		t.Fatal("a probed live peer was dropped")
	}
}

// TestRejoin: a node that left can come back under the same identity.
func TestRejoin(t *testing.T) {
	checkLeaks(t)
	a := start(t, fastConfig())
	key := newKey(t)
	serve := func() (*Node, context.CancelFunc, chan error) {
		cfg := fastConfig()
		cfg.Bootstrap = []EndpointAddr{a.EndpointAddr()}
		n, err := New(cfg, key, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Serve(ctx) }()
		return n, cancel, done
	}
	for range 2 {
		_, cancel, done := serve()
		waitFor(t, 5*time.Second, "join", func() bool { return hasPeer(a.Node, key.ID()) })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "leave", func() bool { return !hasPeer(a.Node, key.ID()) })
	}
}

// TestRedundantConnections: two nodes that dial each other at once end up
// on one connection, the same one at both ends.
func TestRedundantConnections(t *testing.T) {
	checkLeaks(t)
	a, b := start(t, fastConfig()), start(t, fastConfig())
	errs := make(chan error, 2)
	go func() { _, err := a.Dial(t.Context(), b.EndpointAddr()); errs <- err }()
	go func() { _, err := b.Dial(t.Context(), a.EndpointAddr()); errs <- err }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	live := func(n *Node, id identity.EndpointID) (count int, pref *peerConn) {
		n.mu.Lock()
		defer n.mu.Unlock()
		p := n.peers[id]
		for _, pc := range p.conns {
			if pc.alive() {
				count++
			}
		}
		return count, p.preferred()
	}
	waitFor(t, 5*time.Second, "one connection each way", func() bool {
		na, pa := live(a.Node, b.ID())
		nb, pb := live(b.Node, a.ID())
		return na == 1 && nb == 1 && pa.dialer == pb.dialer
	})
	if !hasPeer(a.Node, b.ID()) || !hasPeer(b.Node, a.ID()) {
		t.Fatal("peers lost while closing the duplicate")
	}
}

// TestSlowSubscriber: a subscriber that never reads does not hold the
// mesh up.
func TestSlowSubscriber(t *testing.T) {
	checkLeaks(t)
	a := start(t, fastConfig())
	a.Subscribe(t.Context(), 1) // never read
	for range 4 {
		x := start(t, fastConfig())
		if _, err := x.Dial(t.Context(), a.EndpointAddr()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "four peers", func() bool { return len(a.Peers()) == 4 })
}

// TestStarted: a node whose Started is closed takes a join at once, over
// and over (it once said ready while its Serve had not yet begun, and a
// join asked then failed with ErrNotServing); a Serve that cannot run
// closes Started too, so no one waits on it for ever.
func TestStarted(t *testing.T) {
	checkLeaks(t)
	a := start(t, fastConfig())
	for i := range 5 {
		n, err := New(fastConfig(), newKey(t), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Serve(ctx) }()
		select {
		case <-n.Started():
		case <-time.After(5 * time.Second):
			t.Fatal("not started after 5s")
		}
		if _, err := n.Dial(t.Context(), a.EndpointAddr()); err != nil {
			t.Fatalf("join %d right after Started: %v", i, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	closed, err := New(fastConfig(), newKey(t), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if err := closed.Serve(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Serve after Close: %v, want ErrClosed", err)
	}
	select {
	case <-closed.Started():
	default:
		t.Fatal("a Serve that could not run left Started open")
	}
}
