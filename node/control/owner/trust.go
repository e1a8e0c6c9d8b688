package owner

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Trust is the set of owner keys a node accepts control from. It is
// immutable once built, so it is safe for concurrent use.
type Trust struct {
	keys map[PublicKey]struct{}
}

// NewTrust trusts the given owner keys.
func NewTrust(keys ...PublicKey) *Trust {
	t := &Trust{keys: make(map[PublicKey]struct{}, len(keys))}
	for _, k := range keys {
		t.keys[k] = struct{}{}
	}
	return t
}

// Len is the number of trusted owners.
func (t *Trust) Len() int { return len(t.keys) }

// Trusts reports whether k is a trusted owner.
func (t *Trust) Trusts(k PublicKey) bool {
	_, ok := t.keys[k]
	return ok
}

// Keys lists the trusted owners in a stable order.
func (t *Trust) Keys() []PublicKey {
	out := make([]PublicKey, 0, len(t.keys))
	for k := range t.keys {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b PublicKey) int { return strings.Compare(string(a[:]), string(b[:])) })
	return out
}

// Authorize decides whether the endpoint peer, presenting certificate c at
// now, acts for a trusted owner. Checks run cheapest-first: shape, the
// binding to peer (a certificate replayed by another QUIC identity fails
// here), the signature, the validity window, and last the owner. It
// returns the owner on success.
func (t *Trust) Authorize(c *nodev1.SignedNodeOwnership, peer identity.EndpointID, now time.Time) (PublicKey, error) {
	if err := Check(c); err != nil {
		return PublicKey{}, err
	}
	if got := EndpointOf(c); got != peer {
		return PublicKey{}, fmt.Errorf("%w: certificate names %s, presented by %s", ErrWrongEndpoint, got.Short(), peer.Short())
	}
	if err := Verify(c, now); err != nil {
		return PublicKey{}, err
	}
	k := OwnerOf(c)
	if !t.Trusts(k) {
		return PublicKey{}, fmt.Errorf("%w: %s", ErrUntrusted, k)
	}
	return k, nil
}

// NodeTrust is the trust a node places in owners: the owner of its own
// certificate (nil when it has none) and the owner keys its config lists.
func NodeTrust(cert *nodev1.SignedNodeOwnership, keys ...PublicKey) *Trust {
	if cert != nil {
		keys = append(keys, OwnerOf(cert))
	}
	return NewTrust(keys...)
}

// LoadNodeCert reads a node's own certificate and checks that it certifies
// self and is valid at now, so that the node never advertises a
// certificate that peers would refuse. A missing file is no error: the
// node is simply not owned (nil, nil).
func LoadNodeCert(path string, self identity.EndpointID, now time.Time) (*nodev1.SignedNodeOwnership, error) {
	c, err := Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if got := EndpointOf(c); got != self {
		return nil, fmt.Errorf("%s: %w: it certifies %s, this node is %s", path, ErrWrongEndpoint, got.Short(), self.Short())
	}
	if err := Verify(c, now); err != nil {
		return nil, fmt.Errorf("%s: %w (issue a new one with `meshcli auth sign-node %s`)", path, err, self)
	}
	return c, nil
}
