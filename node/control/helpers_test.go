package control_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var (
	t0            = controltest.T0
	cert          = controltest.Cert
	waitFor       = controltest.WaitFor
	dispExecuted  = nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_EXECUTED
	dispCoalesced = nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_COALESCED
)

func key(t testing.TB, seed byte) *identity.Key { return controltest.Key(t, seed) }

func bytesOf(id identity.EndpointID) []byte { return id[:] }

// rig is node B serving owner control on a real mesh node; the owner's
// first node A (controltest.SeedClient) is the client.
type rig struct {
	*controltest.Node
	t     *testing.T
	nodeA *identity.Key
}

func newRig(t *testing.T, adjust ...func(*control.Config)) *rig {
	t.Helper()
	o := controltest.Options{}
	if len(adjust) > 0 {
		o.Config = adjust[0]
	}
	return &rig{Node: controltest.Start(t, o), t: t, nodeA: key(t, controltest.SeedClient)}
}

func (r *rig) owned() *control.Client { return r.Owned(r.t) }

func (r *rig) dial(k *identity.Key, c *nodev1.SignedNodeOwnership, timeouts control.ClientTimeouts) *control.Client {
	return r.Dial(r.t, k, c, timeouts)
}

// rawConn is a bare mesh-llm-control/1 connection to B as k, for
// sending what a well-behaved Client never would.
func (r *rig) rawConn(k *identity.Key) *quic.Conn { return rawDial(r.t, k, r.Mesh) }

// rawDial connects to n's control lane as k.
func rawDial(t testing.TB, k *identity.Key, n *mesh.Node) *quic.Conn {
	t.Helper()
	tlsConf, err := identity.ClientConfig(k, n.ID(), identity.ALPNControl)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(n.LocalAddr()), tlsConf, &quic.Config{MaxIncomingStreams: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.CloseWithError(0, "")
		tr.Close()
		udp.Close()
	})
	return c
}

// exchange opens a stream on c, writes frames (envelopes, or raw bytes),
// and returns the first envelope the server answers with.
func exchange(t *testing.T, c *quic.Conn, frames ...any) *nodev1.OwnerControlEnvelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.CancelRead(0)
	for _, f := range frames {
		switch f := f.(type) {
		case *nodev1.OwnerControlEnvelope:
			err = wire.WriteFrame(ctx, st, f)
		case []byte:
			_, err = st.Write(f)
		default:
			t.Fatalf("frame of type %T", f)
		}
		if err != nil {
			// The server may answer a bad handshake at once and stop
			// reading, before the frames after it are sent: what it
			// answered is still there to read.
			break
		}
	}
	body, err := wire.ReadFrame(ctx, st, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	env, err := wire.DecodeOwnerControlEnvelope(body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// getConfig is a get_config request from requester to target.
func getConfig(id uint64, requester, target identity.EndpointID) *nodev1.OwnerControlEnvelope {
	return wire.RequestEnvelope(&nodev1.OwnerControlRequest{RequestId: id,
		GetConfig: &nodev1.OwnerControlGetConfigRequest{RequesterNodeId: requester[:], TargetNodeId: target[:]}})
}

func wantCode(t *testing.T, err error, want *control.Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %s", err, control.CodeName(want.Code))
	}
}

func modelRef(s string) *nodev1.OwnerControlModelRef {
	return &nodev1.OwnerControlModelRef{CanonicalModelRef: s}
}
