package control

import (
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Error is an owner-control error as OwnerControlError carries it.
type Error struct {
	Code    nodev1.OwnerControlErrorCode
	Message string
	// RequestID is the request the error answers; zero for errors that
	// answer none (a bad handshake).
	RequestID uint64
	// CurrentRevision is the node's config revision, set with
	// REVISION_CONFLICT.
	CurrentRevision uint64
}

// Sentinels for errors.Is: an *Error matches the sentinel of its code.
var (
	ErrBadRequest       = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_BAD_REQUEST}
	ErrUnauthorized     = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_UNAUTHORIZED}
	ErrRevisionConflict = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_REVISION_CONFLICT}
	ErrUnsupported      = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_CONTROL_UNSUPPORTED}
	ErrEndpointRequired = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_CONTROL_ENDPOINT_REQUIRED}
	ErrUnavailable      = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_CONTROL_UNAVAILABLE}
	ErrUnknownCommand   = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_UNKNOWN_COMMAND}
	ErrInvalidHandshake = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_INVALID_HANDSHAKE}
	ErrTargetMismatch   = &Error{Code: nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_TARGET_NODE_MISMATCH}
)

func (e *Error) Error() string {
	if e.Message == "" {
		return "control: " + CodeName(e.Code)
	}
	return "control: " + CodeName(e.Code) + ": " + e.Message
}

// Is matches a sentinel (an *Error with no message) of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// CodeName is a code without its enum prefix: "REVISION_CONFLICT".
func CodeName(c nodev1.OwnerControlErrorCode) string {
	return strings.TrimPrefix(c.String(), "OWNER_CONTROL_ERROR_CODE_")
}

// ParseCodeName is CodeName's inverse.
func ParseCodeName(s string) (nodev1.OwnerControlErrorCode, bool) {
	v, ok := nodev1.OwnerControlErrorCode_value["OWNER_CONTROL_ERROR_CODE_"+s]
	return nodev1.OwnerControlErrorCode(v), ok && v != 0
}

func errorf(code nodev1.OwnerControlErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RevisionConflict is the error a ConfigStore returns when the expected
// revision is not the current one.
func RevisionConflict(current uint64) error {
	return &Error{Code: ErrRevisionConflict.Code, CurrentRevision: current,
		Message: fmt.Sprintf("the config is at revision %d", current)}
}

// envelope is e on the wire.
func (e *Error) envelope() *nodev1.OwnerControlEnvelope {
	env := wire.ErrorEnvelope(e.Code, e.Message, e.RequestID)
	if e.Code == ErrRevisionConflict.Code {
		rev := e.CurrentRevision
		env.Error.CurrentRevision = &rev
	}
	return env
}

// fromWire is the client's view of an error a node sent. An old node that
// does not know a command answers UNKNOWN_COMMAND; callers see
// CONTROL_UNSUPPORTED, and never a fallback.
func fromWire(pe *nodev1.OwnerControlError) *Error {
	e := &Error{Code: pe.GetCode(), Message: pe.GetMessage(), RequestID: pe.GetRequestId(), CurrentRevision: pe.GetCurrentRevision()}
	if e.Code == ErrUnknownCommand.Code {
		e.Code = ErrUnsupported.Code
		e.Message = "the node does not support this command (it answered UNKNOWN_COMMAND): " + e.Message
	}
	return e
}
