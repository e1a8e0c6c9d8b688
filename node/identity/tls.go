package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// The two ALPNs of one QUIC listener (DESIGN.md): the public mesh protocol
// and the owner's private control lane.
const (
	ALPNMesh    = "mesh-llm/1"
	ALPNControl = "mesh-llm-control/1"
)

// Errors of peer-certificate verification. Each failure wraps one of them,
// so callers can tell a wrong peer from a malformed one.
var (
	ErrNoCertificate       = errors.New("identity: peer presented no certificate")
	ErrTooManyCertificates = errors.New("identity: peer presented more than one certificate")
	ErrNotEd25519          = errors.New("identity: peer certificate key is not Ed25519")
	ErrBadSelfSignature    = errors.New("identity: peer certificate self-signature does not verify")
	ErrBadCertificate      = errors.New("identity: peer certificate does not parse")
)

// PeerMismatchError is returned when a dialled peer proves a different
// identity from the one that was dialled.
type PeerMismatchError struct {
	Want, Got EndpointID
}

func (e *PeerMismatchError) Error() string {
	return fmt.Sprintf("identity: dialled peer %s but it is %s", e.Want.Short(), e.Got.Short())
}

// Certificate returns a self-signed X.509 certificate over the key, for
// TLS. Only its key and self-signature carry meaning: peers ignore names and
// validity dates (an EndpointID is the key, and clocks on edge boxes drift).
func (k *Key) Certificate() (tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("identity: certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: k.id.String()},
		NotBefore:             time.Unix(0, 0).UTC(),
		NotAfter:              time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k.priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("identity: create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k.priv}, nil
}

// VerifyPeerCertificates checks a peer's TLS certificate list: exactly one
// certificate, holding an Ed25519 key, whose self-signature verifies. It
// returns the peer's EndpointID. The TLS 1.3 handshake separately proves the
// peer holds the private key (CertificateVerify), so together they bind the
// connection to the id.
func VerifyPeerCertificates(rawCerts [][]byte) (EndpointID, error) {
	switch len(rawCerts) {
	case 0:
		return EndpointID{}, ErrNoCertificate
	case 1:
	default:
		return EndpointID{}, fmt.Errorf("%w: got %d", ErrTooManyCertificates, len(rawCerts))
	}
	cert, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return EndpointID{}, fmt.Errorf("%w: %v", ErrBadCertificate, err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || cert.PublicKeyAlgorithm != x509.Ed25519 {
		return EndpointID{}, fmt.Errorf("%w: it is %v", ErrNotEd25519, cert.PublicKeyAlgorithm)
	}
	if cert.SignatureAlgorithm != x509.PureEd25519 {
		return EndpointID{}, fmt.Errorf("%w: signed with %v, want Ed25519", ErrBadSelfSignature, cert.SignatureAlgorithm)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		return EndpointID{}, fmt.Errorf("%w: %v", ErrBadSelfSignature, err)
	}
	return IDFromPublicKey(pub)
}

// PeerID returns the verified peer identity of a completed handshake.
func PeerID(cs tls.ConnectionState) (EndpointID, error) {
	raw := make([][]byte, len(cs.PeerCertificates))
	for i, c := range cs.PeerCertificates {
		raw[i] = c.Raw
	}
	return VerifyPeerCertificates(raw)
}

// ServerConfig is the TLS 1.3 configuration of a listener that accepts any
// peer presenting a valid node certificate, on the given ALPNs (both mesh
// ALPNs when none are given). Who may do what is decided above TLS, by
// admission and owner control; TLS only proves who the peer is.
func ServerConfig(k *Key, alpns ...string) (*tls.Config, error) {
	cert, err := k.Certificate()
	if err != nil {
		return nil, err
	}
	if len(alpns) == 0 {
		alpns = []string{ALPNMesh, ALPNControl}
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   alpns,
		// The client's chain is checked by VerifyPeerCertificate, not
		// against a CA pool: there is no CA.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			_, err := VerifyPeerCertificates(rawCerts)
			return err
		},
	}, nil
}

// ClientConfig is the TLS 1.3 configuration for dialling the node expected
// on alpn. The handshake fails unless the server proves exactly that id.
func ClientConfig(k *Key, expected EndpointID, alpn string) (*tls.Config, error) {
	cert, err := k.Certificate()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{alpn},
		// Peers are authenticated by key, not by name or CA; the callback
		// below does all of the verification.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			got, err := VerifyPeerCertificates(rawCerts)
			if err != nil {
				return err
			}
			if got != expected {
				return &PeerMismatchError{Want: expected, Got: got}
			}
			return nil
		},
	}, nil
}
