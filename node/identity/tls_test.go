package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

// handshake runs one TLS handshake over loopback TCP and returns each side's
// result: the id the server saw (or its error) and the client's error.
func handshake(t *testing.T, server, client *tls.Config) (serverSaw EndpointID, serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		id  EndpointID
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		// Read so a client-side rejection surfaces on the server too.
		id, err := PeerID(tc.ConnectionState())
		done <- result{id: id, err: err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, client)
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	clientErr = tc.Handshake()
	if clientErr == nil && tc.ConnectionState().NegotiatedProtocol != client.NextProtos[0] {
		t.Errorf("negotiated ALPN %q, want %q", tc.ConnectionState().NegotiatedProtocol, client.NextProtos[0])
	}
	c.Close()
	r := <-done
	return r.id, r.err, clientErr
}

func mustServer(t *testing.T, k *Key) *tls.Config {
	t.Helper()
	c, err := ServerConfig(k)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustClient(t *testing.T, k *Key, want EndpointID) *tls.Config {
	t.Helper()
	c, err := ClientConfig(k, want, ALPNMesh)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMutualTLSHandshake(t *testing.T) {
	srv, _ := GenerateKey(nil)
	cli, _ := GenerateKey(nil)
	for _, alpn := range []string{ALPNMesh, ALPNControl} {
		cc, err := ClientConfig(cli, srv.ID(), alpn)
		if err != nil {
			t.Fatal(err)
		}
		saw, serr, cerr := handshake(t, mustServer(t, srv), cc)
		if cerr != nil || serr != nil {
			t.Fatalf("%s handshake: client %v, server %v", alpn, cerr, serr)
		}
		if saw != cli.ID() {
			t.Fatalf("server saw %s, want %s", saw.Short(), cli.ID().Short())
		}
	}
}

func TestDialWrongIDFails(t *testing.T) {
	srv, _ := GenerateKey(nil)
	cli, _ := GenerateKey(nil)
	other, _ := GenerateKey(nil)
	_, _, cerr := handshake(t, mustServer(t, srv), mustClient(t, cli, other.ID()))
	var mismatch *PeerMismatchError
	if !errors.As(cerr, &mismatch) {
		t.Fatalf("client error = %v, want PeerMismatchError", cerr)
	}
	if mismatch.Want != other.ID() || mismatch.Got != srv.ID() {
		t.Fatalf("mismatch = %+v", mismatch)
	}
}

// certWith builds a self-signed certificate for pub signed by signer.
func certWith(t *testing.T, pub crypto.PublicKey, signer crypto.Signer) []byte {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "x"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, signer)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestBadPeerCertificates(t *testing.T) {
	node, _ := GenerateKey(nil)
	nodeCert, err := node.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	otherNode, _ := GenerateKey(nil)
	otherCert, _ := otherNode.Certificate()

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	tampered := append([]byte{}, nodeCert.Certificate[0]...)
	tampered[len(tampered)-1] ^= 0x01 // last byte of the signature

	// Ed25519 key certified by someone else's signature: parses, key is
	// Ed25519, self-signature fails.
	foreignSigned := certWith(t, node.Public(), otherNode.Private())

	tests := []struct {
		name string
		cert tls.Certificate
		want error
	}{
		{"rsa", tls.Certificate{Certificate: [][]byte{certWith(t, &rsaKey.PublicKey, rsaKey)}, PrivateKey: rsaKey}, ErrNotEd25519},
		{"ecdsa", tls.Certificate{Certificate: [][]byte{certWith(t, &ecKey.PublicKey, ecKey)}, PrivateKey: ecKey}, ErrNotEd25519},
		{"two certificates", tls.Certificate{Certificate: [][]byte{nodeCert.Certificate[0], otherCert.Certificate[0]}, PrivateKey: node.Private()}, ErrTooManyCertificates},
		{"tampered", tls.Certificate{Certificate: [][]byte{tampered}, PrivateKey: node.Private()}, ErrBadSelfSignature},
		{"signed by another key", tls.Certificate{Certificate: [][]byte{foreignSigned}, PrivateKey: node.Private()}, ErrBadSelfSignature},
	}
	for _, tt := range tests {
		t.Run("client presents "+tt.name, func(t *testing.T) {
			srv, _ := GenerateKey(nil)
			client := mustClient(t, node, srv.ID())
			client.Certificates = []tls.Certificate{tt.cert}
			_, serr, _ := handshake(t, mustServer(t, srv), client)
			if !errors.Is(serr, tt.want) {
				t.Fatalf("server error = %v, want %v", serr, tt.want)
			}
		})
		t.Run("server presents "+tt.name, func(t *testing.T) {
			cli, _ := GenerateKey(nil)
			server := mustServer(t, node)
			server.Certificates = []tls.Certificate{tt.cert}
			_, _, cerr := handshake(t, server, mustClient(t, cli, node.ID()))
			if !errors.Is(cerr, tt.want) {
				t.Fatalf("client error = %v, want %v", cerr, tt.want)
			}
		})
	}
}

func TestClientWithoutCertificateRefused(t *testing.T) {
	srv, _ := GenerateKey(nil)
	cli, _ := GenerateKey(nil)
	client := mustClient(t, cli, srv.ID())
	client.Certificates = nil
	_, serr, _ := handshake(t, mustServer(t, srv), client)
	if serr == nil {
		t.Fatal("server accepted a client without a certificate")
	}
}

func TestVerifyPeerCertificatesDirect(t *testing.T) {
	if _, err := VerifyPeerCertificates(nil); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("no certs: %v", err)
	}
	if _, err := VerifyPeerCertificates([][]byte{{0x30, 0x00}}); !errors.Is(err, ErrBadCertificate) {
		t.Errorf("garbage cert: %v", err)
	}
	k, _ := GenerateKey(nil)
	c, _ := k.Certificate()
	id, err := VerifyPeerCertificates(c.Certificate)
	if err != nil || id != k.ID() {
		t.Errorf("own cert: %v, %v", id, err)
	}
}
