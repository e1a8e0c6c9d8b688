package wire

import (
	"errors"
	"strings"
)

// The kinds of wire failure. Every error this package returns for bad bytes
// is a *FrameError whose Kind is one of these, so errors.Is works on them.
var (
	// ErrOversize: a frame body, declared or to be sent, exceeds
	// MaxControlFrameBytes, or a body would decode to more than
	// MaxDecodedBytes.
	ErrOversize = errors.New("wire: frame too large")
	// ErrBadGeneration: a gen field is not ProtocolGeneration.
	ErrBadGeneration = errors.New("wire: bad protocol generation")
	// ErrTruncated: the stream ended inside a stream type, length prefix or
	// body, or a byte slice holds less than its length prefix declares.
	ErrTruncated = errors.New("wire: truncated frame")
	// ErrWrongStreamType: a stream type byte is unknown, reserved, not the
	// one expected, or not one that carries protobuf frames.
	ErrWrongStreamType = errors.New("wire: wrong stream type")
	// ErrInvalidMessage: a body is not valid protobuf for its message, or it
	// breaks one of the protocol's rules (an id of the wrong length, a HOST
	// without http_port, ...).
	ErrInvalidMessage = errors.New("wire: invalid message")
	// ErrForgedSender: an id that must equal the peer's connection identity
	// does not.
	ErrForgedSender = errors.New("wire: sender does not match connection identity")
)

// FrameError says what is wrong with a frame and where.
type FrameError struct {
	// Kind is one of the Err* sentinels above.
	Kind error
	// Message names the protobuf message at fault (e.g. "GossipFrame");
	// empty for framing errors.
	Message string
	// Field is the path of the offending field within Message
	// (e.g. "peers[2].endpoint_id"), or what part of the frame failed
	// ("length prefix", "body").
	Field string
	// Reason says why, e.g. "length 31, want 32".
	Reason string
	// Err is the underlying cause (an I/O or protobuf error), if any.
	Err error
}

func (e *FrameError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Message != "" || e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
		if e.Message != "" && e.Field != "" {
			b.WriteByte('.')
		}
		b.WriteString(e.Field)
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *FrameError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}
