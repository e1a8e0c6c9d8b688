package mesh

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// paddedRouteRequest is a valid RouteTableRequest body of about size bytes:
// the padding is an unknown field, as a newer peer might send.
func paddedRouteRequest(t testing.TB, size int) []byte {
	t.Helper()
	b, err := proto.Marshal(&nodev1.RouteTableRequest{Gen: wire.ProtocolGeneration})
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 999, protowire.BytesType)
	return protowire.AppendBytes(b, make([]byte, size))
}

// openDeclared opens a stream of type st whose frame declares size bytes,
// and sends none of them.
func (rc *rawClient) openDeclared(st wire.StreamType, size int) *quic.Stream {
	return rc.open(binary.LittleEndian.AppendUint32([]byte{byte(st)}, uint32(size)))
}

// connOf waits for the node's connection from id and returns it.
func connOf(t testing.TB, n *Node, id identity.EndpointID) *peerConn {
	t.Helper()
	var pc *peerConn
	waitFor(t, 5*time.Second, "the connection registered", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		if p := n.peers[id]; p != nil && len(p.conns) > 0 {
			pc = p.conns[0]
		}
		return pc != nil
	})
	return pc
}

// waitMemoryFree waits until no frame memory is held anywhere in n.
func waitMemoryFree(t testing.TB, n *Node) {
	t.Helper()
	waitFor(t, 5*time.Second, "frame memory released", func() bool {
		return n.mem.bodies.held.Load() == 0 && n.mem.strangers.held.Load() == 0 && n.mem.decoding.held.Load() == 0
	})
}

// TestFrameMemoryPerStranger: a connection not yet admitted holds at most
// its share of frame memory. Bodies past it wait (no memory taken) until
// memory frees or the stream's deadline passes; one that could never fit
// is refused at once; the connection survives all of it.
func TestFrameMemoryPerStranger(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.Gossip = 3 * time.Second // the streams' deadline
	cfg.Limits.StrangerFrameMemory = 1 << 20
	n := start(t, cfg)
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	pc := connOf(t, n.Node, rc.id)

	body := paddedRouteRequest(t, 400<<10) // two fit in 1 MiB, three do not
	size := int64(len(body))
	first := rc.openDeclared(wire.StreamRouteRequest, len(body))
	waitFor(t, 5*time.Second, "the first body's memory taken", func() bool { return pc.mem.held.Load() == size })
	var rest []*quic.Stream
	for range 3 {
		rest = append(rest, rc.openDeclared(wire.StreamRouteRequest, len(body)))
	}
	waitFor(t, 5*time.Second, "two bodies held, two waiting", func() bool {
		return pc.mem.held.Load() == 2*size && pc.mem.waiting.Load() == 2
	})
	if got := n.mem.bodies.held.Load(); got != 2*size {
		t.Fatalf("node holds %d bytes of bodies, want %d", got, 2*size)
	}

	// A body over the connection's whole share can never be read: refused
	// at once, not at the deadline.
	began := time.Now()
	huge := rc.openDeclared(wire.StreamGossip, 2<<20)
	wantStreamCode(t, streamOutcome(t, huge), StreamCodeRejected)
	if waited := time.Since(began); waited >= cfg.Timeouts.Gossip {
		t.Errorf("refused after %v, want at once", waited)
	}

	// The first body arrives and is answered; its memory goes to the
	// first in line.
	if _, err := first.Write(body); err != nil {
		t.Fatal(err)
	}
	first.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	reply, err := wire.ReadFrame(ctx, first, nil)
	if err != nil {
		t.Fatalf("route table after the memory wait: %v", err)
	}
	if _, err := wire.DecodeRouteTable(reply); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the next body given the memory", func() bool {
		return pc.mem.waiting.Load() == 1 && pc.mem.held.Load() == 2*size
	})

	// The rest never send their bodies: reset at their deadline, whether
	// holding memory or still waiting for it, and the memory is back.
	for _, s := range rest {
		wantStreamCode(t, streamOutcome(t, s), StreamCodeTimeout)
	}
	waitMemoryFree(t, n.Node)
	if !rc.alive() {
		t.Fatal("connection closed")
	}
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatalf("gossip after the memory waits: %v", err)
	}
}

// TestFrameMemoryStrangersShare: connections not yet admitted hold at most
// half of the bodies' memory between them, however many there are, so an
// admitted peer still gets the rest at once.
func TestFrameMemoryStrangersShare(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.Gossip = time.Minute              // the memory frees only by the senders' resets
	cfg.Limits.FrameMemory = decodeCharge + 10<<20 // bodies 10 MiB, strangers 5 MiB
	cfg.Limits.StrangerFrameMemory = 4 << 20
	n := start(t, cfg)

	member := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
	if _, err := member.gossip(member.frame()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "admission", func() bool { return hasPeer(n.Node, member.id) })

	var strangers []*rawClient
	var streams []*quic.Stream
	for range 2 {
		rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
		streams = append(streams, rc.openDeclared(wire.StreamRouteRequest, 4<<20))
		strangers = append(strangers, rc)
	}
	waitFor(t, 5*time.Second, "one stranger holding 4 MiB, the other waiting", func() bool {
		return n.mem.strangers.held.Load() == 4<<20 && n.mem.strangers.waiting.Load() == 1
	})

	streams = append(streams, member.openDeclared(wire.StreamRouteRequest, 6<<20))
	waitFor(t, 5*time.Second, "the admitted peer's 6 MiB taken beside the strangers' 4", func() bool {
		return n.mem.bodies.held.Load() == 10<<20
	})
	if w := n.mem.bodies.waiting.Load(); w != 0 {
		t.Fatalf("%d waiting for the bodies' memory", w)
	}
	for _, rc := range strangers {
		if !rc.alive() {
			t.Fatal("a stranger's connection closed")
		}
	}
	// Senders that give up on their frames free the memory at once.
	for _, s := range streams {
		s.CancelWrite(0)
	}
	waitMemoryFree(t, n.Node)
}

