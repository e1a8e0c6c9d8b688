package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// fakeMesh admits whom a test says and records every dial.
type fakeMesh struct {
	mu        sync.Mutex
	admitted  map[identity.EndpointID]bool
	dials     map[identity.EndpointID][]mesh.EndpointAddr
	inflight  map[identity.EndpointID]int
	maxPerID  int // most concurrent dials of one id seen
	total     int // concurrent dials now
	maxTotal  int
	dialHook  func(ctx context.Context, addr mesh.EndpointAddr) error // nil: admit
	dialed    chan identity.EndpointID
	peerCalls int
}

func newFakeMesh() *fakeMesh {
	return &fakeMesh{
		admitted: map[identity.EndpointID]bool{},
		dials:    map[identity.EndpointID][]mesh.EndpointAddr{},
		inflight: map[identity.EndpointID]int{},
		dialed:   make(chan identity.EndpointID, 1024),
	}
}

func (f *fakeMesh) Dial(ctx context.Context, addr mesh.EndpointAddr) (mesh.Peer, error) {
	f.mu.Lock()
	f.dials[addr.ID] = append(f.dials[addr.ID], addr)
	f.inflight[addr.ID]++
	f.total++
	f.maxPerID = max(f.maxPerID, f.inflight[addr.ID])
	f.maxTotal = max(f.maxTotal, f.total)
	hook := f.dialHook
	f.mu.Unlock()
	var err error
	if hook != nil {
		err = hook(ctx, addr)
	}
	f.mu.Lock()
	f.inflight[addr.ID]--
	f.total--
	if err == nil {
		f.admitted[addr.ID] = true
	}
	f.mu.Unlock()
	f.dialed <- addr.ID
	if err != nil {
		return mesh.Peer{}, err
	}
	return mesh.Peer{ID: addr.ID}, nil
}

func (f *fakeMesh) Peer(id identity.EndpointID) (mesh.Peer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peerCalls++
	return mesh.Peer{ID: id}, f.admitted[id]
}

func (f *fakeMesh) setAdmitted(id identity.EndpointID, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admitted[id] = ok
}

func (f *fakeMesh) dialCount(id identity.EndpointID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dials[id])
}

// waitDials waits for n more dials of id.
func (f *fakeMesh) waitDials(t *testing.T, id identity.EndpointID, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for n > 0 {
		select {
		case got := <-f.dialed:
			if got == id {
				n--
			}
		case <-deadline:
			t.Fatalf("still waiting for %d dials of %s", n, id.Short())
		}
	}
}

func fakeID(b byte) identity.EndpointID {
	var id identity.EndpointID
	id[0] = b
	return id
}

func addrOf(id identity.EndpointID, aps ...string) mesh.EndpointAddr {
	a := mesh.EndpointAddr{ID: id}
	for _, s := range aps {
		a.Addrs = append(a.Addrs, netip.MustParseAddrPort(s))
	}
	return a
}

// fastJoiner has every period short, so a test sees many rounds quickly.
func fastJoiner(m Mesh, cfg JoinerConfig) *Joiner {
	cfg.MinBackoff = 5 * time.Millisecond
	cfg.MaxBackoff = 20 * time.Millisecond
	cfg.Check = 10 * time.Millisecond
	if cfg.Forget == 0 {
		cfg.Forget = time.Minute
	}
	return NewJoiner(m, cfg)
}

