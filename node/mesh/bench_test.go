package mesh

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
)

// benchPair is a joined client and host with the test HTTP handler served
// on the host's tunnels and on a loopback TCP server, and HTTP clients for
// the tunnel and for that server directly.
func benchPair(b *testing.B) (tunnel, direct *http.Client, url string) {
	srv := httptest.NewServer(testHandler())
	b.Cleanup(srv.Close)
	cfg := fastConfig()
	cfg.GossipInterval = time.Minute // keep gossip out of the measurement
	host := start(b, cfg)
	serveHTTP(b, host.Node, testHandler())
	client := start(b, cfg)
	if _, err := client.Dial(context.Background(), host.EndpointAddr()); err != nil {
		b.Fatal(err)
	}
	tunnel = tunnelClient(client.Node, host.ID())
	direct = &http.Client{Transport: &http.Transport{DisableCompression: true}}
	b.Cleanup(tunnel.CloseIdleConnections)
	b.Cleanup(direct.CloseIdleConnections)
	return tunnel, direct, srv.URL
}

func fetch(b *testing.B, c *http.Client, url string) time.Duration {
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	return time.Since(start)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkTunnelLatency times a small GET over keep-alive connections,
// through the tunnel and straight to the server, interleaved so both see
// the same machine, and reports their p50/p99 and ratios.
func BenchmarkTunnelLatency(b *testing.B) {
	tunnel, direct, url := benchPair(b)
	url += "/ping"
	fetch(b, tunnel, url) // open the keep-alive connections
	fetch(b, direct, url)
	var viaTunnel, viaDirect []time.Duration
	b.ResetTimer()
	for b.Loop() {
		viaTunnel = append(viaTunnel, fetch(b, tunnel, url))
		viaDirect = append(viaDirect, fetch(b, direct, url))
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	t50, t99 := percentile(viaTunnel, 0.50), percentile(viaTunnel, 0.99)
	d50, d99 := percentile(viaDirect, 0.50), percentile(viaDirect, 0.99)
	b.ReportMetric(us(t50), "tunnel_p50_us")
	b.ReportMetric(us(t99), "tunnel_p99_us")
	b.ReportMetric(us(d50), "direct_p50_us")
	b.ReportMetric(us(d99), "direct_p99_us")
	b.ReportMetric(float64(t50)/float64(d50), "p50_ratio")
	b.ReportMetric(float64(t99)/float64(d99), "p99_ratio")
}

// BenchmarkTunnelThroughput downloads a 64 MiB body through the tunnel and
// directly and reports both rates and their ratio.
func BenchmarkTunnelThroughput(b *testing.B) {
	const size = 64 << 20
	tunnel, direct, url := benchPair(b)
	url += "/blob/" + strconv.Itoa(size)
	stream := quicBaseline(b)
	var tt, dt, qt time.Duration
	b.ResetTimer()
	for b.Loop() {
		tt += fetch(b, tunnel, url)
		dt += fetch(b, direct, url)
		qt += stream(size)
	}
	mibps := func(d time.Duration) float64 { return float64(b.N) * size / (1 << 20) / d.Seconds() }
	b.ReportMetric(mibps(tt), "tunnel_MiB/s")
	b.ReportMetric(mibps(dt), "direct_MiB/s")
	b.ReportMetric(mibps(qt), "quic_MiB/s")
	b.ReportMetric(mibps(tt)/mibps(dt), "throughput_ratio")
	b.ReportMetric(mibps(tt)/mibps(qt), "tunnel_over_quic")
}

// quicBaseline returns a function that sends n bytes over one bare quic-go
// stream between two loopback endpoints configured as nodes are: the cost
// of QUIC itself on this machine, against which the tunnel's own share
// shows.
func quicBaseline(b *testing.B) func(n int64) time.Duration {
	srvKey, cliKey := newKey(b), newKey(b)
	srvTLS, err := identity.ServerConfig(srvKey, identity.ALPNMesh)
	if err != nil {
		b.Fatal(err)
	}
	base := fastConfig()
	cfg, _ := base.withDefaults()
	qc := &quic.Config{MaxStreamReceiveWindow: cfg.Limits.StreamWindow, MaxConnectionReceiveWindow: cfg.Limits.ConnWindow,
		InitialConnectionReceiveWindow: cfg.Limits.ConnWindow}
	ln, err := quic.ListenAddr("127.0.0.1:0", srvTLS, qc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	received := make(chan int64)
	go func() {
		c, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		for {
			s, err := c.AcceptStream(context.Background())
			if err != nil {
				return
			}
			n, _ := io.Copy(io.Discard, s)
			received <- n
		}
	}()
	cliTLS, err := identity.ClientConfig(cliKey, srvKey.ID(), identity.ALPNMesh)
	if err != nil {
		b.Fatal(err)
	}
	c, err := quic.DialAddr(context.Background(), ln.Addr().String(), cliTLS, qc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.CloseWithError(0, "") })
	return func(n int64) time.Duration {
		start := time.Now()
		s, err := c.OpenStreamSync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyN(s, zeros{}, n); err != nil {
			b.Fatal(err)
		}
		s.Close()
		if got := <-received; got != n {
			b.Fatalf("received %d of %d bytes", got, n)
		}
		return time.Since(start)
	}
}

// BenchmarkGossipConvergence10 starts ten nodes that each know only the
// first and times until every node has admitted the other nine, with the
// default 15 s gossip interval: convergence is driven by gossip on change,
// not by the periodic round. It reports the time and its ratio to one
// two-node join measured in the same run.
func BenchmarkGossipConvergence10(b *testing.B) {
	const size = 10
	cfg := fastConfig()
	cfg.GossipInterval = 0 // the default
	var converge, join time.Duration
	for b.Loop() {
		join += timeConverge(b, cfg, 2)
		converge += timeConverge(b, cfg, size)
	}
	b.ReportMetric(float64(converge.Milliseconds())/float64(b.N), "converge10_ms")
	b.ReportMetric(float64(join.Microseconds())/1000/float64(b.N), "join2_ms")
	b.ReportMetric(float64(converge)/float64(join), "converge_over_join")
}

// timeConverge starts size nodes bootstrapped to the first and returns how
// long until all are mutually admitted; the nodes are stopped after.
func timeConverge(b *testing.B, cfg Config, size int) time.Duration {
	b.StopTimer()
	first := newBenchNode(b, cfg)
	nodes := []*testNode{first}
	b.StartTimer()
	start := time.Now()
	cfg.Bootstrap = []EndpointAddr{first.EndpointAddr()}
	for range size - 1 {
		nodes = append(nodes, newBenchNode(b, cfg))
	}
	for {
		done := true
		for _, n := range nodes {
			if len(n.Peers()) != size-1 {
				done = false
				break
			}
		}
		if done {
			break
		}
		if time.Since(start) > 30*time.Second {
			b.Fatalf("%d nodes did not converge in 30s", size)
		}
		time.Sleep(time.Millisecond)
	}
	d := time.Since(start)
	b.StopTimer()
	for _, n := range nodes {
		n.stop(b)
	}
	b.StartTimer()
	return d
}

func newBenchNode(b *testing.B, cfg Config) *testNode {
	n, err := New(cfg, newKey(b), testLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &testNode{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { tn.done <- n.Serve(ctx) }()
	return tn
}

var _ net.Conn = (*tunnelConn)(nil)
