package mesh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// chunks is what the test server streams, one flush per element, as a
// model streams tokens.
var chunks = []string{"data: one\n\n", "data: two\n\n", "data: three\n\n", "data: [DONE]\n\n"}

// testHandler is the HTTP API the tests put behind a host.
func testHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			io.WriteString(w, c)
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
	})
	mux.HandleFunc("GET /blob/{size}", func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.Atoi(r.PathValue("size"))
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.CopyN(w, zeros{}, int64(size))
	})
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	return mux
}

// serveHTTP serves h on n's HTTP tunnels until the test ends.
func serveHTTP(t testing.TB, n *Node, h http.Handler) {
	t.Helper()
	ln, err := n.ListenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("tunnel API: %v", err)
		}
	})
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// tunnelClient is an HTTP client whose every connection is a tunnel from
// n to peer.
func tunnelClient(n *Node, peer identity.EndpointID) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return n.DialHTTP(ctx, peer)
		},
		DisableCompression: true,
	}}
}

// hostPair is a node with an HTTP server behind it and a node that
// reaches it.
func hostPair(t *testing.T) (client, host *testNode) {
	client, host = startHost(t, fastConfig())
	serveHTTP(t, host.Node, testHandler())
	return client, host
}

// startHost starts a host with cfg and a client node joined to it.
func startHost(t *testing.T, cfg Config) (client, host *testNode) {
	t.Helper()
	host = start(t, cfg)
	client = start(t, fastConfig())
	if _, err := client.Dial(t.Context(), host.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	return client, host
}

// TestTunnelHTTP: requests through a tunnel reach the host's HTTP server,
// a chunked stream comes back intact and in order, and a large upload
// arrives whole.
func TestTunnelHTTP(t *testing.T) {
	checkLeaks(t)
	client, host := hostPair(t)
	hc := tunnelClient(client.Node, host.ID())
	defer hc.CloseIdleConnections()

	resp, err := hc.Get("http://mesh/stream")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
		t.Errorf("transfer encoding %v, want chunked", resp.TransferEncoding)
	}
	var got []string
	buf := make([]byte, 256)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			got = append(got, string(buf[:n]))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	if joined := bytes.Join(toBytes(got), nil); string(joined) != string(bytes.Join(toBytes(chunks), nil)) {
		t.Fatalf("streamed body %q, want %q", joined, chunks)
	}
	if len(got) < 2 {
		t.Errorf("body arrived in %d reads; the chunks were not streamed", len(got))
	}

	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	resp, err = hc.Post("http://mesh/echo", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	echo, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); string(echo) != want {
		t.Fatalf("echo %q, want %q", echo, want)
	}
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// TestTunnelRefused: a node refuses tunnels while no listener takes them
// (none open yet, one that takes none within TunnelAccept, one closed),
// and the caller can tell.
func TestTunnelRefused(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.TunnelAccept = 200 * time.Millisecond
	a, b := startHost(t, cfg)
	refused := func(what string) {
		t.Helper()
		c, err := a.DialHTTP(t.Context(), b.ID())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		wantRefused(t, c, what)
	}
	refused("a tunnel to a node with no listener")
	ln, err := b.ListenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ListenHTTP(); err == nil {
		t.Fatal("a second listener opened beside the first")
	}
	start := time.Now()
	refused("a tunnel nobody accepts")
	if d := time.Since(start); d < cfg.Timeouts.TunnelAccept {
		t.Fatalf("refused after %v, before TunnelAccept (%v)", d, cfg.Timeouts.TunnelAccept)
	}
	ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v, want net.ErrClosed", err)
	}
	refused("a tunnel after the listener closed")
	if _, err := a.DialHTTP(t.Context(), newKey(t).ID()); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("tunnel to a stranger: %v, want ErrUnknownPeer", err)
	}
}

