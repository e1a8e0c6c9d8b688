package wire

import "github.com/meshnode/meshnode/node/wire/nodev1"

// DecodeDirectPathRequest decodes and validates the frame of a
// DIRECT_PATH_REQUEST stream (ValidateDirectPathRequest). Its requester_id
// must also be the sender's own identity: check that with CheckSender.
func DecodeDirectPathRequest(b []byte) (*nodev1.DirectPathRequest, error) {
	return decode(b, new(nodev1.DirectPathRequest), ValidateDirectPathRequest)
}

// ValidateDirectPathRequest checks that gen is ProtocolGeneration,
// requester_id is 32 bytes and serialized_addr is not empty.
func ValidateDirectPathRequest(r *nodev1.DirectPathRequest) error {
	const msg = "DirectPathRequest"
	if err := checkGen(msg, r.GetGen()); err != nil {
		return err
	}
	if err := checkID(msg, "requester_id", r.GetRequesterId()); err != nil {
		return err
	}
	if len(r.GetSerializedAddr()) == 0 {
		return invalid(msg, "serialized_addr", "empty")
	}
	return nil
}
