package mesh

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func TestServedModels(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *nodev1.PeerAnnouncement
		want []string
	}{
		{"nil", nil, nil},
		{"hosted, known", &nodev1.PeerAnnouncement{HostedModels: []string{"b", "a", "a"}, HostedModelsKnown: proto.Bool(true), ServingModels: []string{"old"}}, []string{"a", "b"}},
		{"known empty: paused", &nodev1.PeerAnnouncement{HostedModelsKnown: proto.Bool(true), ServingModels: []string{"old"}}, nil},
		{"hosted without the flag", &nodev1.PeerAnnouncement{HostedModels: []string{"h"}}, []string{"h"}},
		{"legacy serving", &nodev1.PeerAnnouncement{ServingModels: []string{"s"}, PrimaryServing: proto.String("p")}, []string{"p", "s"}},
		{"flag false falls back", &nodev1.PeerAnnouncement{HostedModelsKnown: proto.Bool(false), ServingModels: []string{"s"}}, []string{"s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ServedModels(tc.a); !slices.Equal(got, tc.want) {
				t.Fatalf("ServedModels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRankHosts(t *testing.T) {
	state := func(s nodev1.InferenceAdmissionState) *nodev1.InferenceAdmissionState { return &s }
	peer := func(b byte, rtt time.Duration, st *nodev1.InferenceAdmissionState, models ...string) Peer {
		return Peer{ID: identity.EndpointID{b}, RTT: rtt, Announcement: &nodev1.PeerAnnouncement{
			HostedModels: models, InferenceAdmissionState: st}}
	}
	acc := state(nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING)
	dep := state(nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING_DEPRIORITIZED)
	paused := state(nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_REMOTE_PAUSED)
	all := state(nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ALL_PAUSED)
	peers := []Peer{
		peer(1, 5*time.Millisecond, dep, "m"),
		peer(2, 9*time.Millisecond, acc, "m"),
		peer(3, 1*time.Millisecond, paused, "m"),
		peer(4, 2*time.Millisecond, nil, "m"), // legacy: no state
		peer(5, 0, acc, "m"),                  // not yet measured
		peer(6, 3*time.Millisecond, acc, "m"),
		peer(7, 1*time.Millisecond, acc, "other"),
		peer(8, 1*time.Millisecond, all, "m"),
	}
	var got []byte
	for _, p := range rankHosts(peers, "m") {
		got = append(got, p.ID[0])
	}
	if want := []byte{6, 2, 5, 4, 1}; !slices.Equal(got, want) {
		t.Fatalf("ranked %v, want %v", got, want)
	}
}

func TestEventsNeverBlock(t *testing.T) {
	var e events
	ctx, cancel := context.WithCancel(context.Background())
	slow := e.subscribe(ctx, 1)
	fast := e.subscribe(context.Background(), 8)
	for i := range 5 {
		e.publish(Event{Kind: PeerJoined, RTT: time.Duration(i)})
	}
	if len(slow) != 1 || len(fast) != 5 {
		t.Fatalf("buffered %d and %d events, want 1 and 5", len(slow), len(fast))
	}
	cancel()
	waitFor(t, time.Second, "slow subscriber closed", func() bool {
		for range slow {
		}
		return true
	})
	e.close()
	for range fast {
	}
	if _, ok := <-e.subscribe(context.Background(), 1); ok {
		t.Fatal("subscription after close is open")
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := (&Config{}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenAddr != ":9338" || c.Timeouts.Confirm != 3*time.Second || c.Limits.MaxIncomingStreams != 128 {
		t.Fatalf("defaults: %+v", c)
	}
	for _, bad := range []Config{
		{GossipJitter: 1},
		{GossipInterval: -time.Second},
		{Timeouts: Timeouts{Gossip: -1}},
		{Limits: Limits{StreamWindow: 8 << 20, ConnWindow: 1 << 20}},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	for _, s := range []string{"", "localhost:9338", "1.2.3.4:x", "1.2.3.4"} {
		if s == "" {
			continue
		}
		if _, err := resolveListen(s); err == nil {
			t.Errorf("listen address %q accepted", s)
		}
	}
	if _, err := New(Config{ListenAddr: "127.0.0.1:0"}, nil, nil); err == nil {
		t.Error("New without a key succeeded")
	}
}

// TestNeverServed: a node that is built and closed without serving
// releases its socket.
func TestNeverServed(t *testing.T) {
	checkLeaks(t)
	n, err := New(Config{ListenAddr: "127.0.0.1:0"}, newKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := n.LocalAddr()
	n.Close()
	if err := n.Serve(context.Background()); err == nil {
		t.Fatal("Serve after Close succeeded")
	}
	again, err := New(Config{ListenAddr: addr.String()}, newKey(t), nil)
	if err != nil {
		t.Fatalf("port not released: %v", err)
	}
	again.Close()
}

// TestInvalidSelf: a node whose own announcement breaks the protocol does
// not start.
func TestInvalidSelf(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Self = func() *nodev1.PeerAnnouncement { return &nodev1.PeerAnnouncement{Role: nodev1.NodeRole_HOST} }
	n, err := New(cfg, newKey(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Serve(context.Background()); err == nil {
		t.Fatal("Serve with a HOST lacking http_port succeeded")
	}
}

// TestFitFrame: a frame over the cap loses relayed entries from the end,
// never the self entry, and then fits.
func TestFitFrame(t *testing.T) {
	big := func(b byte) *nodev1.PeerAnnouncement {
		return &nodev1.PeerAnnouncement{EndpointId: bytes.Repeat([]byte{b}, 32), CatalogModels: []string{strings.Repeat("m", 1000)}}
	}
	f := &nodev1.GossipFrame{Gen: 1, SenderId: make([]byte, 32)}
	for i := range 10 {
		f.Peers = append(f.Peers, big(byte(i)))
	}
	one := proto.Size(big(0))
	limit := 4*one + 50
	fitFrame(f, limit)
	if got := proto.Size(f); got > limit {
		t.Fatalf("frame of %d bytes, limit %d", got, limit)
	}
	if len(f.Peers) < 3 || f.Peers[0].EndpointId[0] != 0 {
		t.Fatalf("kept %d entries, first %x", len(f.Peers), f.Peers[0].EndpointId[:1])
	}
	f.Peers = f.Peers[:1]
	f.Peers[0] = big(0)
	fitFrame(f, 10)
	if len(f.Peers) != 1 {
		t.Fatal("self entry dropped")
	}

	// At every limit, and with entries of every length-prefix size, the
	// frame keeps the longest run of entries that fits, to the byte.
	f = &nodev1.GossipFrame{Gen: 1, SenderId: make([]byte, 32)}
	for i := range 40 {
		f.Peers = append(f.Peers, &nodev1.PeerAnnouncement{EndpointId: bytes.Repeat([]byte{byte(i)}, 32),
			CatalogModels: []string{strings.Repeat("m", (i%4)*60)}})
	}
	full := proto.Size(f)
	for limit := full - 1; limit > full/2; limit-- {
		g := proto.CloneOf(f)
		fitFrame(g, limit)
		if got := proto.Size(g); got > limit {
			t.Fatalf("limit %d: frame of %d bytes", limit, got)
		}
		g.Peers = f.Peers[:len(g.Peers)+1]
		if got := proto.Size(g); got <= limit {
			t.Fatalf("limit %d: dropped an entry that fitted (%d bytes with it)", limit, got)
		}
	}
}

// TestMeasured: a peer's RTT is the lower of the gossip round trip and
// QUIC's smoothed RTT, and a change is reported (as RTTChanged) only when
// it moves by more than a quarter, and at least a millisecond, from the
// value last reported.
func TestMeasured(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	p := newPeer(identity.EndpointID{1}, 1)
	now := time.Unix(1_700_000_000, 0)
	for i, tc := range []struct {
		gossip, srtt time.Duration
		want         time.Duration // p.rtt after
		reported     bool
	}{
		{0, 0, 0, false},                   // nothing measured
		{ms(8), ms(10), ms(8), true},       // first sample: the gossip round trip, lower
		{0, ms(9), ms(9), false},           // served gossip has no round trip: QUIC's
		{ms(12), ms(9.5), ms(9.5), false},  // within a quarter of 8
		{ms(10.5), ms(11), ms(10.5), true}, // over a quarter above 8
		{ms(10), ms(10.2), ms(10), false},  // within a quarter of 10.5
		{ms(7.8), ms(20), ms(7.8), true},   // over a quarter below 10.5
		{ms(0.5), 0, ms(0.5), true},        // a fast LAN: 7.8 to 0.5
		{ms(1.2), ms(1.4), ms(1.2), false}, // under a millisecond from 0.5
		{ms(1.6), ms(1.7), ms(1.6), true},  // 1.1 ms from 0.5
		{0, ms(0.4), ms(0.4), true},        // 1.2 ms from 1.6
	} {
		now = now.Add(time.Second)
		if got := p.measured(now, tc.gossip, tc.srtt); got != tc.reported {
			t.Errorf("sample %d (gossip %v, srtt %v): reported %v, want %v", i, tc.gossip, tc.srtt, got, tc.reported)
		}
		if p.rtt != tc.want {
			t.Errorf("sample %d: rtt %v, want %v", i, p.rtt, tc.want)
		}
		if tc.want != 0 && !p.rttAt.Equal(now) {
			t.Errorf("sample %d: measured at %v, want %v", i, p.rttAt, now)
		}
	}
}