// TestTunnelPeerIdentity: a tunnel arrives in-process, as a connection
// that names the peer that opened it (its QUIC identity) and whose
// addresses are mesh addresses, not host:port pairs a server could take
// for a local client; half-closes pass both ways.
func TestTunnelPeerIdentity(t *testing.T) {
	checkLeaks(t)
	client, host := startHost(t, fastConfig())
	ln, err := host.ListenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := client.DialHTTP(t.Context(), host.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "hello")
	c.(interface{ CloseWrite() error }).CloseWrite()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if got := sc.(interface{ Peer() identity.EndpointID }).Peer(); got != client.ID() {
		t.Fatalf("tunnel from %s, want %s", got.Short(), client.ID().Short())
	}
	if ra, ok := sc.RemoteAddr().(PeerAddr); !ok || ra.ID != client.ID() || ra.Network() != "mesh" {
		t.Fatalf("remote address %#v", sc.RemoteAddr())
	}
	if host, _, err := net.SplitHostPort(sc.RemoteAddr().String()); err == nil && net.ParseIP(host) != nil {
		t.Fatalf("remote address %q reads as an IP address and port", sc.RemoteAddr())
	}
	got, err := io.ReadAll(sc)
	if err != nil || string(got) != "hello" {
		t.Fatalf("server read %q, %v; want the peer's bytes, then its end", got, err)
	}
	io.WriteString(sc, "world")
	sc.(interface{ CloseWrite() error }).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(c); err != nil || string(got) != "world" {
		t.Fatalf("peer read %q, %v; want the answer, then its end", got, err)
	}
}

// TestTunnelIdleTimeout: a tunnel nobody uses is closed by the host.
func TestTunnelIdleTimeout(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Timeouts.TunnelIdle = 200 * time.Millisecond
	client, host := startHost(t, cfg)
	accepted := silentAPI(t, host.Node) // accepts and then says nothing
	c, err := client.DialHTTP(t.Context(), host.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != StreamCodeTimeout {
		t.Fatalf("idle tunnel read: %v, want a reset with StreamCodeTimeout", err)
	}
	sc := <-accepted
	defer sc.Close()
	if _, err := sc.Read(make([]byte, 1)); err == nil {
		t.Fatal("the host's end of the reset tunnel still reads")
	}
}

// silentAPI takes n's HTTP tunnels and says nothing on them; each one it
// accepts comes out of the channel.
func silentAPI(t testing.TB, n *Node) (accepted <-chan net.Conn) {
	t.Helper()
	ln, err := n.ListenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

// tunnelOpener opens tunnels from client to host, closed when the test
// ends; relayed waits for one to reach the host's API.
func tunnelOpener(t *testing.T, client, host *testNode, accepted <-chan net.Conn) (open func() net.Conn, relayed func() net.Conn) {
	open = func() net.Conn {
		t.Helper()
		c, err := client.DialHTTP(t.Context(), host.ID())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	relayed = func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			t.Cleanup(func() { c.Close() })
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("a tunnel within the limit never reached the API")
			return nil
		}
	}
	return open, relayed
}

// wantRefused checks that the host refused the tunnel c.
func wantRefused(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, ErrTunnelRefused) {
		t.Fatalf("%s: %v, want ErrTunnelRefused", what, err)
	}
}

// TestStalledTunnelsKeepGossip: tunnels stalled both ways (a target that
// neither reads nor stops writing, a caller that stops reading) hold their
// streams' flow-control windows and no more: gossip on the same
// connection still completes, in both directions.
func TestStalledTunnelsKeepGossip(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	client, host := startHost(t, cfg)
	accepted := silentAPI(t, host.Node)
	open, relayed := tunnelOpener(t, client, host, accepted)
	var wg sync.WaitGroup
	stalled := make(chan error, 3)
	for range 3 {
		c := open()
		tc := relayed()
		go io.Copy(tc, zeros{}) // towards a caller that never reads; ends when tc closes
		// Towards a target that never reads: the write stalls once the
		// windows and socket buffers are full.
		c.SetWriteDeadline(time.Now().Add(time.Second))
		wg.Go(func() {
			_, err := io.Copy(c, io.LimitReader(zeros{}, 256<<20))
			stalled <- err
		})
	}
	wg.Wait()
	for range 3 {
		if err := <-stalled; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("writing into a stalled tunnel: %v, want it to stall until the deadline", err)
		}
	}
	for _, tc := range []struct {
		name     string
		from, to *testNode
	}{{"client to host", client, host}, {"host to client", host, client}} {
		pc, err := tc.from.admittedConn(tc.to.ID())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), cfg.Timeouts.Gossip)
		err = tc.from.exchange(ctx, pc)
		cancel()
		if err != nil {
			t.Fatalf("gossip %s beside stalled tunnels: %v", tc.name, err)
		}
	}
}

