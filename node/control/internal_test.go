package control

import (
	"bytes"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func seededKey(t testing.TB, b byte) *identity.Key {
	t.Helper()
	k, err := identity.KeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func getConfig(id uint64, requester, target identity.EndpointID) *nodev1.OwnerControlEnvelope {
	return wire.RequestEnvelope(&nodev1.OwnerControlRequest{RequestId: id,
		GetConfig: &nodev1.OwnerControlGetConfigRequest{RequesterNodeId: requester[:], TargetNodeId: target[:]}})
}

// TestErrors: the error type's plumbing.
func TestErrors(t *testing.T) {
	e := fromWire(&nodev1.OwnerControlError{Code: ErrUnknownCommand.Code, Message: "x"})
	if !errors.Is(e, ErrUnsupported) || errors.Is(e, ErrUnknownCommand) {
		t.Fatalf("UNKNOWN_COMMAND became %v", e)
	}
	if errors.Is(&Error{Code: ErrBadRequest.Code, Message: "m"}, &Error{Code: ErrBadRequest.Code, Message: "other"}) {
		t.Fatal("an *Error with a message is not a sentinel")
	}
	if c, ok := ParseCodeName("REVISION_CONFLICT"); !ok || c != ErrRevisionConflict.Code {
		t.Fatal("ParseCodeName")
	}
	if _, ok := ParseCodeName("UNSPECIFIED"); ok {
		t.Fatal("UNSPECIFIED parsed")
	}
	var conflict *Error
	if !errors.As(RevisionConflict(3), &conflict) || conflict.CurrentRevision != 3 || conflict.envelope().GetError().GetCurrentRevision() != 3 {
		t.Fatal("RevisionConflict")
	}
	if got := (&Error{Code: ErrTargetMismatch.Code, Message: "m"}).Error(); got != "control: TARGET_NODE_MISMATCH: m" {
		t.Fatalf("Error() = %q", got)
	}
}
