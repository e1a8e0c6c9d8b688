package node

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
)

// waitEvent waits for an event of kind about peer.
func waitEvent(t *testing.T, events <-chan mesh.Event, kind mesh.EventKind, peer identity.EndpointID) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("event stream closed waiting for %v of %s", kind, peer.Short())
			}
			if ev.Kind == kind && ev.Peer == peer {
				return
			}
		case <-timeout:
			t.Fatalf("no %v event for %s within 20s", kind, peer.Short())
		}
	}
}

// gatedModel serves its model's engine with a gate: after the first token
// a generation waits until the gate opens (or its context ends), while
// the gate is armed (from the start, unless disarmed).
type gatedModel struct {
	localModel
	g *streamGate
}

func (m gatedModel) Engine() engine.Engine { return gatedEngine{m.localModel.Engine(), m.g} }

type gatedEngine struct {
	engine.Engine
	g *streamGate
}

// TakesPrediction is its engine's: the gate holds tokens, not drafts.
func (e gatedEngine) TakesPrediction() bool { return engine.TakesPrediction(e.Engine) }

func (e gatedEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	first := true
	return e.Engine.Serve(ctx, req, prompt, func(tok uint32) error {
		if !first && e.g.armed.Load() {
			e.g.once.Do(func() { close(e.g.started) })
			select {
			case <-e.g.open:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		first = false
		return emit(tok)
	})
}

type streamGate struct {
	started, open chan struct{}
	once          sync.Once
	armed         atomic.Bool
}

func newStreamGate() *streamGate {
	g := &streamGate{started: make(chan struct{}), open: make(chan struct{})}
	g.armed.Store(true)
	return g
}

// TestShutdownDrainsLocal: a stream in flight when the node is told to
// stop is held open until it ends, and gets its receipt.
func TestShutdownDrainsLocal(t *testing.T) {
	g := newStreamGate()
	n, stop := startNodeWith(t, Config{Models: []string{ReferenceModel}}, func(n *Node) {
		n.wrapModel = func(m localModel) localModel { return gatedModel{m, g} }
	})
	resp := post(t, n, "/v1/chat/completions", `{"model":"mesh-reference","stream":true,
		"stream_options":{"include_usage":true},"max_tokens":6,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	<-g.started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, "the node to stop accepting", func() bool {
		c, err := http.Get("http://" + n.HTTPAddr().String() + "/health")
		if err == nil {
			c.Body.Close()
		}
		return err != nil
	})
	close(g.open)
	text, energy := readChatStream(t, resp.Body)
	if len(strings.Fields(text)) != 6 {
		t.Fatalf("stream after the stop: %q", text)
	}
	env, _ := hex.DecodeString(energy.EnvelopeHex)
	if _, err := receipt.Open(env, n.key.Public()); err != nil {
		t.Fatalf("the drained answer's receipt: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Serve after shutdown: %v", err)
	}
}

// TestShutdownDrainsRelayed: a request relayed through the mesh finishes
// when either node on its way is told to stop while it is in flight: the
// stopping node stops accepting and says PeerLeaving, and the other drops
// it from its tables (PeerLeft) while the request is still streaming, yet
// keeps the connection carrying it until it is done; then both stop
// cleanly.
func TestShutdownDrainsRelayed(t *testing.T) {
	for _, stopping := range []string{"relaying", "hosting"} {
		t.Run(stopping, func(t *testing.T) {
			g := newStreamGate()
			host, stopHost := startNodeWith(t, Config{Models: []string{ReferenceModel}}, func(n *Node) {
				n.wrapModel = func(m localModel) localModel { return gatedModel{m, g} }
			})
			t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
			relay, stopRelay := startNode(t, Config{Join: []string{host.invite}})
			waitFor(t, "the relaying node to learn the host's model", func() bool {
				return len(relay.mesh.PeersHosting("mesh-reference")) > 0
			})

			resp := post(t, relay, "/v1/chat/completions", `{"model":"mesh-reference","stream":true,
				"stream_options":{"include_usage":true},"max_tokens":6,"messages":[{"role":"user","content":"hi"}]}`)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			<-g.started // the host is mid-generation

			stopper, other, stop := relay, host, stopRelay
			if stopping == "hosting" {
				stopper, other, stop = host, relay, stopHost
			}
			events := other.mesh.Subscribe(t.Context(), 64)
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			waitFor(t, "the stopping node to stop accepting", func() bool {
				c, err := http.Get("http://" + stopper.HTTPAddr().String() + "/health")
				if err == nil {
					c.Body.Close()
				}
				return err != nil
			})
			// The generation is held at the gate: the peer learns of the
			// leaving before the stream can finish.
			waitEvent(t, events, mesh.PeerLeft, stopper.key.ID())
			if _, ok := other.mesh.Peer(stopper.key.ID()); ok {
				t.Fatal("the node that left is still among the other's peers")
			}
			close(g.open)

			text, energy := readChatStream(t, resp.Body)
			if len(strings.Fields(text)) != 6 {
				t.Fatalf("relayed stream after the stop: %q", text)
			}
			env, _ := hex.DecodeString(energy.EnvelopeHex)
			if _, err := receipt.Open(env, host.key.Public()); err != nil {
				t.Fatalf("the drained answer's receipt: %v", err)
			}
			if err := <-stopped; err != nil {
				t.Fatalf("Serve after shutdown: %v", err)
			}
		})
	}
}