// TestTunnelLimit: the node relays at most MaxTunnels tunnels at once;
// one past them is refused, and a slot frees when a tunnel ends.
func TestTunnelLimit(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxTunnels = 2
	cfg.Limits.MaxTunnelsPerPeer = 2
	client, host := startHost(t, cfg)
	accepted := silentAPI(t, host.Node)
	open, relayed := tunnelOpener(t, client, host, accepted)
	first := open()
	firstTarget := relayed()
	open()
	relayed()
	wantRefused(t, open(), "tunnel past the limit")
	// The first tunnel ends at both ends; its slot is free again.
	first.Close()
	firstTarget.Close()
	waitFor(t, 5*time.Second, "a tunnel slot freed", func() bool { return len(host.tunnels) < cfg.Limits.MaxTunnels })
	open()
	relayed()
}

// TestTunnelSharePerPeer: one peer holds at most MaxTunnelsPerPeer of the
// node's tunnels, so others still get theirs.
func TestTunnelSharePerPeer(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxTunnels, cfg.Limits.MaxTunnelsPerPeer = 4, 2
	host := start(t, cfg)
	accepted := silentAPI(t, host.Node)
	greedy, other := start(t, fastConfig()), start(t, fastConfig())
	for _, c := range []*testNode{greedy, other} {
		if _, err := c.Dial(t.Context(), host.EndpointAddr()); err != nil {
			t.Fatal(err)
		}
	}
	open, relayed := tunnelOpener(t, greedy, host, accepted)
	for range cfg.Limits.MaxTunnelsPerPeer {
		open()
		relayed()
	}
	wantRefused(t, open(), "a tunnel past the peer's share")
	open, relayed = tunnelOpener(t, other, host, accepted)
	for range cfg.Limits.MaxTunnelsPerPeer {
		open()
		relayed()
	}
}

// TestTunnelsLeaveStreamsForGossip: a peer's tunnels, however many it
// asks for, leave streams of its connection free: the host refuses them
// before they take every stream QUIC lets the peer open, so the peer's
// gossip still gets a stream.
func TestTunnelsLeaveStreamsForGossip(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxIncomingStreams = 8
	client, host := startHost(t, cfg)
	accepted := silentAPI(t, host.Node)
	open, _ := tunnelOpener(t, client, host, accepted)
	for range cfg.Limits.MaxIncomingStreams {
		c := open()
		select {
		case tc := <-accepted:
			t.Cleanup(func() { tc.Close() })
			continue
		case <-time.After(time.Second):
		}
		wantRefused(t, c, "a tunnel past the streams left for gossip")
		pc, err := client.admittedConn(host.ID())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), cfg.Timeouts.Gossip)
		defer cancel()
		if err := client.exchange(ctx, pc); err != nil {
			t.Fatalf("gossip beside the tunnels: %v", err)
		}
		return
	}
	t.Fatalf("all %d streams relayed as tunnels", cfg.Limits.MaxIncomingStreams)
}

