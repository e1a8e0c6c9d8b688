package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// stallingHarness is a server whose model streams far more than socket
// buffers hold, with one slot and no queue.
func stallingHarness(t *testing.T, writeTimeout time.Duration) *harness {
	h := newHarness(t, Config{Concurrency: 1, QueueDepth: -1, StreamWriteTimeout: writeTimeout, MeshAccess: anyPeer{}}, nil)
	piece := strings.Repeat("x", 4<<10)
	h.model.pieces = make([]string, 4096) // 16 MiB
	for i := range h.model.pieces {
		h.model.pieces[i] = piece
	}
	h.model.started = make(chan struct{}, 1)
	return h
}

// stalledStream sends a streaming chat request for "tiny" to addr and
// reads nothing of the answer.
func stalledStream(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"x"}]}`
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
}

// waitSlotFreed waits for h's generation to start, then for its slot to be
// given back.
func waitSlotFreed(t *testing.T, h *harness) {
	t.Helper()
	select {
	case <-h.model.started:
	case <-time.After(5 * time.Second):
		t.Fatal("generation never started")
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.srv.queued("tiny") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a client that reads nothing still holds the model's slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStalledReaderFreesSlot: a streaming client that reads nothing loses
// its stream once a write has waited StreamWriteTimeout, and the
// generation it held ends, freeing the model's slot.
func TestStalledReaderFreesSlot(t *testing.T) {
	h := stallingHarness(t, 100*time.Millisecond)
	stalledStream(t, h.http.Listener.Addr().String())
	waitSlotFreed(t, h)
}

// TestStalledReaderFreesRelayedSlot: the same through the mesh. The
// relaying node gives up its write to the stalled client and closes the
// tunnel, which ends the host's generation long before the host's own
// write deadline would.
func TestStalledReaderFreesRelayedSlot(t *testing.T) {
	host := stallingHarness(t, time.Minute)
	hostID := testID(2)
	tunnel := meshServer(t, host.srv, testID(3))
	relay := newHarness(t, Config{StreamWriteTimeout: 100 * time.Millisecond}, &fakeMesh{
		hosts:   map[string][]identity.EndpointID{"tiny": {hostID}},
		targets: map[identity.EndpointID]string{hostID: tunnel.Listener.Addr().String()},
	})
	delete(relay.reg.local, "tiny")
	stalledStream(t, relay.http.Listener.Addr().String())
	waitSlotFreed(t, host)
}

// TestServeClosesIdleConns: Serve closes a kept-alive connection that
// carries no request for IdleTimeout, and returns nil once its context
// ends.
func TestServeClosesIdleConns(t *testing.T) {
	reg := &fakeRegistry{self: testID(1), local: map[string]Model{}}
	srv := New(Config{IdleTimeout: 100 * time.Millisecond}, testID(1), reg, nil, &fakeNode{}, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, time.Second) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("health: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want it closed by the server", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestSlowBody: a client that sends part of its body and stalls is
// answered 408 once BodyTimeout has passed, instead of holding its
// handler.
func TestSlowBody(t *testing.T) {
	h := newHarness(t, Config{BodyTimeout: 100 * time.Millisecond}, nil)
	c, err := net.Dial("tcp", h.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\""); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", resp.StatusCode)
	}
}
