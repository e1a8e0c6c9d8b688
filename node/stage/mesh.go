package stage

import (
	"context"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// MeshDialer opens meshnode-stage/1 streams over a mesh node's
// SUBPROTOCOL streams.
type MeshDialer struct{ Node *mesh.Node }

// Open opens a SUBPROTOCOL stream to peer for meshnode-stage/1.
func (d MeshDialer) Open(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
	s, err := d.Node.OpenSubprotocol(ctx, peer, stagewire.Name, stagewire.Major)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Register makes n serve srv's stages to its admitted peers on
// meshnode-stage/1 and advertise the subprotocol in its gossip.
func Register(n *mesh.Node, srv *Server) error {
	return n.HandleSubprotocol(stagewire.Advertisement(), func(ctx context.Context, peer identity.EndpointID, s *quic.Stream) {
		srv.ServeStream(ctx, peer, s)
		s.CancelRead(mesh.StreamCodeDone)
		s.Close()
	})
}