// TestFrameMemoryPerPeer: an admitted peer holds at most its share of
// frame memory over all its connections, so one that declares frames and
// sends nothing cannot starve another's gossip; a frame over the share is
// refused at once.
func TestFrameMemoryPerPeer(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.Gossip = time.Minute              // the memory frees only by the senders' resets
	cfg.Limits.FrameMemory = decodeCharge + 16<<20 // bodies 16 MiB
	cfg.Limits.PeerFrameMemory = 6 << 20
	n := start(t, cfg)

	admitted := func() *rawClient {
		rc := dialRaw(t, n.EndpointAddr(), identity.ALPNMesh)
		if _, err := rc.gossip(rc.frame()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "admission", func() bool { return hasPeer(n.Node, rc.id) })
		return rc
	}
	greedy, other := admitted(), admitted()
	var streams []*quic.Stream
	for range 4 {
		streams = append(streams, greedy.openDeclared(wire.StreamRouteRequest, 3<<20))
	}
	greedyMem := connOf(t, n.Node, greedy.id).peer.mem
	waitFor(t, 5*time.Second, "the greedy peer holding its 6 MiB, two frames waiting", func() bool {
		return greedyMem.held.Load() == 6<<20 && greedyMem.waiting.Load() == 2
	})

	began := time.Now()
	huge := other.openDeclared(wire.StreamGossip, 7<<20)
	wantStreamCode(t, streamOutcome(t, huge), StreamCodeRejected)
	if waited := time.Since(began); waited >= cfg.Timeouts.Gossip {
		t.Errorf("refused after %v, want at once", waited)
	}
	streams = append(streams, other.openDeclared(wire.StreamRouteRequest, 4<<20))
	waitFor(t, 5*time.Second, "the other peer's 4 MiB taken beside the greedy one's 6", func() bool {
		return n.mem.bodies.held.Load() == 10<<20
	})
	if w := n.mem.bodies.waiting.Load(); w != 0 {
		t.Fatalf("%d waiting for the bodies' memory", w)
	}
	if _, err := other.gossip(other.frame()); err != nil {
		t.Fatalf("gossip beside a peer holding its share: %v", err)
	}
	for _, rc := range []*rawClient{greedy, other} {
		if !rc.alive() {
			t.Fatal("a peer's connection closed")
		}
	}
	for _, s := range streams {
		s.CancelWrite(0)
	}
	waitMemoryFree(t, n.Node)
	if h := greedyMem.held.Load(); h != 0 {
		t.Fatalf("the greedy peer still holds %d bytes", h)
	}
}

// TestGossipReplyMemory: the reply to our own gossip is read within the
// same budget; one the peer declares too large is refused at once.
func TestGossipReplyMemory(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.StrangerFrameMemory = 1 << 20
	n := start(t, cfg)
	addr := rawServer(t, func(c *quic.Conn) {
		go func() {
			s, err := c.AcceptStream(context.Background())
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := wire.ReadStreamType(ctx, s); err != nil {
				return
			}
			if _, err := wire.ReadFrame(ctx, s, nil); err != nil {
				return
			}
			s.Write(binary.LittleEndian.AppendUint32(nil, 2<<20)) // and no body
			<-c.Context().Done()
		}()
	})
	ctx, cancel := context.WithTimeout(t.Context(), cfg.Timeouts.Gossip)
	defer cancel()
	if _, err := n.Dial(ctx, addr); !errors.Is(err, errNoFrameMemory) {
		t.Fatalf("dial answered by an oversized reply: %v, want errNoFrameMemory", err)
	}
	waitMemoryFree(t, n.Node)
}

func TestFrameMemoryConfig(t *testing.T) {
	for _, tc := range []struct {
		mem     int64
		wantErr bool
	}{
		{0, false}, // the default
		{decodeCharge + wire.MaxControlFrameBytes, false},
		{decodeCharge + wire.MaxControlFrameBytes - 1, true},
	} {
		t.Run(fmt.Sprint(tc.mem), func(t *testing.T) {
			c := Config{Limits: Limits{FrameMemory: tc.mem}}
			got, err := c.withDefaults()
			if (err != nil) != tc.wantErr {
				t.Fatalf("FrameMemory %d: err %v, want error %v", tc.mem, err, tc.wantErr)
			}
			if l := got.Limits; tc.mem == 0 && (l.FrameMemory != 256<<20 || l.StrangerFrameMemory != 32<<20 || l.PeerFrameMemory != 32<<20) {
				t.Fatalf("defaults %d, %d and %d", l.FrameMemory, l.StrangerFrameMemory, l.PeerFrameMemory)
			}
		})
	}
}
