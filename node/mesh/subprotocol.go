package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// SubprotocolHandler serves one SUBPROTOCOL stream (0x0d) that an
// admitted peer opened for a subprotocol this node registered, after its
// MeshSubprotocolOpen: what follows on the stream is the subprotocol's.
// It runs in the stream's own goroutine; ctx ends when the node stops.
// The handler owns s: it must end it (Close and CancelRead, or
// CancelWrite) and return when ctx ends.
type SubprotocolHandler func(ctx context.Context, peer identity.EndpointID, s *quic.Stream)

// subprotocols are the registered handlers and the streams each peer
// holds open with them.
type subprotocols struct {
	mu       sync.Mutex
	handlers map[subKey]subEntry
	open     map[identity.EndpointID]int
}

type subKey struct {
	name  string
	major uint32
}

type subEntry struct {
	adv *nodev1.MeshSubprotocol
	h   SubprotocolHandler
}

// HandleSubprotocol registers h for the subprotocol adv names (name and
// major), and advertises adv in this node's PeerAnnouncement.subprotocols
// from the next refresh of its self announcement (UpdateSelf gossips it
// at once). Only admitted peers reach h; each may hold
// Limits.MaxSubprotocolStreamsPerPeer such streams open at a time. A nil
// h unregisters.
func (n *Node) HandleSubprotocol(adv *nodev1.MeshSubprotocol, h SubprotocolHandler) error {
	if err := wire.ValidateMeshSubprotocol(adv); err != nil {
		return err
	}
	k := subKey{adv.GetName(), adv.GetMajor()}
	sp := &n.subs
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if h == nil {
		delete(sp.handlers, k)
		return nil
	}
	if sp.handlers == nil {
		sp.handlers = map[subKey]subEntry{}
		sp.open = map[identity.EndpointID]int{}
	}
	sp.handlers[k] = subEntry{adv: proto.Clone(adv).(*nodev1.MeshSubprotocol), h: h}
	return nil
}

// advertise adds the registered subprotocols, by name and major, to those
// the Self function announced (which win on a clash).
func (sp *subprotocols) advertise(have []*nodev1.MeshSubprotocol) []*nodev1.MeshSubprotocol {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var add []*nodev1.MeshSubprotocol
	for k, e := range sp.handlers {
		if !slices.ContainsFunc(have, func(s *nodev1.MeshSubprotocol) bool { return s.GetName() == k.name && s.GetMajor() == k.major }) {
			add = append(add, proto.Clone(e.adv).(*nodev1.MeshSubprotocol))
		}
	}
	slices.SortFunc(add, func(a, b *nodev1.MeshSubprotocol) int {
		if c := strings.Compare(a.GetName(), b.GetName()); c != 0 {
			return c
		}
		return int(a.GetMajor()) - int(b.GetMajor())
	})
	return append(have, add...)
}

// take finds the handler for k and counts a stream of peer against its
// share; ok false with a handler means the share is in use.
func (sp *subprotocols) take(k subKey, peer identity.EndpointID, limit int) (h SubprotocolHandler, ok bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	e, found := sp.handlers[k]
	if !found {
		return nil, false
	}
	if sp.open[peer] >= limit {
		return e.h, false
	}
	sp.open[peer]++
	return e.h, true
}

func (sp *subprotocols) any() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.handlers) > 0
}

func (sp *subprotocols) release(peer identity.EndpointID) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.open[peer]--; sp.open[peer] <= 0 {
		delete(sp.open, peer)
	}
}

