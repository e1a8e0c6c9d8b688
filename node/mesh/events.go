package mesh

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// EventKind says what happened to a peer.
type EventKind int

// The kinds of Event.
const (
	PeerJoined  EventKind = iota + 1 // admitted after valid gossip
	PeerUpdated                      // its announcement changed
	PeerLeft                         // it said PeerLeaving, or closed as leaving
	PeerDown                         // unreachable, confirmed by a failed redial
	RTTChanged                       // its round-trip time moved noticeably
)

func (k EventKind) String() string {
	switch k {
	case PeerJoined:
		return "joined"
	case PeerUpdated:
		return "updated"
	case PeerLeft:
		return "left"
	case PeerDown:
		return "down"
	case RTTChanged:
		return "rtt"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one change in the peer table.
type Event struct {
	Kind EventKind
	Peer identity.EndpointID
	Time time.Time
	// RTT is the peer's round-trip time for PeerJoined and RTTChanged.
	RTT time.Duration
	// Reason says why a peer left or went down.
	Reason string
}

// events fans Events out to subscribers without ever blocking the
// publisher: a subscriber whose buffer is full misses the event.
type events struct {
	mu     sync.Mutex
	subs   map[chan Event]func() bool // channel -> stop of its context watch
	closed bool
}

// subscribe returns a channel of events, closed when ctx ends or the
// events are closed.
func (e *events) subscribe(ctx context.Context, buffer int) <-chan Event {
	ch := make(chan Event, max(buffer, 1))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		close(ch)
		return ch
	}
	if e.subs == nil {
		e.subs = make(map[chan Event]func() bool)
	}
	e.subs[ch] = context.AfterFunc(ctx, func() { e.unsubscribe(ch) })
	return ch
}

func (e *events) unsubscribe(ch chan Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.subs[ch]; ok {
		delete(e.subs, ch)
		close(ch)
	}
}

func (e *events) publish(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.subs {
		select {
		case ch <- ev:
		default: // a slow subscriber drops events rather than stall the mesh
		}
	}
}

func (e *events) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for ch, stop := range e.subs {
		stop()
		close(ch)
	}
	e.subs = nil
}