// TestRouteTable: a passive client learns who serves what, and the mesh
// id, without being admitted.
func TestRouteTable(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Self = hostSelf(9337, "qwen", "llama")
	a := start(t, cfg)
	b := start(t, fastConfig()) // serves nothing
	if _, err := b.Dial(t.Context(), a.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	passive := newKey(t)
	rt, err := FetchRouteTable(t.Context(), passive, a.EndpointAddr())
	if err != nil {
		t.Fatal(err)
	}
	aid, bid := a.ID(), b.ID()
	want := []*nodev1.RouteEntry{
		{EndpointId: aid[:], Model: "llama"},
		{EndpointId: aid[:], Model: "qwen"},
		{EndpointId: bid[:], Model: ""},
	}
	slices.SortFunc(want, func(x, y *nodev1.RouteEntry) int {
		if c := bytes.Compare(x.EndpointId, y.EndpointId); c != 0 {
			return c
		}
		return bytes.Compare([]byte(x.Model), []byte(y.Model))
	})
	if len(rt.Entries) != len(want) {
		t.Fatalf("entries %v, want %v", rt.Entries, want)
	}
	for i := range want {
		if !proto.Equal(rt.Entries[i], want[i]) {
			t.Errorf("entry %d: %v, want %v", i, rt.Entries[i], want[i])
		}
	}
	if rt.GetMeshId() != "test-mesh" || rt.GetGen() != 1 {
		t.Errorf("mesh id %q gen %d", rt.GetMeshId(), rt.GetGen())
	}
	if hasPeer(a.Node, passive.ID()) {
		t.Fatal("the route-table requester was admitted")
	}
	if _, err := FetchRouteTable(t.Context(), nil, a.EndpointAddr()); err != nil {
		t.Fatalf("anonymous fetch: %v", err)
	}
	waitFor(t, 2*time.Second, "requesters gone", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.peers) == 1
	})
}

