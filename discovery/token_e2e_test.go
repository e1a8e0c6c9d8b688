package discovery_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meshnode/meshnode/discovery"
	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("DISCOVERY_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// loopbackNode starts a real mesh node on listen (127.0.0.1:0 for any
// port) with short timers, and returns it with a function that stops it.
func loopbackNode(t *testing.T, key *identity.Key, listen string) (*mesh.Node, func()) {
	t.Helper()
	n, err := mesh.New(mesh.Config{
		ListenAddr:     listen,
		Version:        "test",
		GossipInterval: 200 * time.Millisecond,
		Timeouts: mesh.Timeouts{
			Handshake: 2 * time.Second, Idle: 2 * time.Second, KeepAlive: 300 * time.Millisecond,
			Gossip: time.Second, Confirm: 500 * time.Millisecond,
			RedialMin: 50 * time.Millisecond, RedialMax: 200 * time.Millisecond,
		},
	}, key, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mesh Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return n, stop
}

func newKey(t *testing.T) *identity.Key {
	k, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func waitAdmitted(t *testing.T, n *mesh.Node, id identity.EndpointID, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := n.Peer(id); ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %s never admitted %s", what, n.ID().Short(), id.Short())
}

// TestTokenFormsMesh: node B, given nothing but node A's printed token,
// joins A's mesh, and rejoins after A restarts.
func TestTokenFormsMesh(t *testing.T) {
	keyA := newKey(t)
	a, stopA := loopbackNode(t, keyA, "127.0.0.1:0")
	tok, err := token.Encode(a.EndpointAddr())
	if err != nil {
		t.Fatal(err)
	}

	b, _ := loopbackNode(t, newKey(t), "127.0.0.1:0")
	target, err := token.Decode(tok) // all B knows of A
	if err != nil {
		t.Fatal(err)
	}
	j := discovery.NewJoiner(b, discovery.JoinerConfig{
		LANOnly:    true, // loopback is LAN: this run must not be refused
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Check: 50 * time.Millisecond, Logger: testLogger(t),
	})
	j.Keep(target)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Joiner.Serve: %v", err)
		}
	}()

	waitAdmitted(t, b, a.ID(), "token join")
	waitAdmitted(t, a, b.ID(), "token join")

	// A restarts on the same address: B's Joiner brings the mesh back
	// without any help from A, which knows nothing of B.
	port := a.LocalAddr().Port()
	stopA()
	deadline := time.Now().Add(10 * time.Second)
	for _, ok := b.Peer(a.ID()); ok; _, ok = b.Peer(a.ID()) {
		if time.Now().After(deadline) {
			t.Fatal("B still holds A after A stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a few failed redials while A is down
	a2, _ := loopbackNode(t, keyA, "127.0.0.1:"+strconv.Itoa(int(port)))
	waitAdmitted(t, b, a2.ID(), "rejoin after restart")
	waitAdmitted(t, a2, b.ID(), "rejoin after restart")
}
