package wire

import "github.com/meshnode/meshnode/node/wire/nodev1"

// DecodePeerDown decodes and validates the frame of a PEER_DOWN stream
// (ValidatePeerDown). The receiver still confirms the peer unreachable
// before acting on it.
func DecodePeerDown(b []byte) (*nodev1.PeerDown, error) {
	return decode(b, new(nodev1.PeerDown), ValidatePeerDown)
}

// ValidatePeerDown checks that gen is ProtocolGeneration and peer_id is 32
// bytes.
func ValidatePeerDown(p *nodev1.PeerDown) error {
	const msg = "PeerDown"
	if err := checkGen(msg, p.GetGen()); err != nil {
		return err
	}
	return checkID(msg, "peer_id", p.GetPeerId())
}

// DecodePeerLeaving decodes and validates the frame of a PEER_LEAVING
// stream (ValidatePeerLeaving). Its peer_id must also be the sender's own
// identity: check that with CheckSender.
func DecodePeerLeaving(b []byte) (*nodev1.PeerLeaving, error) {
	return decode(b, new(nodev1.PeerLeaving), ValidatePeerLeaving)
}

// ValidatePeerLeaving checks that gen is ProtocolGeneration and peer_id is
// 32 bytes.
func ValidatePeerLeaving(p *nodev1.PeerLeaving) error {
	const msg = "PeerLeaving"
	if err := checkGen(msg, p.GetGen()); err != nil {
		return err
	}
	return checkID(msg, "peer_id", p.GetPeerId())
}
