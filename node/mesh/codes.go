package mesh

import (
	"errors"

	"github.com/quic-go/quic-go"
)

// Application error codes a Node closes connections with. The peer sees the
// code and a reason string.
const (
	CodeOK                 quic.ApplicationErrorCode = 0x0
	CodeLeaving            quic.ApplicationErrorCode = 0x1 // clean shutdown, after PeerLeaving
	CodeDuplicate          quic.ApplicationErrorCode = 0x2 // a redundant second connection to the same peer
	CodeProtocol           quic.ApplicationErrorCode = 0x3 // a malformed or invalid frame
	CodeMisbehaving        quic.ApplicationErrorCode = 0x4 // a stream flood or too many rejected streams
	CodeNotAdmitted        quic.ApplicationErrorCode = 0x5 // no valid gossip within the admission timeout
	CodeUnreachable        quic.ApplicationErrorCode = 0x6 // exchanges on it time out
	CodeControlUnavailable quic.ApplicationErrorCode = 0x7 // no owner-control handler on this node
	CodeBusy               quic.ApplicationErrorCode = 0x8 // connection or peer limits reached
	CodeEvicted            quic.ApplicationErrorCode = 0x9 // the peer was dropped from the table
	CodeSelf               quic.ApplicationErrorCode = 0xa // a node connected to itself
)

// Stream error codes a Node resets streams with; the connection stays.
const (
	StreamCodeDone              quic.StreamErrorCode = 0x0  // nothing more is wanted on this stream
	StreamCodeNotAdmitted       quic.StreamErrorCode = 0x10 // the stream type needs admission first
	StreamCodeUnsupported       quic.StreamErrorCode = 0x11 // a stream type this node does not serve
	StreamCodeRejected          quic.StreamErrorCode = 0x12 // the frame was refused (forged sender, ...)
	StreamCodeTunnelUnavailable quic.StreamErrorCode = 0x13 // no local HTTP target, or it refused
	StreamCodeTimeout           quic.StreamErrorCode = 0x14 // the stream went idle
	StreamCodeShutdown          quic.StreamErrorCode = 0x15 // the node is stopping
)

// Errors of the Node API.
var (
	ErrNotServing  = errors.New("mesh: node is not serving")
	ErrClosed      = errors.New("mesh: node is closed")
	ErrSelf        = errors.New("mesh: that endpoint is this node")
	ErrUnknownPeer = errors.New("mesh: no such admitted peer")
	ErrNoAddress   = errors.New("mesh: no dialable address")
	ErrNotAdmitted = errors.New("mesh: peer did not admit this node")
	// ErrSubprotocolUnsupported: the peer reset a SUBPROTOCOL stream as
	// one it does not serve (now: a subprotocol can be switched off).
	ErrSubprotocolUnsupported = errors.New("mesh: the peer does not serve that subprotocol")
	// ErrTunnelRefused says that the peer turned an HTTP tunnel down before
	// relaying any of it to its HTTP target, so another host may be asked
	// instead. It has a method TunnelRefused() bool, reporting true, by
	// which errors.As finds it from packages that do not import mesh.
	ErrTunnelRefused error = tunnelRefusedError{}
)

type tunnelRefusedError struct{}

func (tunnelRefusedError) Error() string       { return "mesh: peer refused the HTTP tunnel" }
func (tunnelRefusedError) TunnelRefused() bool { return true }

// reset abandons both directions of a stream with code.
func reset(s *quic.Stream, code quic.StreamErrorCode) {
	s.CancelRead(code)
	s.CancelWrite(code)
}
