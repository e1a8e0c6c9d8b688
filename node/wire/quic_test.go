package wire

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
)

// quicPair connects two nodes over real QUIC on loopback with the mesh's
// mutual TLS and returns the dialler's connection, the listener's, and the
// dialler's identity as the listener proved it.
func quicPair(t *testing.T) (client, server *quic.Conn, clientID identity.EndpointID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serverKey, err := identity.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clientKey, err := identity.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := identity.ServerConfig(serverKey, identity.ALPNMesh)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := identity.ClientConfig(clientKey, serverKey.ID(), identity.ALPNMesh)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", serverTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = quic.DialAddr(ctx, ln.Addr().String(), clientTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseWithError(0, "") })
	server, err = ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.CloseWithError(0, "") })
	clientID, err = identity.PeerID(server.ConnectionState().TLS)
	if err != nil {
		t.Fatal(err)
	}
	if clientID != clientKey.ID() {
		t.Fatalf("server sees %s, client is %s", clientID.Short(), clientKey.ID().Short())
	}
	return client, server, clientID
}

// TestQUICStreams runs the wire API the way the mesh will: a gossip stream
// opened, typed, read, decoded and bound to the TLS identity, with reads on
// quic-go streams bounded and cancelled through the context.
func TestQUICStreams(t *testing.T) {
	client, server, clientID := quicPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Client: open GOSSIP with its own frame.
	out, err := client.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mine := sampleGossipFrame()
	mine.SenderId = clientID[:]
	mine.Peers[0].EndpointId = clientID[:]
	if err := WriteStreamOpen(ctx, out, StreamGossip, mine); err != nil {
		t.Fatal(err)
	}

	// Server: accept, dispatch on the type byte, decode and bind.
	in, err := server.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadStreamType(ctx, in)
	if err != nil || st != StreamGossip {
		t.Fatalf("stream type %v, %v", st, err)
	}
	body, err := ReadFrame(ctx, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeGossipFrame(body)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSender(got, clientID[:]); err != nil {
		t.Fatal(err)
	}
	forged := sampleGossipFrame() // claims 0xa1..., not the client's key
	if err := CheckSender(forged, clientID[:]); !errors.Is(err, ErrForgedSender) {
		t.Fatalf("forged sender: %v", err)
	}

	// A read with a deadline gives up when the peer sends nothing more ...
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := ReadFrame(short, in, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline on a quic stream: %v", err)
	}
	// ... and leaves the stream usable, with no deadline left behind.
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = WriteFrame(ctx, out, sampleGossipFrame())
	}()
	if _, err := ReadFrame(context.Background(), in, nil); err != nil {
		t.Fatalf("read after a timed-out read: %v", err)
	}

	// Cancelling unblocks a read at once.
	cancelled, cancelNow := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancelNow)
	if _, err := ReadFrame(cancelled, in, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel on a quic stream: %v", err)
	}

	// The peer closing its side ends the stream cleanly at a frame boundary.
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFrame(ctx, in, nil); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
}

// TestQUICRejectsReservedStream: a stream opened with a reserved type is
// refused before anything else on it is read.
func TestQUICRejectsReservedStream(t *testing.T) {
	client, server, _ := quicPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := client.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte{byte(StreamConfigPush), 1, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	in, err := server.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadStreamType(ctx, in)
	checkFrameError(t, err, ErrWrongStreamType, "stream type")
	if st != StreamConfigPush {
		t.Fatalf("got %v", st)
	}
}
