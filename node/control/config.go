package control

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// canonical is the encoding config hashes are taken over. Go's
// deterministic protobuf output orders known fields by number and map
// entries by key, and keeps unknown fields, in their received order, last.
var canonical = proto.MarshalOptions{Deterministic: true}

// ConfigHash is the SHA-256 of cfg's canonical bytes: its deterministic
// protobuf encoding.
func ConfigHash(cfg *nodev1.NodeConfigSnapshot) ([32]byte, error) {
	b, err := canonical.Marshal(cfg)
	if err != nil {
		return [32]byte{}, fmt.Errorf("control: encode config: %w", err)
	}
	return sha256.Sum256(b), nil
}

// hasUnknown reports whether m or any message within it holds fields this
// build does not know: a config from a newer client.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i := 0; i < v.List().Len() && !found; i++ {
				found = hasUnknown(v.List().Get(i).Message())
			}
		default:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// configState is one revision of the configuration as watchers see it.
type configState struct {
	revision uint64
	hash     [32]byte
	config   *nodev1.NodeConfigSnapshot
}

// hub tells watchers about new revisions. A watcher that falls behind sees
// only the latest: a config watch wants the current state, not history.
type hub struct {
	mu   sync.Mutex
	last configState
	subs map[*watcher]struct{}
}

type watcher struct {
	ch chan configState // capacity 1: the newest unread state
}

// subscribe registers a watcher and returns the state it starts from, so
// that nothing published after that state is missed.
func (h *hub) subscribe() (*watcher, configState) {
	w := &watcher{ch: make(chan configState, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = make(map[*watcher]struct{})
	}
	h.subs[w] = struct{}{}
	return w, h.last
}

func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, w)
}

// publish announces s unless it is not newer than what was announced, as
// when two applies finish out of order.
func (h *hub) publish(s configState) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.revision < h.last.revision || s.revision == h.last.revision && s.hash == h.last.hash {
		return false
	}
	h.last = s
	for w := range h.subs {
		// Only publish sends, under mu, so after the drain the send
		// cannot block.
		select {
		case <-w.ch:
		default:
		}
		w.ch <- s
	}
	return true
}

// durationDefault is a duration setting and the value it takes when it is
// zero (or negative).
type durationDefault struct {
	v   *time.Duration
	def time.Duration
}

func defaultDurations(ds ...durationDefault) {
	for _, d := range ds {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}