// TestRouteTableFits: a node serving more models than one frame can list
// still answers ROUTE_REQUEST, with as many entries as fit, in order.
func TestRouteTableFits(t *testing.T) {
	checkLeaks(t)
	models := make([]string, 150_000) // about 9 MiB of route entries
	for i := range models {
		models[i] = fmt.Sprintf("model-%014d", i)
	}
	cfg := fastConfig()
	cfg.Self = hostSelf(9337, models...)
	// 8 MiB through QUIC under the race detector on a loaded machine: the
	// passive client is neither cut off by the gossip timeout nor dropped
	// as a peer that never gossiped.
	cfg.Timeouts.Gossip, cfg.Timeouts.Admission = 30*time.Second, 30*time.Second
	a := start(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rt, err := FetchRouteTable(ctx, nil, a.EndpointAddr())
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.Entries) == 0 || len(rt.Entries) >= len(models) || rt.GetGen() != 1 {
		t.Fatalf("%d entries of %d, gen %d", len(rt.Entries), len(models), rt.GetGen())
	}
	for i, e := range rt.Entries {
		if e.GetModel() != models[i] {
			t.Fatalf("entry %d is %q, want %q: the table must keep its head", i, e.GetModel(), models[i])
		}
	}
	// It is the longest head that fits.
	rt.Entries = append(rt.Entries, &nodev1.RouteEntry{EndpointId: rt.Entries[0].EndpointId, Model: models[len(rt.Entries)]})
	if proto.Size(rt) <= wire.MaxControlFrameBytes {
		t.Fatal("an entry that fitted was left out")
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestRouteTableCached: a flood of ROUTE_REQUESTs is answered from one
// encoded table; a change to what it lists shows in the next answer, and
// the table is rebuilt once it is a second old.
func TestRouteTableCached(t *testing.T) {
	checkLeaks(t)
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	var mu sync.Mutex
	models := []string{"qwen"}
	cfg := fastConfig()
	cfg.Now = clock.Now
	cfg.Self = func() *nodev1.PeerAnnouncement {
		mu.Lock()
		defer mu.Unlock()
		return hostSelf(9337, models...)()
	}
	a := start(t, cfg)
	rc := dialRaw(t, a.EndpointAddr(), identity.ALPNMesh)
	fetch := func() []string {
		t.Helper()
		s := rc.openFrame(wire.StreamRouteRequest, &nodev1.RouteTableRequest{Gen: wire.ProtocolGeneration})
		s.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		body, err := wire.ReadFrame(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := wire.DecodeRouteTable(body)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range rt.Entries {
			out = append(out, identity.EndpointID(e.EndpointId).Short()+"/"+e.GetModel())
		}
		return out
	}
	builds := func() int {
		a.routes.mu.Lock()
		defer a.routes.mu.Unlock()
		return a.routes.builds
	}

	first := fetch()
	for range 30 {
		if got := fetch(); !slices.Equal(got, first) {
			t.Fatalf("cached table %v, first %v", got, first)
		}
	}
	if b := builds(); b != 1 {
		t.Fatalf("31 requests built the table %d times, want once", b)
	}

	// A peer joins: the next answer lists it.
	b := start(t, fastConfig())
	if _, err := b.Dial(t.Context(), a.EndpointAddr()); err != nil {
		t.Fatal(err)
	}
	if got, want := fetch(), b.ID().Short()+"/"; !slices.Contains(got, want) {
		t.Fatalf("table after a join %v, want it to list %s", got, want)
	}
	// The node's own models change: likewise.
	mu.Lock()
	models = []string{"llama"}
	mu.Unlock()
	if err := a.UpdateSelf(); err != nil {
		t.Fatal(err)
	}
	if got, want := fetch(), a.ID().Short()+"/llama"; !slices.Contains(got, want) {
		t.Fatalf("table after UpdateSelf %v, want it to list %s", got, want)
	}
	before := builds()
	fetch()
	if got := builds(); got != before {
		t.Fatalf("rebuilt with nothing changed: %d builds, then %d", before, got)
	}
	clock.advance(routeCacheTTL)
	fetch()
	if got := builds(); got != before+1 {
		t.Fatalf("a table %v old was served: %d builds, then %d", routeCacheTTL, before, got)
	}
}

// TestControlALPN: control connections are refused until a handler is
// registered, then handed to it with the caller's identity.
func TestControlALPN(t *testing.T) {
	checkLeaks(t)
	n := start(t, fastConfig())
	rc := dialRaw(t, n.EndpointAddr(), identity.ALPNControl)
	rc.connClosedWith(CodeControlUnavailable)

	got := make(chan identity.EndpointID, 1)
	n.HandleControl(func(ctx context.Context, conn *quic.Conn, peer identity.EndpointID) {
		got <- peer
		<-ctx.Done() // hold the connection until the node stops
	})
	rc = dialRaw(t, n.EndpointAddr(), identity.ALPNControl)
	select {
	case id := <-got:
		if id != rc.id {
			t.Fatalf("handler got %s, want %s", id.Short(), rc.id.Short())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("handler not called")
	}
	if hasPeer(n.Node, rc.id) {
		t.Fatal("a control connection joined the mesh")
	}
}

// TestControlConnLimit: the node holds at most MaxControlConns control
// connections at once; one past them is closed busy, and a slot frees
// when a connection ends.
func TestControlConnLimit(t *testing.T) {
	checkLeaks(t)
	cfg := fastConfig()
	cfg.Limits.MaxControlConns = 2
	n := start(t, cfg)
	served := make(chan struct{}, 4)
	n.HandleControl(func(ctx context.Context, conn *quic.Conn, peer identity.EndpointID) {
		served <- struct{}{}
		select { // hold the connection while it lives
		case <-ctx.Done():
		case <-conn.Context().Done():
		}
	})
	handled := func() {
		t.Helper()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("a control connection within the limit was not handed to the handler")
		}
	}
	var held []*rawClient
	for range cfg.Limits.MaxControlConns {
		held = append(held, dialRaw(t, n.EndpointAddr(), identity.ALPNControl))
		handled()
	}
	dialRefused(t, n.EndpointAddr(), identity.ALPNControl, CodeBusy)
	held[0].conn.CloseWithError(0, "")
	waitFor(t, 3*time.Second, "a control slot freed", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.controls) < cfg.Limits.MaxControlConns
	})
	dialRaw(t, n.EndpointAddr(), identity.ALPNControl)
	handled()
	for _, rc := range held[1:] {
		if !rc.alive() {
			t.Fatal("a held control connection was closed")
		}
	}
}
