package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// TestSubprotocol: a registered subprotocol is advertised in gossip, its
// streams reach the handler with the opener's identity, and an unknown
// name or major is reset with StreamCodeUnsupported; a peer's streams
// beyond its share are refused, as are a peer's not yet admitted, and a
// bad opening frame is a protocol violation.
func TestSubprotocol(t *testing.T) {
	checkLeaks(t)
	b := start(t, func() Config {
		c := fastConfig()
		c.Limits.MaxSubprotocolStreamsPerPeer = 2
		return c
	}())
	adv := &nodev1.MeshSubprotocol{Name: "echo", Major: 3, Features: []string{"x"}}
	got := make(chan identity.EndpointID, 4)
	hold := make(chan struct{})
	err := b.HandleSubprotocol(adv, func(ctx context.Context, peer identity.EndpointID, s *quic.Stream) {
		got <- peer
		var buf [5]byte
		if _, err := io.ReadFull(s, buf[:]); err == nil {
			s.Write(buf[:])
		}
		select {
		case <-hold:
		case <-ctx.Done():
		}
		s.Close()
		s.CancelRead(StreamCodeDone)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.HandleSubprotocol(&nodev1.MeshSubprotocol{Name: " "}, nil); !errors.Is(err, wire.ErrInvalidMessage) {
		t.Errorf("a blank name registered: %v", err)
	}
	if err := b.UpdateSelf(); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Bootstrap = []EndpointAddr{b.EndpointAddr()}
	a := start(t, cfg)
	waitFor(t, 5*time.Second, "b's announcement with its subprotocol", func() bool {
		p, ok := a.Peer(b.ID())
		if !ok || p.Announcement == nil {
			return false
		}
		sps := p.Announcement.GetSubprotocols()
		return len(sps) == 1 && sps[0].GetName() == "echo" && sps[0].GetMajor() == 3
	})
	waitFor(t, 5*time.Second, "b to admit a", func() bool { return hasPeer(b.Node, a.ID()) })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var open []*SubprotocolStream
	for range 2 {
		s, err := a.OpenSubprotocol(ctx, b.ID(), "echo", 3)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
		if _, err := s.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		var buf [5]byte
		if _, err := io.ReadFull(s, buf[:]); err != nil || !bytes.Equal(buf[:], []byte("hello")) {
			t.Fatalf("echo: %q, %v", buf, err)
		}
		if p := <-got; p != a.ID() {
			t.Errorf("handler saw peer %s, want %s", p.Short(), a.ID().Short())
		}
	}
	// A third while two are held: over the share.
	s, err := a.OpenSubprotocol(ctx, b.ID(), "echo", 3)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Read(make([]byte, 1))
	wantStreamCode(t, err, StreamCodeRejected)
	s.Close()

	for _, tc := range []struct {
		name  string
		major uint32
	}{{"echo", 4}, {"skippy-stage", 2}} {
		s, err := a.OpenSubprotocol(ctx, b.ID(), tc.name, tc.major)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Read(make([]byte, 1))
		wantStreamCode(t, err, StreamCodeUnsupported)
		if !errors.Is(err, ErrSubprotocolUnsupported) || !strings.Contains(err.Error(), fmt.Sprintf("%s/%d", tc.name, tc.major)) {
			t.Errorf("%s/%d: %v, want ErrSubprotocolUnsupported naming it", tc.name, tc.major, err)
		}
		// Writing on after the reset fails the same way (a client that
		// writes its request first meets the reset there).
		var werr error
		for range 1000 {
			if _, werr = s.Write(make([]byte, 1024)); werr != nil {
				break
			}
		}
		if !errors.Is(werr, ErrSubprotocolUnsupported) {
			t.Errorf("%s/%d: writing after the reset: %v, want ErrSubprotocolUnsupported", tc.name, tc.major, werr)
		}
		s.Close()
	}
	if _, err := a.OpenSubprotocol(ctx, b.ID(), "echo", 0); !errors.Is(err, wire.ErrInvalidMessage) {
		t.Errorf("major 0: %v", err)
	}
	close(hold)
	for _, s := range open {
		s.Close()
	}
	if !hasPeer(b.Node, a.ID()) {
		t.Errorf("refused subprotocol streams cost a its admission")
	}

	// A MeshSubprotocolOpen that breaks the protocol (gen 2) is a
	// protocol violation like any bad frame.
	rc := dialRaw(t, b.EndpointAddr(), identity.ALPNMesh)
	// Before its gossip admits it, a peer's SUBPROTOCOL stream is refused
	// and never reaches the handler.
	st := rc.openFrame(wire.StreamSubprotocol, &nodev1.MeshSubprotocolOpen{Gen: 1, Name: "echo", Major: 3})
	wantStreamCode(t, streamOutcome(t, st), StreamCodeNotAdmitted)
	if len(got) != 0 {
		t.Errorf("a stream from a peer not admitted reached the handler")
	}
	if _, err := rc.gossip(rc.frame()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "admission", func() bool { return hasPeer(b.Node, rc.id) })
	rc.openFrame(wire.StreamSubprotocol, &nodev1.MeshSubprotocolOpen{Gen: 2, Name: "echo", Major: 3})
	rc.connClosedWith(CodeProtocol)
}
