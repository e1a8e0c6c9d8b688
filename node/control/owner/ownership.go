package owner

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Version is the SignedNodeOwnership version this package issues and
// accepts.
const Version = 1

// domainTag prefixes the signed bytes so that an ownership signature can
// never be mistaken for a signature over anything else an owner key signs.
const domainTag = "meshnode/node-ownership/v1\n"

// MaxSkew is how far in the future issued_at may lie: clocks on edge boxes
// drift, and a certificate issued a minute "from now" is not forged.
const MaxSkew = 5 * time.Minute

// Bounds on the free-form fields of a certificate, which arrive from the
// network.
const (
	maxCertID   = 64
	maxOwnerID  = 128
	maxLabel    = 128
	maxHostname = 253
)

// Errors of certificate checks. Each failure wraps exactly one.
var (
	// ErrMalformed: a field is missing, of the wrong length or out of
	// bounds, or owner_id does not name owner_sign_public_key.
	ErrMalformed = errors.New("owner: malformed ownership certificate")
	// ErrSignature: the signature does not verify under the owner key.
	ErrSignature = errors.New("owner: ownership signature does not verify")
	// ErrExpired: the certificate's validity has ended.
	ErrExpired = errors.New("owner: ownership certificate has expired")
	// ErrNotYetValid: issued_at lies further in the future than MaxSkew.
	ErrNotYetValid = errors.New("owner: ownership certificate is not yet valid")
	// ErrWrongEndpoint: the certificate is bound to another endpoint than
	// the one presenting it.
	ErrWrongEndpoint = errors.New("owner: ownership certificate is bound to another endpoint")
	// ErrUntrusted: the owner is not one this node trusts.
	ErrUntrusted = errors.New("owner: owner is not trusted")
)

// PublicKey is an owner's Ed25519 public key.
type PublicKey [ed25519.PublicKeySize]byte

// KeyOf returns the public half of an owner key.
func KeyOf(k *identity.Key) PublicKey { return PublicKey(k.ID()) }

// String is the key's did:key, which is also the owner_id of the
// certificates it signs.
func (k PublicKey) String() string { return identity.EndpointID(k).DIDKey() }