func serve(t *testing.T, j *Joiner) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// TestKeepRetriesAndRejoins: a kept peer is redialled with backoff until
// it joins, left alone while admitted, and redialled when it drops out.
func TestKeepRetriesAndRejoins(t *testing.T) {
	m := newFakeMesh()
	id := fakeID(1)
	var fails sync.Mutex
	remaining := 3
	m.dialHook = func(context.Context, mesh.EndpointAddr) error {
		fails.Lock()
		defer fails.Unlock()
		if remaining > 0 {
			remaining--
			return errors.New("connection refused")
		}
		return nil
	}
	j := fastJoiner(m, JoinerConfig{})
	j.Keep(addrOf(id, "10.0.0.1:9338"))
	serve(t, j)

	m.waitDials(t, id, 4) // three failures, then the join
	// Admitted: many check periods pass without a dial.
	time.Sleep(200 * time.Millisecond)
	if n := m.dialCount(id); n != 4 {
		t.Fatalf("%d dials while the peer was admitted, want 4 in all", n)
	}
	// The peer drops out of the mesh: the Joiner brings it back.
	m.setAdmitted(id, false)
	m.waitDials(t, id, 1)
	if m.maxPerID > 1 {
		t.Fatalf("%d concurrent dials of one peer", m.maxPerID)
	}
}

// TestOfferAdmittedIsNotDialled: sightings of a peer the mesh holds cost
// no dial, however often they come.
func TestOfferAdmittedIsNotDialled(t *testing.T) {
	m := newFakeMesh()
	id := fakeID(2)
	m.setAdmitted(id, true)
	j := fastJoiner(m, JoinerConfig{})
	serve(t, j)
	for range 20 {
		j.Offer(addrOf(id, "10.0.0.2:9338"))
		time.Sleep(10 * time.Millisecond)
	}
	if n := m.dialCount(id); n != 0 {
		t.Fatalf("%d dials of an admitted peer", n)
	}
	m.mu.Lock()
	calls := m.peerCalls
	m.mu.Unlock()
	if calls == 0 {
		t.Fatal("the Joiner never asked the mesh whether the peer was admitted")
	}
}

// TestOfferForgotten: a sighting that is not renewed stops being dialled.
func TestOfferForgotten(t *testing.T) {
	m := newFakeMesh()
	id := fakeID(3)
	m.dialHook = func(context.Context, mesh.EndpointAddr) error { return errors.New("unreachable") }
	j := fastJoiner(m, JoinerConfig{Forget: 50 * time.Millisecond})
	serve(t, j)
	j.Offer(addrOf(id, "10.0.0.3:9338"))
	m.waitDials(t, id, 1)
	time.Sleep(150 * time.Millisecond) // past Forget: dials stop
	before := m.dialCount(id)
	time.Sleep(200 * time.Millisecond)
	if after := m.dialCount(id); after != before {
		t.Fatalf("a forgotten sighting was dialled %d more times", after-before)
	}
	j.mu.Lock()
	n := len(j.targets)
	j.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d targets held after Forget", n)
	}
}

// TestSelfDropped: a token naming this node is dropped, not retried.
func TestSelfDropped(t *testing.T) {
	m := newFakeMesh()
	id := fakeID(4)
	m.dialHook = func(context.Context, mesh.EndpointAddr) error { return fmt.Errorf("dial: %w", mesh.ErrSelf) }
	j := fastJoiner(m, JoinerConfig{})
	j.Keep(addrOf(id, "10.0.0.4:9338"))
	serve(t, j)
	m.waitDials(t, id, 1)
	time.Sleep(100 * time.Millisecond)
	if n := m.dialCount(id); n != 1 {
		t.Fatalf("self dialled %d times, want once", n)
	}
}

// TestNewAddressRetriesAtOnce: an offer with an address not tried yet
// cuts a long backoff short.
func TestNewAddressRetriesAtOnce(t *testing.T) {
	m := newFakeMesh()
	id := fakeID(5)
	good := netip.MustParseAddrPort("10.0.0.99:9338")
	m.dialHook = func(_ context.Context, a mesh.EndpointAddr) error {
		for _, ap := range a.Addrs {
			if ap == good {
				return nil
			}
		}
		return errors.New("stale address")
	}
	j := NewJoiner(m, JoinerConfig{MinBackoff: time.Hour, Check: 10 * time.Millisecond})
	j.Keep(addrOf(id, "10.0.0.5:9338"))
	serve(t, j)
	m.waitDials(t, id, 1) // fails; the next try is an hour away
	j.Offer(mesh.EndpointAddr{ID: id, Addrs: []netip.AddrPort{good}})
	m.waitDials(t, id, 1)
	m.mu.Lock()
	last := m.dials[id][len(m.dials[id])-1]
	ok := m.admitted[id]
	m.mu.Unlock()
	if !ok || last.Addrs[0] != good {
		t.Fatalf("second dial used %v, want the new address first", last.Addrs)
	}
}