// serveSubprotocol reads the MeshSubprotocolOpen of an admitted peer's
// SUBPROTOCOL stream and hands the stream to the handler of the
// subprotocol it names. One this node does not serve is reset with
// StreamCodeUnsupported, as an unknown stream type is, but is no strike:
// the peer may simply have a newer major.
func (n *Node) serveSubprotocol(pc *peerConn, s *quic.Stream) {
	if !n.subs.any() {
		// Nothing registered: refused at once, as before subprotocols
		// existed, without waiting for the opening frame.
		reset(s, StreamCodeUnsupported)
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeouts.Gossip)
	m, err := readFrame(ctx, n, pc, s, wire.DecodeMeshSubprotocolOpen)
	cancel()
	if err != nil {
		n.frameFailed(pc, s, "MeshSubprotocolOpen", err)
		return
	}
	h, ok := n.subs.take(subKey{m.GetName(), m.GetMajor()}, pc.id, n.cfg.Limits.MaxSubprotocolStreamsPerPeer)
	if h == nil {
		n.log.Debug("mesh: subprotocol not served", "peer", pc.id.Short(), "name", m.GetName(), "major", m.GetMajor())
		reset(s, StreamCodeUnsupported)
		return
	}
	if !ok {
		n.log.Debug("mesh: subprotocol stream refused: the peer's share in use", "peer", pc.id.Short(), "name", m.GetName())
		reset(s, StreamCodeRejected)
		return
	}
	defer n.subs.release(pc.id)
	h(n.ctx, pc.id, s)
}

// SubprotocolStream is the opening end of a SUBPROTOCOL stream. Close
// ends both directions; CloseWrite only ours.
type SubprotocolStream struct {
	*quic.Stream
	name    string
	major   uint32
	once    sync.Once
	release func()
}

// Read reads the peer's replies. A peer that does not serve the
// subprotocol is ErrSubprotocolUnsupported, not a bare stream reset.
func (s *SubprotocolStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	return n, s.unsupported(err)
}

// Write sends to the peer. A peer that does not serve the subprotocol
// may have stopped our sending before a write (its reset reaches Read
// only later): that too is ErrSubprotocolUnsupported.
func (s *SubprotocolStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	return n, s.unsupported(err)
}

// unsupported is err, as ErrSubprotocolUnsupported where it is the
// peer's reset for a subprotocol it does not serve.
func (s *SubprotocolStream) unsupported(err error) error {
	var se *quic.StreamError
	if err != nil && errors.As(err, &se) && se.Remote && se.ErrorCode == StreamCodeUnsupported {
		err = fmt.Errorf("%w: %s/%d: %w", ErrSubprotocolUnsupported, s.name, s.major, err)
	}
	return err
}

// CloseWrite ends what we send; the peer's replies can still be read.
func (s *SubprotocolStream) CloseWrite() error { return s.Stream.Close() }

// Close ends both directions.
func (s *SubprotocolStream) Close() error {
	s.once.Do(func() {
		s.Stream.CancelRead(StreamCodeDone)
		s.Stream.Close()
		s.release()
	})
	return nil
}

// OpenSubprotocol opens a SUBPROTOCOL stream to an admitted peer and
// writes its opening: the type byte and a MeshSubprotocolOpen naming name
// and major. What follows is the subprotocol's. A peer that does not
// serve it resets the stream (StreamCodeUnsupported), which the first
// Read reports as ErrSubprotocolUnsupported.
func (n *Node) OpenSubprotocol(ctx context.Context, peer identity.EndpointID, name string, major uint32) (*SubprotocolStream, error) {
	if !n.serving() {
		return nil, fmt.Errorf("mesh: subprotocol %s/%d to %s: %w", name, major, peer.Short(), ErrNotServing)
	}
	open := &nodev1.MeshSubprotocolOpen{Gen: wire.ProtocolGeneration, Name: name, Major: major}
	if err := wire.ValidateMeshSubprotocolOpen(open); err != nil {
		return nil, err
	}
	pc, err := n.admittedConn(peer)
	if err != nil {
		return nil, err
	}
	s, err := pc.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("mesh: subprotocol %s/%d to %s: %w", name, major, peer.Short(), err)
	}
	if err := wire.WriteStreamOpen(ctx, s, wire.StreamSubprotocol, open); err != nil {
		reset(s, StreamCodeDone)
		return nil, fmt.Errorf("mesh: subprotocol %s/%d to %s: %w", name, major, peer.Short(), err)
	}
	pc.active.Add(1)
	return &SubprotocolStream{Stream: s, name: name, major: major, release: func() { pc.active.Add(-1) }}, nil
}
