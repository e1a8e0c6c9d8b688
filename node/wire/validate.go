package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// EndpointIDLen is the length of a node identity on the wire: an Ed25519
// public key.
const EndpointIDLen = 32

func invalid(msg, field, format string, args ...any) error {
	return &FrameError{Kind: ErrInvalidMessage, Message: msg, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func checkGen(msg string, gen uint32) error {
	if gen != ProtocolGeneration {
		return &FrameError{Kind: ErrBadGeneration, Message: msg, Field: "gen",
			Reason: fmt.Sprintf("got %d, want %d", gen, ProtocolGeneration)}
	}
	return nil
}

// checkLen holds a bytes field to an exact length.
func checkLen(msg, field string, b []byte, want int) error {
	if len(b) != want {
		return invalid(msg, field, "length %d, want %d", len(b), want)
	}
	return nil
}

func checkID(msg, field string, id []byte) error {
	return checkLen(msg, field, id, EndpointIDLen)
}

// blank is the protocol's test for a missing name: empty once trimmed.
func blank(s string) bool { return strings.TrimSpace(s) == "" }

// within re-homes an error found in a sub-message under the parent message
// msg at path, e.g. "peers[2]". It runs only on the error path, so paths
// cost nothing while frames are valid.
func within(err error, msg, path string) error {
	var fe *FrameError
	if !errors.As(err, &fe) {
		return err
	}
	e := *fe
	e.Message = msg
	if e.Field == "" {
		e.Field = path
	} else {
		e.Field = path + "." + e.Field
	}
	return &e
}

func index(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}

// CheckSender checks the id that m claims for its sender against conn, the
// Ed25519 key the peer proved in the TLS handshake, and fails with
// ErrForgedSender when they differ. It applies to the messages whose id the
// protocol binds to the connection: GossipFrame.sender_id,
// TunnelMap.owner_peer_id, PeerLeaving.peer_id and
// DirectPathRequest.requester_id; any other message is an error.
func CheckSender(m proto.Message, conn []byte) error {
	var field string
	var id []byte
	switch m := m.(type) {
	case *nodev1.GossipFrame:
		field, id = "sender_id", m.GetSenderId()
	case *nodev1.TunnelMap:
		field, id = "owner_peer_id", m.GetOwnerPeerId()
	case *nodev1.PeerLeaving:
		field, id = "peer_id", m.GetPeerId()
	case *nodev1.DirectPathRequest:
		field, id = "requester_id", m.GetRequesterId()
	default:
		return &FrameError{Kind: ErrInvalidMessage, Message: fmt.Sprintf("%T", m),
			Reason: "no field of it is bound to the sender"}
	}
	if len(conn) != EndpointIDLen || !bytes.Equal(id, conn) {
		return &FrameError{Kind: ErrForgedSender, Message: messageName(m), Field: field,
			Reason: fmt.Sprintf("claims %s, connection is %s", shortHex(id), shortHex(conn))}
	}
	return nil
}

// shortHex abbreviates an id for error messages.
func shortHex(b []byte) string {
	if len(b) > 8 {
		return hex.EncodeToString(b[:8]) + "…"
	}
	return hex.EncodeToString(b)
}
