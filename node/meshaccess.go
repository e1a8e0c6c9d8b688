package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Mesh access policies (api.mesh_access): whose requests, tunnelled to
// this node through the mesh, it serves. The mesh admits any node that
// gossips validly, and the API key is never forwarded by a relaying node,
// so this is the only thing between an admitted stranger and the node's
// models.
const (
	// MeshAccessAny serves every admitted peer.
	MeshAccessAny = "any"
	// MeshAccessOwner serves peers that gossip an ownership certificate
	// bound to their endpoint, valid now, from an owner this node trusts
	// (its own certificate's owner and control.owner_keys).
	MeshAccessOwner = "owner"
	// MeshAccessNone serves no peer.
	MeshAccessNone = "none"
)

// meshAccess is the node's api.PeerPolicy.
type meshAccess struct {
	policy string
	trust  func() *owner.Trust // the node's trust as it is now
	// peer is the announcement of an admitted peer.
	peer func(identity.EndpointID) (*nodev1.PeerAnnouncement, bool)
	now  func() time.Time
}

// AllowPeer implements api.PeerPolicy. The peer id is the one its QUIC
// connection proved; the certificate is the one it gossips, and it only
// counts if bound to that id.
func (m *meshAccess) AllowPeer(peer identity.EndpointID) error {
	switch m.policy {
	case MeshAccessAny:
		return nil
	case MeshAccessOwner:
		const policy = `this node serves only peers certified by an owner it trusts (mesh_access = "owner")`
		trust := m.trust()
		if trust.Len() == 0 {
			return fmt.Errorf("%s, and it trusts no owner: it has no ownership certificate and control.owner_keys is empty", policy)
		}
		ann, ok := m.peer(peer)
		if !ok {
			return fmt.Errorf("%s: peer %s is not an admitted member of the mesh", policy, peer)
		}
		cert := ann.GetOwnerAttestation()
		if cert == nil {
			return fmt.Errorf("%s: peer %s announces no ownership certificate", policy, peer)
		}
		if _, err := trust.Authorize(cert, peer, m.now()); err != nil {
			return fmt.Errorf("%s: the ownership certificate of peer %s is refused: %w", policy, peer, err)
		}
		return nil
	case MeshAccessNone:
		return errors.New(`this node serves no requests from mesh peers (mesh_access = "none")`)
	}
	return fmt.Errorf("this node's mesh access policy %q is unknown, so it serves no mesh peer", m.policy)
}

// newMeshAccess is the policy of api.mesh_access over the node's trust
// and its mesh's peers, said in the log at start.
func (n *Node) newMeshAccess() *meshAccess {
	m := &meshAccess{
		policy: n.cfg.API.MeshAccess,
		trust:  n.trust.Load,
		peer: func(id identity.EndpointID) (*nodev1.PeerAnnouncement, bool) {
			p, ok := n.mesh.Peer(id)
			return p.Announcement, ok
		},
		now: time.Now,
	}
	n.log.Info("mesh access", "policy", m.policy, "trusted_owners", m.trust().Len())
	if m.policy == MeshAccessOwner && m.trust().Len() == 0 {
		n.log.Warn(`api.mesh_access is "owner" but this node trusts no owner (it has no ownership certificate and control.owner_keys is empty): ` +
			"it will refuse every request mesh peers tunnel to it; certify it with `meshcli auth sign-node`, list owner keys, or set api.mesh_access")
	}
	return m
}