func TestLANOnly(t *testing.T) {
	m := newFakeMesh()
	lan, wan := fakeID(6), fakeID(7)
	j := fastJoiner(m, JoinerConfig{LANOnly: true})
	j.Keep(addrOf(lan, "203.0.113.7:9338", "192.168.1.6:9338", "[2001:db8::6]:9338", "[fd00::6]:9338"))
	j.Keep(addrOf(wan, "203.0.113.8:9338", "100.64.0.8:9338"))
	serve(t, j)
	m.waitDials(t, lan, 1)
	m.mu.Lock()
	got := m.dials[lan][0].Addrs
	m.mu.Unlock()
	want := []netip.AddrPort{netip.MustParseAddrPort("192.168.1.6:9338"), netip.MustParseAddrPort("[fd00::6]:9338")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("LAN-only dialled %v, want %v", got, want)
	}
	time.Sleep(50 * time.Millisecond)
	if n := m.dialCount(wan); n != 0 {
		t.Fatalf("LAN-only dialled a peer with no LAN address %d times", n)
	}
}

// TestDialLimit: a flood of sightings is bounded in memory and in dials
// at once.
func TestDialLimit(t *testing.T) {
	m := newFakeMesh()
	release := make(chan struct{})
	m.dialHook = func(ctx context.Context, _ mesh.EndpointAddr) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("no")
	}
	j := fastJoiner(m, JoinerConfig{MaxDials: 3, MaxTargets: 10})
	serve(t, j)
	for i := range 50 {
		j.Offer(addrOf(fakeID(byte(100+i)), "10.0.1.1:9338"))
	}
	// Wait for the limit to be reached, however slow the machine, then
	// give a dial past it the time to start.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		n := m.total
		m.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dials at once after 10s, want the limit 3 reached", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	j.mu.Lock()
	n := len(j.targets)
	j.mu.Unlock()
	if n > 10 {
		t.Fatalf("%d sightings held, limit 10", n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.maxTotal != 3 {
		t.Fatalf("%d dials at once, want the limit 3 reached and kept", m.maxTotal)
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second},
		{7, time.Minute}, {100, time.Minute},
	} {
		if got := backoff(time.Second, time.Minute, tc.n); got != tc.want {
			t.Errorf("backoff after %d failures = %v, want %v", tc.n, got, tc.want)
		}
	}
	for range 100 {
		if d := jitter(time.Second); d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("jitter(1s) = %v, outside ±20%%", d)
		}
	}
}

func TestIsLAN(t *testing.T) {
	for _, tc := range []struct {
		addr string
		lan  bool
	}{
		{"10.1.2.3", true}, {"172.16.0.1", true}, {"172.31.255.254", true}, {"192.168.0.1", true},
		{"169.254.1.1", true}, {"127.0.0.1", true}, {"::1", true}, {"fe80::1", true},
		{"fd12:3456::1", true}, {"::ffff:192.168.1.1", true},
		{"172.32.0.1", false}, {"100.64.0.1", false}, {"8.8.8.8", false}, {"2001:db8::1", false},
		{"2606:4700::1111", false},
	} {
		if got := IsLAN(netip.MustParseAddr(tc.addr)); got != tc.lan {
			t.Errorf("IsLAN(%s) = %v, want %v", tc.addr, got, tc.lan)
		}
	}
}