// MarshalText writes the did:key form, so keys read naturally in TOML and
// JSON.
func (k PublicKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText accepts what ParsePublicKey does.
func (k *PublicKey) UnmarshalText(b []byte) error {
	v, err := ParsePublicKey(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// ParsePublicKey reads an owner key written as its did:key or as 64 hex
// characters.
func ParsePublicKey(s string) (PublicKey, error) {
	s = strings.TrimSpace(s)
	var id identity.EndpointID
	var err error
	if strings.HasPrefix(s, "did:") {
		id, err = identity.ParseDIDKey(s)
	} else {
		id, err = identity.ParseEndpointID(s)
	}
	if err != nil {
		return PublicKey{}, fmt.Errorf("owner key: %w", err)
	}
	return PublicKey(id), nil
}

// Options say what a certificate certifies.
type Options struct {
	// Endpoint is the certified endpoint: a node id, or a meshcli client
	// identity.
	Endpoint identity.EndpointID
	// IssuedAt and ExpiresAt bound the certificate's validity; ExpiresAt
	// must be later.
	IssuedAt, ExpiresAt time.Time
	// Label and HostnameHint are optional, informative names for the
	// endpoint. A node advertises its certificate in gossip, so they are
	// public.
	Label, HostnameHint string
	// Rand supplies the certificate id (crypto/rand when nil).
	Rand io.Reader
}

// Issue signs a certificate binding o.Endpoint to the owner of key.
func Issue(key *identity.Key, o Options) (*nodev1.SignedNodeOwnership, error) {
	if key == nil {
		return nil, errors.New("owner: no owner key")
	}
	if o.Endpoint.IsZero() {
		return nil, fmt.Errorf("%w: no endpoint to certify", ErrMalformed)
	}
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	var certID [16]byte
	if _, err := io.ReadFull(rnd, certID[:]); err != nil {
		return nil, fmt.Errorf("owner: certificate id: %w", err)
	}
	pub := KeyOf(key)
	c := &nodev1.SignedNodeOwnership{
		Version:            Version,
		CertId:             hex.EncodeToString(certID[:]),
		OwnerId:            pub.String(),
		OwnerSignPublicKey: pub[:],
		NodeEndpointId:     o.Endpoint[:],
		IssuedAtUnixMs:     unixMs(o.IssuedAt),
		ExpiresAtUnixMs:    unixMs(o.ExpiresAt),
	}
	if o.Label != "" {
		c.NodeLabel = proto.String(o.Label)
	}
	if o.HostnameHint != "" {
		c.HostnameHint = proto.String(o.HostnameHint)
	}
	if err := Check(c); err != nil {
		return nil, err
	}
	msg, err := SigningBytes(c)
	if err != nil {
		return nil, err
	}
	c.Signature = key.Sign(msg)
	return c, nil
}

// SigningBytes returns what the certificate's signature covers: the domain
// tag, then the deterministic protobuf encoding of c with an empty
// signature. Fields a newer issuer set that this build does not know are
// part of the encoding, so they are signed too.
func SigningBytes(c *nodev1.SignedNodeOwnership) ([]byte, error) {
	unsigned := proto.CloneOf(c)
	unsigned.Signature = nil
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte(domainTag), unsigned)
	if err != nil {
		return nil, fmt.Errorf("owner: encode certificate: %w", err)
	}
	return b, nil
}

// Check checks a certificate's shape without verifying it: version, key and
// id lengths, bounded names, owner_id naming the owner key, and a validity
// window that ends after it begins.
func Check(c *nodev1.SignedNodeOwnership) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	switch {
	case c == nil:
		return bad("missing")
	case c.GetVersion() != Version:
		return bad("version %d, want %d", c.GetVersion(), Version)
	case len(c.GetOwnerSignPublicKey()) != ed25519.PublicKeySize:
		return bad("owner key is %d bytes, want %d", len(c.GetOwnerSignPublicKey()), ed25519.PublicKeySize)
	case len(c.GetNodeEndpointId()) != len(identity.EndpointID{}):
		return bad("endpoint id is %d bytes, want %d", len(c.GetNodeEndpointId()), len(identity.EndpointID{}))
	case c.GetCertId() == "" || len(c.GetCertId()) > maxCertID:
		return bad("cert_id is %d bytes, want 1 to %d", len(c.GetCertId()), maxCertID)
	case len(c.GetOwnerId()) > maxOwnerID:
		return bad("owner_id is %d bytes, limit %d", len(c.GetOwnerId()), maxOwnerID)
	case len(c.GetNodeLabel()) > maxLabel || !utf8.ValidString(c.GetNodeLabel()):
		return bad("node_label is not UTF-8 of at most %d bytes", maxLabel)
	case len(c.GetHostnameHint()) > maxHostname || !utf8.ValidString(c.GetHostnameHint()):
		return bad("hostname_hint is not UTF-8 of at most %d bytes", maxHostname)
	case c.GetExpiresAtUnixMs() <= c.GetIssuedAtUnixMs():
		return bad("expires at %d ms, not after it is issued at %d ms", c.GetExpiresAtUnixMs(), c.GetIssuedAtUnixMs())
	}
	if want := OwnerOf(c).String(); c.GetOwnerId() != want {
		return bad("owner_id %q does not name the owner key %s", truncate(c.GetOwnerId()), want)
	}
	return nil
}

// Verify checks c's shape, its signature, and that now falls within its
// validity window. It says nothing about who may present c, nor whether
// its owner is trusted: see Trust.Authorize.
func Verify(c *nodev1.SignedNodeOwnership, now time.Time) error {
	if err := Check(c); err != nil {
		return err
	}
	if len(c.GetSignature()) != ed25519.SignatureSize {
		return fmt.Errorf("%w: signature is %d bytes, want %d", ErrSignature, len(c.GetSignature()), ed25519.SignatureSize)
	}
	msg, err := SigningBytes(c)
	if err != nil {
		return err
	}
	if !ed25519.Verify(c.GetOwnerSignPublicKey(), msg, c.GetSignature()) {
		return ErrSignature
	}
	ms := unixMs(now)
	if ms >= c.GetExpiresAtUnixMs() {
		return fmt.Errorf("%w: on %s", ErrExpired, Expires(c).Format(time.RFC3339))
	}
	if c.GetIssuedAtUnixMs() > ms+uint64(MaxSkew.Milliseconds()) {
		return fmt.Errorf("%w: issued at %s", ErrNotYetValid, Issued(c).Format(time.RFC3339))
	}
	return nil
}

// OwnerOf returns the owner key a certificate names (zero when its length
// is wrong; Check reports that).
func OwnerOf(c *nodev1.SignedNodeOwnership) PublicKey {
	var k PublicKey
	if len(c.GetOwnerSignPublicKey()) == len(k) {
		copy(k[:], c.GetOwnerSignPublicKey())
	}
	return k
}

// EndpointOf returns the endpoint a certificate is bound to (zero when its
// length is wrong).
func EndpointOf(c *nodev1.SignedNodeOwnership) identity.EndpointID {
	id, _ := identity.IDFromBytes(c.GetNodeEndpointId())
	return id
}

// Issued and Expires are the certificate's validity window.
func Issued(c *nodev1.SignedNodeOwnership) time.Time {
	return time.UnixMilli(int64(min(c.GetIssuedAtUnixMs(), 1<<62))).UTC()
}

// Expires is when the certificate stops being valid.
func Expires(c *nodev1.SignedNodeOwnership) time.Time {
	return time.UnixMilli(int64(min(c.GetExpiresAtUnixMs(), 1<<62))).UTC()
}

func unixMs(t time.Time) uint64 {
	if ms := t.UnixMilli(); ms > 0 {
		return uint64(ms)
	}
	return 0
}

func truncate(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
