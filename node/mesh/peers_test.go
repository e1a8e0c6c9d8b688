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
